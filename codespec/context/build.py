"""build_context: document + cursor -> CompletionContext (mode, FIM prompt and ids, stop rule, streams).

Prompt stability (for the engine's KV prefix reuse): the prefix window starts on a fixed grid of
document offsets and only moves when the prefix outgrows its budget, by a large step; everything
before the cursor (neighbour snippets, header, window) is a deterministic function of text that a
typing user does not change, so consecutive prompts share all tokens up to the cursor.

Layouts (ContextConfig.layout): "psm" puts the whole suffix after the FIM suffix marker, so every
keystroke re-prefills it; "near-suffix" keeps only the rest of the cursor line (plus
`near_suffix_lines` lines) there and moves the lines further below in front of the prefix as file
context. That far block starts at a grid line counted back from the document's end, so typing and
Enter (which change nothing below the cursor line) leave it, and every token before the line
prefix, unchanged.

One file for one job: the window, header, suffix layouts, neighbours and lookup streams below are the
parts of one prompt, each kept stable for the others' sake."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from codespec.context.block import DEFAULT_BUDGET, FileBlock, block_sections, make_block, repo_name_of
from codespec.context.document import Document
from codespec.context.languages import (
    IMPORT_LINE_PATTERNS,
    IMPORT_TYPES,
    LanguageInfo,
    language_info,
)
from codespec.context.mode import ModeDecision, decide_mode, indent_width, is_block_opener
from codespec.context.prompt import (
    Chunk,
    FimTemplate,
    Snippet,
    TokenCache,
    chunk_document,
    identifiers,
    rank_snippets,
    render_snippets_as_comments,
)
from codespec.context.repeat import realigned_suggestion, repeat_line_predictions
from codespec.context.stop import BlockStop, LineStop, starts_with_closer, stop_now
from codespec.decode.api import TokenStream

if TYPE_CHECKING:  # a transformers fast tokenizer or codespec.tokenizer.TextTokenizer: no transformers import
    from transformers import PreTrainedTokenizerBase

_CONTAINERS = (
    "module",
    "program",
    "source_file",
    "translation_unit",
    "chunk",
    "block",
    "body",
    "declaration_list",
)
_CHARS_PER_TOKEN_SAMPLE = (
    "def parse_args(argv: list[str]) -> argparse.Namespace:\n"
    "    parser = argparse.ArgumentParser(description=__doc__)\n"
    "    for name, value in sorted(options.items()):\n"
    "        if value is None:\n            continue\n"
    "    return parser.parse_args(argv)\n"
    "function update(state, action) {\n  switch (action.type) {\n    case 'add':\n"
    "      return { ...state, items: [...state.items, action.item] };\n  }\n}\n"
)


@dataclass(frozen=True)
class ContextConfig:
    max_prompt_tokens: int = 1536  # prefix + suffix of the current file
    suffix_fraction: float = 0.08  # share of max_prompt_tokens for the suffix (see docs/benchmarks.md)
    window_step_fraction: float = 0.125  # the window start moves in steps of this share of the prefix
    min_suffix_tokens: int = 32
    header_fraction: float = 0.2  # imports + enclosing signatures: at most this share of the prefix
    snap_lines: int = 24  # how far below the grid line to look for a syntax boundary
    max_neighbour_tokens: int = 512  # cross-file snippets
    max_neighbours: int = 4
    neighbour_min_score: float = 0.05
    neighbour_refresh_lines: int = 16  # neighbours are re-ranked when the cursor enters another block
    max_block_lines: int = 16
    # Leave trailing whitespace before the cursor out of the prompt (token healing). Off: on HumanEval
    # infilling with the 0.5B it fixed one task and broke three (docs/benchmarks.md).
    heal_whitespace: bool = False
    parse_budget_s: float = 0.003  # a keystroke's re-parse; over it, the edited previous tree is used
    family: str = "auto"  # FIM template: auto | qwen | starcoder | codellama | deepseek
    repo_name: str = ""  # repository format; default: the file's parent directory name
    max_document_chars: int = 5_000_000
    max_stream_chars: int = 60_000  # per extra stream (prompt-lookup drafter)
    max_streams: int = 8
    max_recent_completions: int = 8
    tab_size: int = 4
    # Prompt layout: "psm" (the whole suffix after the FIM suffix marker) or "near-suffix" (see the
    # module docstring; measured in docs/benchmarks.md "Prompt layout and typing").
    layout: str = "anchored"
    near_suffix_lines: int = 0  # near-suffix layout: lines after the cursor line kept after the marker
    far_step_fraction: float = 0.25  # the far block's start moves in steps of this share of its budget
    # Anchored layout (codespec/context/block.py): the cursor window's and the pinned block's budgets (the
    # server sets them from the machine's prefill speed, PromptBudget); the window's start moves in steps
    # of this share of its budget when typing outgrows it.
    window_tokens: int = DEFAULT_BUDGET.window_tokens
    block_tokens: int = DEFAULT_BUDGET.block_tokens
    anchored_step_fraction: float = 0.5


LAYOUTS = ("psm", "near-suffix", "anchored")
# build_context(block=COLD): the anchored layout without a pinned block (its KV is not computed yet).
COLD = object()


@dataclass
class CompletionContext:
    mode: str  # "none" | "line" | "block"
    prompt: str = ""
    prefix: str = ""  # the current file's text the model sees before the cursor (header + window)
    suffix: str = ""  # the document after the cursor (for stop rules), whatever the layout shows of it
    language: str = "plaintext"
    stop: Callable[[str], int | None] = stop_now
    max_lines: int = 0
    extra_streams: list[list[int]] = field(default_factory=list)
    neighbours: list[Snippet] = field(default_factory=list)
    # Beyond the design contract (all optional):
    prompt_ids: list[int] = field(default_factory=list)  # the prompt tokenized piecewise (specials by id)
    reason: str = ""  # why this mode
    stop_rule: str = ""  # the stop rule in words
    line_prefix: str = ""  # the cursor line before / after the cursor
    healed: str = ""  # trailing whitespace of line_prefix left out of the prompt (token healing)
    line_suffix: str = ""
    layout: str = "psm"
    near_suffix: str = ""  # near-suffix layout: what follows the FIM suffix marker
    far_suffix: str = ""  # near-suffix layout: the lines below, placed before the prefix
    header: str = ""  # imports and enclosing signatures kept from above the window
    block: FileBlock | None = field(default=None, repr=False)  # anchored layout: the pinned block, if any
    pinned_tokens: int = 0  # anchored layout: prompt tokens before the cursor window (the block's part)
    window_start_line: int = 0
    indent_unit: str = "    "  # the document's indentation style
    eol: str = "\n"  # the document's line break; the prompt and completions use "\n"
    family: str = "qwen"
    uri: str = ""
    line: int = 0
    character: int = 0
    offset: int = 0
    document: Document | None = field(default=None, repr=False)  # live: read only by the parse check
    opener_indent: int = 0
    doc_edit_count: int = 0  # the document's edit_count when this context was built
    parse_budget_s: float = 0.003  # the parse check (parsecheck.py) spends at most 10 of these

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "reason": self.reason,
            "language": self.language,
            "stop_rule": self.stop_rule,
            "max_lines": self.max_lines,
            "prefix": self.prefix,
            "suffix": self.suffix,
            "layout": self.layout,
            "near_suffix": self.near_suffix,
            "far_suffix": self.far_suffix,
            "block": self.block.to_dict() if self.block else None,
            "pinned_tokens": self.pinned_tokens,
            "header": self.header,
            "window_start_line": self.window_start_line,
            "neighbours": [s.to_dict() for s in self.neighbours],
            "prompt": self.prompt,
            "prompt_tokens": len(self.prompt_ids),
            "extra_streams": [len(s) for s in self.extra_streams],
            "indent_unit": self.indent_unit,
            "eol": self.eol,
            "family": self.family,
        }


# ----------------------------------------------------------------------------------------------- caches


class ContextCache:
    """What survives between keystrokes: token memos, other documents' tokens and chunks, the chosen
    neighbour snippets and each document's indentation style."""

    def __init__(self) -> None:
        self._tokens: dict[int, tuple[PreTrainedTokenizerBase, TokenCache]] = {}
        self._streams: dict[tuple[int, str], tuple[int, list[int]]] = {}
        self._chunks: dict[str, tuple[int, list[Chunk]]] = {}
        self._neighbours: dict[tuple, list[Snippet]] = {}
        self._styles: dict[str, tuple[int, str]] = {}
        self._above: dict[tuple, tuple[Document, int, int, Any]] = {}
        self.stream_tokenizations = 0  # for tests: how often a document was tokenized

    def tokens(self, tokenizer: PreTrainedTokenizerBase) -> TokenCache:
        entry = self._tokens.get(id(tokenizer))
        if entry is None or entry[0] is not tokenizer:
            entry = (tokenizer, TokenCache(tokenizer))
            self._tokens[id(tokenizer)] = entry
        return entry[1]

    def stream(self, tokens: TokenCache, doc: Document, max_chars: int) -> list[int]:
        key = (id(tokens.tokenizer), doc.uri)
        cached = self._streams.get(key)
        if cached is None or cached[0] != doc.version:
            self.stream_tokenizations += 1
            cached = (doc.version, tokens.encode(doc.text[:max_chars].replace("\r\n", "\n"), cache=False))
            self._streams[key] = cached
            if len(self._streams) > 64:
                self._streams.pop(next(iter(self._streams)))
        return cached[1]

    def chunks(self, doc: Document) -> list[Chunk]:
        cached = self._chunks.get(doc.uri)
        if cached is None or cached[0] != doc.version:
            cached = (doc.version, chunk_document(doc.text[:200_000]))
            self._chunks[doc.uri] = cached
            if len(self._chunks) > 64:
                self._chunks.pop(next(iter(self._chunks)))
        return cached[1]

    def neighbours(self, key: tuple, compute: Callable[[], list[Snippet]]) -> list[Snippet]:
        if key not in self._neighbours:
            if len(self._neighbours) > 256:
                self._neighbours.clear()
            self._neighbours[key] = compute()
        return self._neighbours[key]

    def above(self, doc: Document, key: tuple, guard_line: int, compute: Callable[[], Any]) -> Any:
        """A value derived from the text above `guard_line` (and the tree there), kept while no edit
        touches that text: the tree's shape above the cursor can change when the user opens a string
        or bracket below, and the prompt start must not change with it."""
        full_key = (doc.uri, *key)
        guard = doc.line_start(guard_line) if guard_line < doc.line_count else len(doc.text)
        entry = self._above.get(full_key)
        if entry is not None and entry[0] is doc and doc.lowest_edit_since(entry[1]) >= entry[2]:
            if entry[2] == guard:
                self._above[full_key] = (doc, doc.edit_count, guard, entry[3])
                return entry[3]
        value = compute()
        if len(self._above) > 1024:
            self._above.clear()
        self._above[full_key] = (doc, doc.edit_count, guard, value)
        return value

    def indent_unit(self, doc: Document, tab_size: int) -> str:
        cached = self._styles.get(doc.uri)
        if cached is None or abs(doc.version - cached[0]) > 256:
            cached = (doc.version, detect_indent_unit(doc.text, tab_size))
            self._styles[doc.uri] = cached
        return cached[1]


DEFAULT_CACHE = ContextCache()


def detect_indent_unit(text: str, tab_size: int = 4) -> str:
    """The document's indentation step: "\\t" or N spaces (the most common indentation increase)."""
    tabs = spaces = 0
    steps: Counter[int] = Counter()
    previous = 0
    for line in text[:400_000].splitlines()[:5000]:
        if not line.strip():
            continue
        if line.startswith("\t"):
            tabs += 1
        elif line.startswith(" "):
            spaces += 1
        width = indent_width(line, tab_size)
        if width > previous and not line.startswith("\t"):
            steps[width - previous] += 1
        previous = width
    if tabs > spaces:
        return "\t"
    if not steps:
        return " " * tab_size
    step = steps.most_common(1)[0][0]
    return " " * step if step in (2, 3, 4, 8) else " " * tab_size


def detect_eol(text: str) -> str:
    newline = text.find("\n")
    return "\r\n" if newline > 0 and text[newline - 1] == "\r" else "\n"


# ----------------------------------------------------------------------------------------------- helpers


def uri_to_path(uri: str) -> str:
    parsed = urlparse(uri)
    if parsed.scheme in ("file", ""):
        return unquote(parsed.path) or uri
    return uri


def display_path(uri: str, relative_to: str | None = None) -> str:
    path = uri_to_path(uri)
    if relative_to and os.path.isabs(path) and os.path.isabs(relative_to):
        base = os.path.dirname(os.path.dirname(relative_to)) or "/"
        try:
            return os.path.relpath(path, base)
        except ValueError:
            pass
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) if len(parts) > 1 else path


def _none(reason: str, doc: Document | None, line: int, character: int) -> CompletionContext:
    return CompletionContext(
        mode="none",
        reason=reason,
        stop_rule="stop at once",
        language=doc.language if doc else "plaintext",
        uri=doc.uri if doc else "",
        line=line,
        character=character,
        document=doc,
    )


def _chars_per_token(tokens: TokenCache) -> float:
    ratio = getattr(tokens, "_chars_per_token", None)
    if ratio is None:
        ratio = len(_CHARS_PER_TOKEN_SAMPLE) / max(
            len(tokens.encode(_CHARS_PER_TOKEN_SAMPLE, cache=False)), 1
        )
        tokens._chars_per_token = ratio  # type: ignore[attr-defined]
    return ratio


def _grid_line(doc: Document, grid: int, step_chars: int) -> int:
    """The first line starting at or after offset grid * step_chars."""
    offset = grid * step_chars
    line = doc.line_of(offset)
    return line if doc.line_start(line) == offset else line + 1


def choose_window(
    doc: Document,
    cursor_line: int,
    budget: int,
    step_chars: int,
    tokens: TokenCache,
    header_of: Callable[[int], tuple[str, int]],
) -> tuple[int, str]:
    """The prefix window's first line and the header kept from above it.

    The start is the earliest grid line (the first line at or after a multiple of `step_chars`) from
    which lines [start, cursor_line) plus that start's header fit in `budget` tokens. Typing at the
    cursor moves no grid line above it, so the start only changes when the budget overflows, and
    then by a whole step."""
    chosen, chosen_header = cursor_line, header_of(cursor_line)
    used = 0
    for grid in range(doc.line_start(cursor_line) // step_chars, -1, -1):
        grid_line = min(_grid_line(doc, grid, step_chars), cursor_line)
        for row in range(chosen - 1, grid_line - 1, -1):
            used += tokens.count_line(doc.line_text(row))
        if grid_line == chosen:
            continue
        header = header_of(grid_line)
        if used + header[1] > budget:
            break
        chosen, chosen_header = grid_line, header
    return chosen, chosen_header[0]


def _is_boundary(doc: Document, line: int, tree) -> bool:
    text = doc.line_text(line)
    stripped = text.lstrip()
    if not stripped:
        return False
    if tree is None:
        return line > 0 and not doc.line_text(line - 1).strip()
    offset = doc.line_start(line) + len(text) - len(stripped)
    point = doc.point_at(offset)
    node = tree.root_node.named_descendant_for_point_range(point, point)
    if node is None:
        return False
    while node.parent is not None and node.parent.start_point == node.start_point:
        node = node.parent
    if tuple(node.start_point) != tuple(point) or node.parent is None or node.type == "ERROR":
        return False
    parent = node.parent.type
    return node.parent.parent is None or any(kind in parent for kind in _CONTAINERS)


def snap_to_boundary(doc: Document, start: int, end: int, tree) -> int:
    """The first line in [start, end) where a statement begins (else `start`)."""
    if start == 0:
        return 0
    for line in range(start, end):
        if _is_boundary(doc, line, tree):
            return line
    return start


def _signature_end(doc: Document, info: LanguageInfo, first: int, limit: int) -> int:
    """The last row of a scope's signature: the first row (up to `limit`) that opens the block."""
    for row in range(first, limit + 1):
        if is_block_opener(doc.line_text(row), info):
            return row
    return first


def _header_rows(
    doc: Document, info: LanguageInfo, window_start: int, tokens: TokenCache, budget: int, tree
) -> list[int]:
    """Rows above the window worth keeping, within `budget` tokens: the signatures of the scopes the
    window starts inside (found from the window's first line, not the cursor: text above the cursor
    does not change while typing, so neither does the header), then top-level imports in file order."""
    if window_start == 0:
        return []
    signature_rows: list[int] = []
    if tree is not None and info.scope_types:
        start_byte = doc.byte_offset(doc.line_start(window_start))
        node = tree.root_node.descendant_for_byte_range(start_byte, start_byte)
        while node is not None:
            if node.type in info.scope_types and node.start_point.row < window_start <= node.end_point.row:
                first = node.start_point.row
                last = _signature_end(doc, info, first, min(first + 5, window_start - 1))
                signature_rows[:0] = range(first, last + 1)
            node = node.parent
    import_rows: list[int] = []
    import_types = IMPORT_TYPES.get(info.name)
    pattern = IMPORT_LINE_PATTERNS.get(info.name)
    if tree is not None and import_types:
        for child in tree.root_node.children:
            if child.start_point.row >= window_start:
                break
            if child.type in import_types:
                import_rows.extend(
                    range(child.start_point.row, min(child.end_point.row, window_start - 1) + 1)
                )
    elif pattern is not None:
        import_rows = [row for row in range(window_start) if pattern.search(doc.line_text(row))]
    kept: set[int] = set()
    used = 0
    for row in dict.fromkeys(signature_rows + import_rows):
        cost = tokens.count_line(doc.line_text(row))
        if used + cost > budget:
            break
        kept.add(row)
        used += cost
    return sorted(kept)


def _suffix_text(doc: Document, line: int, line_suffix: str, budget: int, tokens: TokenCache) -> str:
    rest = _lines_within(doc, line + 1, budget - tokens.count_line(line_suffix), tokens)
    return "\n".join([line_suffix, *rest])


def _near_suffix_text(doc: Document, line: int, line_suffix: str, lines: int) -> str:
    """The rest of the cursor line and the next `lines` lines, each with its line break (so the model
    sees where the cursor line ends)."""
    last = min(line + lines, doc.line_count - 1)
    parts = [line_suffix, *(doc.line_text(row) for row in range(line + 1, last + 1))]
    return "\n".join(parts) + ("\n" if last + 1 < doc.line_count else "")


def far_suffix_start(doc: Document, first: int, step_chars: int) -> int | None:
    """The first line at or after `first` that holds a grid point: a multiple of `step_chars`
    counted back from the document's end. Counted from the end, the grid does not move when text is
    typed above it, and the choice depends only on lines from `first` on, never on the cursor line.
    In the last step of the document (no grid point left) it is `first` itself: still a function of
    the text below the cursor line, so typing and Enter keep it."""
    end = len(doc.text)
    for row in range(max(first, 0), doc.line_count):
        here = end - doc.line_start(row)
        after = end - doc.line_start(row + 1) if row + 1 < doc.line_count else 0
        if here // step_chars > after // step_chars:
            return row
    return first if 0 <= first < doc.line_count else None


def _far_suffix_text(doc: Document, start: int, budget: int, tokens: TokenCache) -> str:
    """Lines from `start` within `budget` tokens: a function of the text from `start` on only."""
    return "\n".join(_lines_within(doc, start, budget, tokens))


def _lines_within(doc: Document, start: int, budget: int, tokens: TokenCache) -> list[str]:
    """The lines from `start` on whose tokens (with their line breaks) fit in `budget`."""
    parts: list[str] = []
    used = 0
    for row in range(start, doc.line_count):
        text = doc.line_text(row)
        used += tokens.count_line(text)
        if used > budget:
            break
        parts.append(text)
    return parts


def _next_nonblank(doc: Document, line: int) -> str:
    for following in range(line + 1, min(line + 64, doc.line_count)):
        text = doc.line_text(following)
        if text.strip():
            return text
    return ""


def _make_stop(decision: ModeDecision, ctx: CompletionContext, doc: Document, config: ContextConfig, info):
    if decision.mode == "line":
        return LineStop(
            ctx.line_suffix, ctx.healed
        ), "line: end of line, or before text repeating the rest of the line"
    following = _next_nonblank(doc, ctx.line)
    closes = (
        bool(following.strip())
        and not info.indent_blocks
        and indent_width(following, config.tab_size) <= decision.opener_indent
        and starts_with_closer(following.strip())
    )
    rule = BlockStop(
        opener_indent=decision.opener_indent,
        line_prefix=ctx.line_prefix[: len(ctx.line_prefix) - len(ctx.healed)],
        healed=ctx.healed,
        suffix_first_line=following,
        suffix_has_closer=closes,
        max_lines=config.max_block_lines,
        tab_size=config.tab_size,
    )
    closer = (
        "" if info.indent_blocks else " (closer already in the suffix)" if closes else " (its closer kept)"
    )
    words = (
        f"block: a line back at indentation <= {decision.opener_indent}{closer}, an outer bracket closing, "
        f"a line repeating the suffix, or {config.max_block_lines} lines"
    )
    return rule, words


# ----------------------------------------------------------------------------------------------- main


def build_context(
    doc: Document,
    line: int,
    character: int,
    *,
    tokenizer: PreTrainedTokenizerBase,
    other_docs: Sequence[Document] = (),
    recent_completions: Sequence[str] = (),
    config: ContextConfig = ContextConfig(),  # noqa: B008 (frozen dataclass: shared default is safe)
    cache: ContextCache | None = None,
    block: FileBlock | object | None = None,
) -> CompletionContext:
    """The completion context at (line, character), in the document's position encoding.

    `block` (anchored layout): the pinned block to use; None makes one from the document as it is now,
    COLD uses none (a prompt of the cursor window alone).

    Never raises for bad input: binary content, huge files and positions past the end give a
    context with mode "none" and a `reason`."""
    cache = cache or DEFAULT_CACHE
    if len(doc.text) > config.max_document_chars:
        return _none(f"document too large ({len(doc.text) / 1e6:.1f} M characters)", doc, line, character)
    if "\x00" in doc.text:
        return _none("binary content (NUL bytes)", doc, line, character)
    if line < 0 or character < 0 or line >= doc.line_count:
        return _none(f"position {line}:{character} is past the end of the document", doc, line, character)
    info = language_info(doc.language_id)
    offset = doc.offset_at(line, character)
    tree = doc.tree_within(config.parse_budget_s)
    decision = decide_mode(doc, offset, info, tab_size=config.tab_size, tree=tree)
    line_text = doc.line_text(line)
    column = offset - doc.line_start(line)
    ctx = _none(decision.reason, doc, line, character)
    ctx.line_prefix, ctx.line_suffix = line_text[:column], line_text[column:]
    ctx.offset = offset
    ctx.doc_edit_count, ctx.parse_budget_s = doc.edit_count, config.parse_budget_s
    ctx.eol = detect_eol(doc.text)
    ctx.indent_unit = cache.indent_unit(doc, config.tab_size)
    ctx.language = info.name
    if decision.mode == "none":
        return ctx

    tokens = cache.tokens(tokenizer)
    template = tokens.template(config.family)
    ctx.mode, ctx.family, ctx.opener_indent = decision.mode, template.family, decision.opener_indent
    ctx.max_lines = 1 if decision.mode == "line" else config.max_block_lines

    if config.layout == "anchored":
        return _anchored(ctx, doc, line, tokens, template, info, config, cache, other_docs,
                         recent_completions, block, decision)
    prefix_budget = int(config.max_prompt_tokens * (1 - config.suffix_fraction))
    suffix_budget = config.max_prompt_tokens - prefix_budget
    # Token healing: trailing spaces/tabs before the cursor stay out of the prompt (BPE tokens carry
    # their leading space: a prompt ending in "    " makes models indent again); the model writes
    # them itself and `strip_healed_whitespace` removes them from the completion.
    line_prefix = ctx.line_prefix[-4 * prefix_budget :]
    if config.heal_whitespace:
        kept = line_prefix.rstrip(" \t")
        ctx.healed = line_prefix[len(kept) :]
        line_prefix = kept
    header_budget = int(prefix_budget * config.header_fraction)
    window_budget = max(prefix_budget - tokens.count_line(line_prefix), 0)
    step_chars = max(64, int(prefix_budget * config.window_step_fraction * _chars_per_token(tokens)))

    def header_of(start: int) -> tuple[str, int]:
        def compute() -> tuple[str, int]:
            rows = _header_rows(doc, info, start, tokens, header_budget, tree)
            return "".join(doc.line_text(r) + "\n" for r in rows), sum(
                tokens.count_line(doc.line_text(r)) for r in rows
            )

        return cache.above(doc, ("header", start, header_budget, id(tokens)), start, compute)

    start, header = choose_window(doc, line, window_budget, step_chars, tokens, header_of)
    snap_end = min(start + config.snap_lines, line)
    start = cache.above(
        doc, ("snap", start, snap_end), snap_end, lambda: snap_to_boundary(doc, start, snap_end, tree)
    )
    window = "".join(doc.line_text(row) + "\n" for row in range(start, line))
    ctx.header, ctx.window_start_line = header, start
    ctx.prefix = header + window + line_prefix
    ctx.stop, ctx.stop_rule = _make_stop(decision, ctx, doc, config, info)
    # The suffix follows the cursor in the prompt, so it is never shared with the previous prompt:
    # keep it in proportion to the prefix actually there (short near the top of a file).
    prefix_tokens = len(tokens.encode(header)) + len(tokens.encode(window)) + len(tokens.encode(line_prefix))
    ratio = config.suffix_fraction / (1 - config.suffix_fraction)
    suffix_budget = min(suffix_budget, max(config.min_suffix_tokens, int(prefix_tokens * ratio)))
    ctx.suffix = _suffix_text(doc, line, ctx.line_suffix, suffix_budget, tokens)
    ctx.layout = config.layout
    prompt_suffix = ctx.suffix
    if config.layout == "near-suffix":
        # The far block sits before the prefix, where its tokens are shared with the previous prompt:
        # it gets the whole suffix budget, not one in proportion to the prefix (which changes per
        # keystroke and would move its end).
        near_lines = max(config.near_suffix_lines, 0)
        ctx.near_suffix = prompt_suffix = _near_suffix_text(doc, line, ctx.line_suffix, near_lines)
        # The near suffix and the far section's framing (paths, repository name, markers) come out of
        # the same budget; both are fixed while typing at the cursor, so the far block's end is too.
        path = display_path(doc.uri)
        framing = sum(
            tokens.count_line(text)
            for text in (f"{path} (below the cursor)", path, config.repo_name or os.path.basename(os.path.dirname(path)))
        )
        far_budget = config.max_prompt_tokens - prefix_budget - len(tokens.encode(prompt_suffix)) - framing - 4
        far_step = max(64, int(far_budget * config.far_step_fraction * _chars_per_token(tokens)))
        far_start = far_suffix_start(doc, line + 1 + near_lines, far_step)
        if far_start is not None:
            ctx.far_suffix = _far_suffix_text(doc, far_start, far_budget, tokens)
    elif config.layout != "psm":
        raise ValueError(f"unknown prompt layout {config.layout!r}; known: {', '.join(LAYOUTS)}")

    ctx.neighbours = _neighbours(doc, line, other_docs, cache, tokens, config)
    ctx.prompt, ctx.prompt_ids = assemble_prompt(
        template,
        tokens,
        doc,
        ctx.neighbours,
        [header, window, line_prefix],
        prompt_suffix,
        info,
        config,
        far_suffix=ctx.far_suffix,
    )
    ctx.extra_streams = _extra_streams(doc, other_docs, recent_completions, cache, tokens, config, ctx)
    return ctx


def _anchored(ctx: CompletionContext, doc: Document, line: int, tokens: TokenCache, template: FimTemplate,
              info: LanguageInfo, config: ContextConfig, cache: ContextCache, other_docs, recent_completions,
              block, decision: ModeDecision) -> CompletionContext:
    """The anchored layout: [neighbours, the file's pinned block] then FIM [window, line prefix | near suffix].
    The window starts on a grid (steps of `anchored_step_fraction` of its budget), so typing at the cursor
    keeps every token before the line prefix until the window outgrows its budget."""
    if block is None:
        block = make_block(doc, line, tokens, config.block_tokens,
                           _neighbours(doc, line, other_docs, cache, tokens, config),
                           hole_tokens=config.window_tokens // 2)  # within the window as it moves (by halves)
    elif block is COLD:
        block = None
    line_prefix = ctx.line_prefix[-4 * config.window_tokens :]
    if config.heal_whitespace:
        kept = line_prefix.rstrip(" \t")
        ctx.healed, line_prefix = line_prefix[len(kept) :], kept
    # The lines above get the whole budget, whatever the cursor line holds: typing on the line then never
    # moves the window's start (only lines added above it can, by half the budget at a time).
    budget = config.window_tokens
    step_chars = max(64, int(config.window_tokens * config.anchored_step_fraction * _chars_per_token(tokens)))
    start, _ = choose_window(doc, line, budget, step_chars, tokens, lambda row: ("", 0))
    window = "".join(doc.line_text(row) + "\n" for row in range(start, line))
    ctx.window_start_line, ctx.prefix, ctx.block = start, window + line_prefix, block
    ctx.stop, ctx.stop_rule = _make_stop(decision, ctx, doc, config, info)
    ctx.suffix = _suffix_text(doc, line, ctx.line_suffix, max(config.min_suffix_tokens, config.window_tokens), tokens)
    ctx.layout = "anchored"
    ctx.near_suffix = _near_suffix_text(doc, line, ctx.line_suffix, max(config.near_suffix_lines, 0))
    ctx.neighbours = list(block.neighbours) if block is not None else []
    ctx.prompt, ctx.prompt_ids, ctx.pinned_tokens = assemble_anchored(
        template, tokens, doc, block, [window, line_prefix], ctx.near_suffix, info, config)
    ctx.extra_streams = _extra_streams(doc, other_docs, recent_completions, cache, tokens, config, ctx)
    return ctx


class PromptWriter:
    """A prompt built piece by piece: special markers by id, document text tokenized (and memoised) per piece."""

    def __init__(self, tokens: TokenCache) -> None:
        self.tokens = tokens
        self.texts: list[str] = []
        self.ids: list[int] = []

    def special(self, marker: str | None) -> None:
        if marker:
            self.texts.append(" " + marker[1:] if marker.startswith("▁") else marker)  # sentencepiece space
            self.ids.extend(self.tokens.special(marker))

    def plain(self, text: str) -> None:
        if text:
            self.texts.append(text)
            self.ids.extend(self.tokens.encode(text))

    def fim(self, template: FimTemplate, prefix_pieces: Sequence[str], suffix: str) -> tuple[str, list[int]]:
        """The FIM part (in the template's order) after what was written; returns the whole prompt."""
        if template.suffix_first:
            self.special(template.suffix)
            self.plain(suffix)
        self.special(template.prefix)
        for piece in prefix_pieces:
            self.plain(piece)
        if not template.suffix_first:
            self.special(template.suffix)
            self.plain(suffix)
        self.special(template.middle)
        return "".join(self.texts), self.ids


def as_comments(title: str, text: str, comment: str) -> str:
    """A file section for templates without a repository format: a commented block."""
    body = "\n".join(f"{comment} {line}" if line else comment for line in text.split("\n"))
    return f"{comment} Path: {title}\n{body}\n"


def assemble_anchored(template: FimTemplate, tokens: TokenCache, doc: Document, block: FileBlock | None,
                      prefix_pieces: Sequence[str], suffix: str, info: LanguageInfo,
                      config: ContextConfig) -> tuple[str, list[int], int]:
    """The anchored prompt's text, ids and how many ids come before the cursor window (the pinned part:
    a function of the block and the file's path only)."""
    out = PromptWriter(tokens)
    path = display_path(doc.uri)
    if block is not None and not (block.neighbours or block.above or block.below):
        block = None  # nothing to pin (a file that fits in the window): the prompt is the window alone
    if block is not None and template.file_sep:
        out.special(template.repo_name)
        out.plain(repo_name_of(uri_to_path(doc.uri), config.repo_name) + "\n")
        for snippet in block.neighbours:
            out.special(template.file_sep)
            out.plain(f"{snippet.path}\n{snippet.text}\n")
        for title, text in block_sections(path, block):
            out.special(template.file_sep)
            out.plain(f"{title}\n{text}\n")
        out.special(template.file_sep)
        out.plain(path + "\n")
    elif block is not None:
        comment = info.line_comment
        pinned = render_snippets_as_comments(block.neighbours, comment) if block.neighbours else ""
        out.plain(pinned + "".join(as_comments(title, text, comment) for title, text in block_sections(path, block)))
    pinned_tokens = len(out.ids)
    text, ids = out.fim(template, prefix_pieces, suffix)
    return text, ids, pinned_tokens


def _neighbours(doc, line, other_docs, cache: ContextCache, tokens: TokenCache, config) -> list[Snippet]:
    others = [d for d in other_docs if d.uri != doc.uri and "\x00" not in d.text[:10_000]]
    if not others or config.max_neighbour_tokens <= 0:
        return []
    block = line // config.neighbour_refresh_lines
    key = (doc.uri, block, tuple((d.uri, d.version) for d in others), id(tokens), config.max_neighbour_tokens)

    def compute() -> list[Snippet]:
        first = max(0, (block - 2) * config.neighbour_refresh_lines)
        last = min(doc.line_count, (block + 1) * config.neighbour_refresh_lines)
        query = identifiers("\n".join(doc.line_text(row) for row in range(first, last)))
        here = uri_to_path(doc.uri)
        documents = [(d.uri, display_path(d.uri, here), cache.chunks(d)) for d in others]
        return rank_snippets(
            query,
            documents,
            max_tokens=config.max_neighbour_tokens,
            count_tokens=lambda text: len(tokens.encode(text)),
            min_score=config.neighbour_min_score,
            max_snippets=config.max_neighbours,
        )

    return cache.neighbours(key, compute)


def assemble_prompt(
    template: FimTemplate,
    tokens: TokenCache,
    doc: Document,
    neighbours: Sequence[Snippet],
    prefix_pieces: Sequence[str],
    suffix: str,
    info: LanguageInfo,
    config: ContextConfig,
    far_suffix: str = "",
) -> tuple[str, list[int]]:
    """The prompt text and its ids; each piece is tokenized (and memoised) on its own. `far_suffix`
    (near-suffix layout) goes after the neighbour snippets, before the current file's section."""
    out = PromptWriter(tokens)
    pieces = list(prefix_pieces)
    here = uri_to_path(doc.uri)
    if (neighbours or far_suffix) and template.file_sep:
        out.special(template.repo_name)
        out.plain(repo_name_of(here, config.repo_name) + "\n")
        for snippet in neighbours:
            out.special(template.file_sep)
            out.plain(f"{snippet.path}\n{snippet.text}\n")
        if far_suffix:
            out.special(template.file_sep)
            out.plain(f"{display_path(doc.uri)} (below the cursor)\n{far_suffix}\n")
        out.special(template.file_sep)
        out.plain(display_path(doc.uri) + "\n")
    elif neighbours or far_suffix:
        comments = render_snippets_as_comments(neighbours, info.line_comment) if neighbours else ""
        if far_suffix:
            comments += as_comments(f"{display_path(doc.uri)} (below the cursor)", far_suffix, info.line_comment)
        pieces.insert(0, comments)
    return out.fim(template, pieces, suffix)


def _extra_streams(doc, other_docs, recent_completions, cache: ContextCache, tokens: TokenCache, config,
                   ctx: CompletionContext | None = None):
    """What prompt lookup may copy from beside the prompt, each stream with its source: the other open files,
    the suggestions shown earlier (each with its line up to the anchor), and predictions of the cursor line's
    rest (repeat-line, realigned) that start with the prompt's last tokens so a draft can be taken at once."""
    streams: list[TokenStream] = []
    for other in other_docs[: config.max_streams]:
        if other.uri != doc.uri and "\x00" not in other.text[:10_000]:
            streams.append(TokenStream(cache.stream(tokens, other, config.max_stream_chars), "files"))
    recent = [text for text in list(recent_completions)[-config.max_recent_completions :] if text]
    for text in recent:
        streams.append(TokenStream(tokens.encode(text), "suggestions"))
    if ctx is not None and ctx.prompt_ids:
        streams += _predicted_streams(ctx, doc, recent, tokens)
    return [s for s in streams if s]


PREDICTION_ANCHOR = 8  # prompt tokens a predicted stream starts with: the lookup matches them at the first step


def _predicted_streams(ctx: CompletionContext, doc: Document, recent: list[str],
                       tokens: TokenCache) -> list[TokenStream]:
    """The cursor line's rest as the line above (re-typed with one name or number changed) or an earlier
    suggestion (realigned to what was typed since) would have it (codespec/context/repeat.py)."""
    typed = ctx.line_prefix
    if not typed.strip() or ctx.line_suffix.strip():
        return []  # nothing typed to align, or the rest of the line is already there
    healed = ctx.healed  # whitespace taken off the prompt's line prefix: the model types it
    anchor = list(ctx.prompt_ids[-PREDICTION_ANCHOR:])
    above = [doc.line_text(row) for row in range(max(0, ctx.line - 24), ctx.line)]
    found: list[tuple[str, str]] = [(rest, "repeat-line") for rest in repeat_line_predictions(above, typed)]
    for text in reversed(recent):
        rest = realigned_suggestion(text, typed)
        if rest is not None:
            found.append((rest, "realigned"))
    streams, seen = [], set()
    for rest, source in found:
        if rest in seen:
            continue
        seen.add(rest)
        streams.append(TokenStream(anchor + list(tokens.encode(healed + rest)), source))
    return streams
