"""Training examples from a repository: files, a held-out split by file, FIM and left-to-right sequences.

A FIM example is `<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>M` where M is a tree-sitter span (a
statement, a function, a block) that starts on its own line, as when the cursor sits at the start of a
line in the editor. A left-to-right example is a window of the file's tokens. Each example records from
which position on the draft is trained: the middle for FIM, everything for left-to-right."""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from codespec import fim
from codespec.errors import CodespecError

SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", "venv", "build", "dist", ".tox"}
MAX_FILE_BYTES = 256 * 1024  # generated or vendored blobs teach the draft nothing about the user's code


@dataclass(frozen=True)
class SourceFile:
    relpath: str
    language_id: str
    text: str


@dataclass(frozen=True)
class Example:
    ids: tuple[int, ...]
    # The draft is trained on its predictions at positions train_from-1 .. len(ids)-1: the target's
    # next-token distribution exists at every position, even after the last token.
    train_from: int
    kind: str  # "fim" | "l2r" | "fim-greedy" (the target's middle) | "fim-draft" (the draft's)
    source: str  # relpath of the file

    @property
    def positions(self) -> int:
        return len(self.ids) - self.train_from + 1


@dataclass(frozen=True)
class ExampleConfig:
    seq_len: int = 256
    fim_fraction: float = 0.5
    max_middle_tokens: int = 96
    suffix_tokens: int = 32
    max_middle_lines: int = 12


def collect_files(repo: Path, option: str = "--repo") -> list[SourceFile]:
    """The repository's source files in a known language, sorted by path. `option` names it in errors."""
    from codespec.context.languages import language_id_for_path

    if not repo.is_dir():
        raise CodespecError(f"{option} {repo}: not a directory")
    found: list[SourceFile] = []
    for root, dirs, names in os.walk(repo):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(names):
            path = Path(root) / name
            language_id = language_id_for_path(name)
            if language_id == "plaintext" or path.stat().st_size > MAX_FILE_BYTES:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            if text.strip():
                found.append(SourceFile(path.relative_to(repo).as_posix(), language_id, text))
    if not found:
        raise CodespecError(f"{option} {repo}: no source files in a known language")
    return sorted(found, key=lambda f: f.relpath)


def split_files(files: Sequence[SourceFile], holdout: float, seed: int) -> tuple[list[SourceFile], list[SourceFile]]:
    """(train, held_out): a seeded hash of each path decides, so adding a file never moves the others."""
    if not 0.0 <= holdout < 1.0:
        raise CodespecError(f"--holdout must be in [0, 1), got {holdout}")
    ranked = sorted(files, key=lambda f: hashlib.sha256(f"{seed}:{f.relpath}".encode()).hexdigest())
    n_held = 0 if holdout == 0 or len(files) < 2 else max(1, round(holdout * len(files)))
    held = sorted(ranked[:n_held], key=lambda f: f.relpath)
    train = sorted(ranked[n_held:], key=lambda f: f.relpath)
    return train, held


# ----------------------------------------------------------------------------------------------- spans


def line_start_spans(file: SourceFile, max_lines: int) -> list[tuple[int, int]]:
    """(start, end) character offsets of syntax nodes that begin a line and span 1..max_lines lines.

    Without a grammar, every non-blank line is a span."""
    from codespec.context.languages import new_parser

    text = file.text
    parser = new_parser(file.language_id)
    spans: set[tuple[int, int]] = set()
    if parser is not None:
        data = text.encode("utf-8")
        tree = parser.parse(data)
        for node in _named_nodes(tree.root_node):
            start_row, end_row = node.start_point[0], node.end_point[0]
            if node.parent is None or end_row - start_row + 1 > max_lines or node.end_byte - node.start_byte < 8:
                continue
            line_start = data.rfind(b"\n", 0, node.start_byte) + 1
            if data[line_start:node.start_byte].strip():
                continue  # not the first thing on its line
            start = len(data[:node.start_byte].decode("utf-8", errors="ignore"))
            end = len(data[:node.end_byte].decode("utf-8", errors="ignore"))
            spans.add((start, end))
    if not spans:
        offset = 0
        for line in text.splitlines(keepends=True):
            stripped = line.lstrip()
            if stripped.strip():
                begin = offset + len(line) - len(stripped)
                spans.add((begin, offset + len(line.rstrip("\r\n"))))
            offset += len(line)
    return sorted(spans)


def _named_nodes(node) -> Iterator:
    stack = [node]
    while stack:
        current = stack.pop()
        if current.is_named:
            yield current
        stack.extend(reversed(current.children))


# -------------------------------------------------------------------------------------------- examples


def fim_marker_ids(tokenizer) -> tuple[int, int, int]:
    ids = tokenizer.convert_tokens_to_ids(list(fim.FIM_MARKERS))
    if any(i is None or i == tokenizer.unk_token_id for i in ids):
        raise CodespecError(f"the tokenizer has no FIM tokens ({fim.FIM_PREFIX} ...); distillation needs a FIM model")
    return tuple(ids)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def fim_prompt(tokenizer, prefix: str, suffix: str, prefix_tokens: int, suffix_tokens: int) -> list[int]:
    """Qwen2.5-Coder FIM order, prefix cut from the left and suffix from the right to fit the budgets."""
    pre, suf, mid = fim_marker_ids(tokenizer)
    prefix_ids = encode(tokenizer, prefix)[-prefix_tokens:] if prefix_tokens > 0 else []
    suffix_ids = encode(tokenizer, suffix)[:suffix_tokens] if suffix_tokens > 0 else []
    return [pre, *prefix_ids, suf, *suffix_ids, mid]


def fim_examples(file: SourceFile, tokenizer, config: ExampleConfig, rng: random.Random, count: int) -> list[Example]:
    """The middle starts where a syntax node starts its line and runs to the end of that node or of 1..N
    lines, whichever is longer (a statement, a block, a few lines of a function), cut to the token budget."""
    starts = sorted({start: end for start, end in line_start_spans(file, config.max_middle_lines)}.items())
    rng.shuffle(starts)
    examples = []
    for start, node_end in starts[:count]:
        end = max(node_end, _end_of_lines(file.text, start, rng.randint(1, config.max_middle_lines)))
        middle_ids = encode(tokenizer, file.text[start:end])[: min(config.max_middle_tokens, config.seq_len // 2)]
        suffix_budget = min(config.suffix_tokens, config.seq_len // 8)
        prefix_budget = config.seq_len - len(middle_ids) - suffix_budget - 3
        prompt = fim_prompt(tokenizer, file.text[:start], file.text[end:], prefix_budget, suffix_budget)
        ids = (*prompt, *middle_ids)
        examples.append(Example(ids, train_from=len(prompt), kind="fim", source=file.relpath))
    return examples


def _end_of_lines(text: str, start: int, lines: int) -> int:
    end = start
    for _ in range(lines):
        newline = text.find("\n", end)
        if newline < 0:
            return len(text)
        end = newline + 1
    return end - 1  # before the last newline: the suffix starts on the next line


def l2r_examples(file: SourceFile, tokenizer, config: ExampleConfig) -> list[Example]:
    ids = encode(tokenizer, file.text)
    windows = [tuple(ids[i : i + config.seq_len]) for i in range(0, len(ids), config.seq_len)]
    return [Example(w, train_from=1, kind="l2r", source=file.relpath) for w in windows if len(w) >= 16]


def build_examples(files: Sequence[SourceFile], tokenizer, config: ExampleConfig, *, seed: int,
                   max_positions: int | None = None) -> list[Example]:
    """A seeded mix of FIM and left-to-right examples from `files`, cut to about `max_positions` trained
    positions (the target's labelling cost grows with the tokens, so this is the budget knob)."""
    rng = random.Random(seed)
    l2r: list[Example] = []
    fim: list[Example] = []
    for file in files:
        windows = l2r_examples(file, tokenizer, config)
        l2r.extend(windows if config.fim_fraction < 1 else [])
        # More FIM candidates than windows: the budget (_mix) decides how many are used.
        wanted = 4 * max(1, len(windows))
        fim.extend(fim_examples(file, tokenizer, config, rng, wanted) if config.fim_fraction > 0 else [])
    rng.shuffle(l2r)
    rng.shuffle(fim)
    examples = _mix(l2r, fim, config.fim_fraction, max_positions)
    rng.shuffle(examples)
    return examples


def _mix(l2r: list[Example], fim: list[Example], fim_fraction: float, max_positions: int | None) -> list[Example]:
    """Take FIM and left-to-right examples so that about `fim_fraction` of the label *cost* (tokens through
    the target) goes to FIM, up to the budget."""
    chosen: list[Example] = []
    cost = {"fim": 0, "l2r": 0}
    budget = max_positions if max_positions is not None else sum(len(e.ids) for e in (*l2r, *fim))
    queues = {"fim": list(fim), "l2r": list(l2r)}
    while queues["fim"] or queues["l2r"]:
        total = cost["fim"] + cost["l2r"]
        want_fim = queues["fim"] and (not queues["l2r"] or cost["fim"] <= fim_fraction * max(1, total))
        kind = "fim" if want_fim else "l2r"
        example = queues[kind].pop(0)
        if total + len(example.ids) > budget and chosen:
            break
        chosen.append(example)
        cost[kind] += len(example.ids)
    return chosen


def fingerprint(examples: Sequence[Example]) -> str:
    """Identifies an example set, so that labels and checkpoints are reused only for the same data."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(f"{example.kind}:{example.train_from}:{len(example.ids)}:".encode())
        digest.update(",".join(map(str, example.ids)).encode())
    return digest.hexdigest()[:16]


def greedy_choice(examples: Sequence[Example], fraction: float, seed: int) -> list[int]:
    """Indices of a seeded `fraction` of the FIM examples, whose middle becomes the target's own greedy
    continuation (sequence-level distillation: at decode time the draft continues the target's output)."""
    return _fim_choice(examples, fraction, seed * 7919 + 17, exclude=())


def onpolicy_choice(examples: Sequence[Example], fraction: float, seed: int, exclude: Sequence[int]) -> list[int]:
    """Indices of a seeded `fraction` of the FIM examples (counted over all of them), none in `exclude`,
    whose middle becomes the draft's own greedy continuation (on-policy data: where the draft would go)."""
    return _fim_choice(examples, fraction, seed * 7919 + 29, exclude=exclude)


def _fim_choice(examples: Sequence[Example], fraction: float, salt: int, exclude: Sequence[int]) -> list[int]:
    fim = [i for i, e in enumerate(examples) if e.kind == "fim"]
    free = [i for i in fim if i not in set(exclude)]
    if fraction <= 0 or not free:
        return []
    count = max(1, round(fraction * len(fim)))
    return sorted(random.Random(salt).sample(free, min(count, len(free))))


def with_middles(examples: Sequence[Example], chosen: Sequence[int], middles: Sequence[Sequence[int]],
                 kind: str) -> list[Example]:
    """`examples` with the middle of each chosen FIM example replaced (by a model's continuation), as `kind`."""
    replaced = list(examples)
    for i, middle in zip(chosen, middles, strict=True):
        e = examples[i]
        replaced[i] = Example((*e.ids[: e.train_from], *middle), e.train_from, kind, e.source)
    return replaced
