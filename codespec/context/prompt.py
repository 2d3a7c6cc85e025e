"""FIM prompt pieces: templates per model family, token counting with caches, cross-file snippets.

Prompts are built from pieces that are tokenized separately and cached (the header, the window
above the cursor line, each other document), so a keystroke re-tokenizes only the cursor line and
the suffix. Special tokens are inserted by id; document text never turns into special tokens."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from codespec import fim

if TYPE_CHECKING:  # a transformers fast tokenizer or codespec.tokenizer.TextTokenizer: no transformers import
    from transformers import PreTrainedTokenizerBase

# ----------------------------------------------------------------------------------------------- templates


@dataclass(frozen=True)
class FimTemplate:
    """One model family's fill-in-the-middle format. Markers are token strings (a single special token
    when the vocabulary has it, else tokenized as text)."""

    family: str
    prefix: str
    suffix: str
    middle: str
    repo_name: str | None = None  # repository-level format: <repo_name>NAME\n<file_sep>PATH\nTEXT ...
    file_sep: str | None = None
    suffix_first: bool = False  # SPM order

    def markers(self) -> tuple[str, ...]:
        return tuple(m for m in (self.prefix, self.suffix, self.middle, self.repo_name, self.file_sep) if m)


TEMPLATES: dict[str, FimTemplate] = {
    "qwen": FimTemplate("qwen", *fim.FIM_MARKERS, fim.REPO_NAME, fim.FILE_SEP),
    "starcoder": FimTemplate(
        "starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<repo_name>", "<file_sep>"
    ),
    "codellama": FimTemplate("codellama", "▁<PRE>", "▁<SUF>", "▁<MID>"),
    "deepseek": FimTemplate("deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
}
_FAMILY_ALIASES = {
    "qwen2.5-coder": "qwen",
    "qwen2": "qwen",
    "starcoder2": "starcoder",
    "deepseek-coder": "deepseek",
}


def single_token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int | None:
    """The id of `token` when it is one vocabulary entry (cheap: no full vocabulary copy)."""
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id is None or (token_id == tokenizer.unk_token_id and token != tokenizer.unk_token):
        return None
    return token_id


def template_for(tokenizer: PreTrainedTokenizerBase, family: str = "auto") -> FimTemplate:
    """The template for a family name, or (auto) the first whose FIM markers the vocabulary has."""
    if family != "auto":
        key = _FAMILY_ALIASES.get(family.lower(), family.lower())
        if key not in TEMPLATES:
            raise ValueError(f"unknown FIM family {family!r}; known: {', '.join(TEMPLATES)}")
        return TEMPLATES[key]
    for template in TEMPLATES.values():
        if single_token_id(tokenizer, template.prefix) is not None and single_token_id(
            tokenizer, template.middle
        ):
            return template
    return TEMPLATES["qwen"]


# ----------------------------------------------------------------------------------------------- tokens


class TokenCache:
    """Per-tokenizer memo of text -> token ids (pieces and lines repeat from keystroke to keystroke)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_entries: int = 1024) -> None:
        self.tokenizer = tokenizer
        self.max_entries = max_entries
        self._ids: OrderedDict[str, list[int]] = OrderedDict()
        self._line_counts: dict[str, int] = {}
        self._special: dict[str, list[int]] = {}
        self._templates: dict[str, FimTemplate] = {}

    def template(self, family: str) -> FimTemplate:
        template = self._templates.get(family)
        if template is None:
            template = self._templates[family] = template_for(self.tokenizer, family)
        return template

    def encode(self, text: str, *, cache: bool = True) -> list[int]:
        if not text:
            return []
        if cache and text in self._ids:
            self._ids.move_to_end(text)
            return self._ids[text]
        ids = self._encode(text)
        if cache:
            self._ids[text] = ids
            if len(self._ids) > self.max_entries:
                self._ids.popitem(last=False)
        return ids

    def _encode(self, text: str) -> list[int]:
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None or not hasattr(backend, "encode_special_tokens"):
            return list(
                self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
            )
        # The fast path: the Rust tokenizer directly, with special-token matching off for document text.
        previous = backend.encode_special_tokens
        backend.encode_special_tokens = True
        try:
            return backend.encode(text, add_special_tokens=False).ids
        finally:
            backend.encode_special_tokens = previous

    def count_line(self, line: str) -> int:
        """Tokens of one line with its newline (cheap to memoise: most lines never change)."""
        count = self._line_counts.get(line)
        if count is None:
            if len(self._line_counts) > 200_000:
                self._line_counts.clear()
            count = len(self.encode(line + "\n", cache=False))
            self._line_counts[line] = count
        return count

    def special(self, marker: str) -> list[int]:
        ids = self._special.get(marker)
        if ids is None:
            vocab_id = single_token_id(self.tokenizer, marker)
            text = " " + marker[1:] if marker.startswith("▁") else marker
            ids = [vocab_id] if vocab_id is not None else self.encode(text, cache=False)
            self._special[marker] = ids
        return ids


# ----------------------------------------------------------------------------------------------- snippets

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STOPWORDS = frozenset(
    "self this return if else elif for while in def class function func fn let const var import from "
    "and or not is none None true false True False null nil end then do int str new public private static "
    "void".split()
)


def identifiers(text: str) -> frozenset[str]:
    return frozenset(w for w in _IDENTIFIER.findall(text) if w not in _STOPWORDS and len(w) > 1)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


@dataclass(frozen=True)
class Snippet:
    uri: str
    path: str
    start_line: int  # 0-based
    text: str
    score: float

    def to_dict(self) -> dict:
        return {
            "uri": self.uri,
            "path": self.path,
            "start_line": self.start_line,
            "score": round(self.score, 4),
        }


@dataclass(frozen=True)
class Chunk:
    start_line: int
    text: str
    words: frozenset[str]


def chunk_document(text: str, window: int = 20, stride: int = 10) -> list[Chunk]:
    lines = text.replace("\r\n", "\n").split("\n")
    chunks = []
    for start in range(0, max(len(lines) - window, 0) + 1, stride):
        body = "\n".join(lines[start : start + window]).strip("\n")
        if body.strip():
            chunks.append(Chunk(start, body, identifiers(body)))
    return chunks


def rank_snippets(
    query: frozenset[str],
    documents: Iterable[tuple[str, str, Sequence[Chunk]]],
    *,
    max_tokens: int,
    count_tokens,
    min_score: float = 0.05,
    max_snippets: int = 4,
) -> list[Snippet]:
    """The best-matching non-overlapping chunks of other documents, within a token budget, best last
    (nearest the cursor's file in the prompt)."""
    scored = []
    for uri, path, chunks in documents:
        for chunk in chunks:
            score = jaccard(query, chunk.words)
            if score >= min_score:
                scored.append((score, uri, path, chunk))
    scored.sort(key=lambda item: (-item[0], item[1], item[3].start_line))
    chosen: list[Snippet] = []
    used = 0
    taken: dict[str, list[int]] = {}
    for score, uri, path, chunk in scored:
        if len(chosen) >= max_snippets:
            break
        if any(abs(chunk.start_line - other) < 20 for other in taken.get(uri, [])):
            continue  # overlaps a chosen chunk of the same file
        cost = count_tokens(chunk.text)
        if used + cost > max_tokens:
            continue
        used += cost
        taken.setdefault(uri, []).append(chunk.start_line)
        chosen.append(Snippet(uri, path, chunk.start_line, chunk.text, score))
    return list(reversed(chosen))


def render_snippets_as_comments(snippets: Sequence[Snippet], comment: str) -> str:
    """Cross-file context for families without a repository format: commented blocks."""
    blocks = []
    for snippet in snippets:
        body = "\n".join(f"{comment} {line}" if line else comment for line in snippet.text.split("\n"))
        blocks.append(f"{comment} Path: {snippet.path}\n{body}\n")
    return "".join(blocks)
