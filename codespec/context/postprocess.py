"""Post-processing of a raw completion: small pure filters that fix what users complain about most.

Tabby-agent style: a list of small pure filters `(text, ctx) -> text`, applied in order. Each fixes one of the
complaints users file most: duplicated closing brackets, repeated suffix lines, wrong indentation,
whitespace-only results, output that does not parse."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from codespec.context.mode import indent_width
from codespec.context.stop import first_unbalanced_closer

if TYPE_CHECKING:
    from codespec.context.build import CompletionContext

Filter = Callable[[str, "CompletionContext"], str]


def normalize_newlines(text: str, ctx: CompletionContext) -> str:
    """Work in "\\n" (the model may emit "\\r\\n" in CRLF files); `to_document_eol` restores them."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def strip_healed_whitespace(text: str, ctx: CompletionContext) -> str:
    """The whitespace before the cursor was left out of the prompt (token healing); the model wrote it
    again: remove it (or as much of it as the completion starts with)."""
    healed = ctx.healed
    if not healed:
        return text
    if text.startswith(healed):
        return text[len(healed) :]
    leading = len(text) - len(text.lstrip(" \t"))
    return text[min(leading, len(healed)) :] if healed.startswith(text[:leading]) else text


def limit_lines(text: str, ctx: CompletionContext) -> str:
    """At most `max_lines` lines (a leading newline, the cursor's own line ending, does not count)."""
    if ctx.max_lines <= 0:
        return text
    lines = text.split("\n")
    keep = ctx.max_lines + (1 if lines and not lines[0].strip() and len(lines) > 1 else 0)
    return "\n".join(lines[:keep])


_NUMBERS = re.compile(r"\d+")


def drop_repetitive_tail(text: str, ctx: CompletionContext) -> str:
    """A small model looping (`f(1)`, `f(2)`, `f(3)`, ... until the token limit): three or more final
    lines that differ only in numbers keep just the first of them."""
    lines = text.split("\n")
    if len(lines) < 3:
        return text
    shape = [_NUMBERS.sub("0", line.strip()) for line in lines]
    run = 1
    while run < len(lines) and shape[-run - 1] == shape[-1] and shape[-1]:
        run += 1
    if run < 3:
        return text
    return "\n".join(lines[: len(lines) - run + 1])


def _suffix_lines(ctx: CompletionContext) -> list[str]:
    """The lines after the cursor's line, blank ones skipped."""
    lines = ctx.suffix.split("\n")[1:]
    return [line for line in lines if line.strip()]


def _same_line(a: str, b: str) -> bool:
    """Lines equal ignoring trailing spaces; short ones (`}`, `end`) must match their indentation too."""
    a, b = a.rstrip(), b.rstrip()
    if len(a.strip()) < 4:
        return a == b
    return a.strip() == b.strip()


def trim_suffix_line_overlap(text: str, ctx: CompletionContext) -> str:
    """Cut at the first completion line that repeats the line right after the cursor's line (the
    model running into the suffix); a completion whose first line already repeats it is dropped."""
    if ctx.line_suffix.strip():
        return text
    following = _suffix_lines(ctx)
    if not following:
        return text
    lines = text.split("\n")
    effective = [ctx.line_prefix + lines[0], *lines[1:]]
    for index, line in enumerate(effective):
        if not line.strip() or not _same_line(line, following[0]):
            continue
        rest = [a for a in effective[index:] if a.strip()]
        repeats = all(_same_line(a, b) for a, b in zip(rest, following, strict=False))
        if repeats or len(following[0].strip()) >= 4:
            return "\n".join(lines[:index])
    return text


def _closing_point(text: str, open_quote: str) -> int | None:
    """Index of the first character that closes something opened before the completion: the quote
    of a string the cursor is in, or a bracket opened before the cursor."""
    start = 0
    if open_quote:
        escaped = False
        for index, char in enumerate(text):
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == open_quote:
                return index
            elif char == "\n":
                start = index + 1
                break
        else:
            return None
    closer = first_unbalanced_closer(text[start:])
    return None if closer is None else start + closer


def _open_quote(line_prefix: str) -> str:
    """The quote character of a one-line string the cursor is inside, if any (rough)."""
    quote, escaped = "", False
    for char in line_prefix:
        if escaped:
            escaped = False
        elif char == "\\" and quote:
            escaped = True
        elif quote:
            if char == quote:
                quote = ""
        elif char in "\"'`":
            quote = char
    return quote


def trim_closing_overlap(text: str, ctx: CompletionContext) -> str:
    """No duplicated `)`, `]`, `}` or quotes: when the completion closes what the rest of the cursor's
    line already closes, cut the completion there."""
    rest = ctx.line_suffix.strip()
    if not rest or not text:
        return text
    point = _closing_point(text, _open_quote(ctx.line_prefix))
    if point is None:
        return text
    tail = text[point:].strip()
    if rest.startswith(tail) or tail.startswith(rest):
        return text[:point].rstrip(" \t")
    return text


def drop_repeated_suffix(text: str, ctx: CompletionContext) -> str:
    """A completion that only repeats the rest of the line is no completion."""
    rest = ctx.line_suffix.strip()
    if rest and text.strip() == rest:
        return ""
    return text


def normalize_indentation(text: str, ctx: CompletionContext) -> str:
    """Indent the way the document does: tabs in tab-indented files, spaces in space-indented ones."""
    lines = text.split("\n")
    if len(lines) < 2:
        return text
    unit = ctx.indent_unit or "    "
    body = lines[1:]
    if unit == "\t" and any(line.startswith(" ") for line in body):
        widths = [indent_width(line) for line in body if line.strip() and line.startswith(" ")]
        step = _gcd_step(widths)
        step = 4 if not step or step % 4 == 0 else step  # one deep line alone does not show the step
        body = [_spaces_to_tabs(line, step) for line in body]
    elif unit != "\t" and any(line.startswith("\t") for line in body):
        body = [_tabs_to_spaces(line, unit) for line in body]
    return "\n".join([lines[0], *body])


def _gcd_step(widths: Sequence[int]) -> int:
    step = 0
    for width in widths:
        a, b = step, width
        while b:
            a, b = b, a % b
        step = a
    return step


def _spaces_to_tabs(line: str, step: int) -> str:
    stripped = line.lstrip(" \t")
    width = indent_width(line[: len(line) - len(stripped)], step)
    return "\t" * (width // step) + " " * (width % step) + stripped


def _tabs_to_spaces(line: str, unit: str) -> str:
    stripped = line.lstrip(" \t")
    leading = line[: len(line) - len(stripped)]
    return leading.replace("\t", unit) + stripped


def fix_first_line_indent(text: str, ctx: CompletionContext) -> str:
    """The cursor already stands at the line's indentation (an editor's auto-indent): drop extra leading
    whitespace the model put on the first line, unless the following lines show that deeper level is meant."""
    if not ctx.line_prefix or ctx.line_prefix.strip() or ctx.healed:
        return text
    first, _, rest = text.partition("\n")
    if first == first.lstrip():
        return text
    siblings = [line for line in rest.split("\n") if line.strip()]
    # Deeper is meant only when the next line sits below the first line at the column the model put it at
    # (one unit further after a block opener). A model that wrote the block as if from column 0 puts the
    # next lines at their real columns: then only the first line's extra whitespace is wrong.
    first_column = indent_width(ctx.line_prefix) + indent_width(first)
    child_step = indent_width(ctx.indent_unit or "    ") if _opens_block(first) else 0
    if not siblings or indent_width(siblings[0]) < first_column + child_step:
        return first.lstrip() + text[len(first) :]
    return text


def _opens_block(line: str) -> bool:
    return line.rstrip().endswith((":", "{", "(", "[", "=>", " do", " then"))


def _error_count(tree) -> int:
    """ERROR and MISSING nodes, visiting only subtrees that contain one."""
    if tree is None:
        return 0
    count = 0
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            count += 1
        stack.extend(child for child in node.children if child.has_error or child.is_missing)
    return count


def prefer_parsable(text: str, ctx: CompletionContext) -> str:
    """Insert the candidate into the document and keep the longest truncation (at line ends) that
    adds no syntax errors; the full text when none does. Skipped when the document changed since the
    context was built (the offsets would be stale) or its tree is not fresh within the parse budget;
    memoised per context (the server post-processes the same stream again and again)."""
    doc = ctx.document
    if doc is None or "\n" not in text.strip("\n") or doc.edit_count != ctx.doc_edit_count:
        return text
    memo = ctx.memo.setdefault("prefer_parsable", {})
    if text in memo:
        return memo[text]
    tree = doc.tree_within(ctx.parse_budget_s)
    if tree is None or not doc.tree_is_fresh:
        return text
    baseline = _error_count(tree)
    lines = text.split("\n")
    deadline = time.perf_counter() + 10 * ctx.parse_budget_s
    chosen = text
    for keep in range(len(lines), 0, -1):
        candidate = "\n".join(lines[:keep]).rstrip()
        if not candidate.strip() or time.perf_counter() > deadline:
            break
        if _error_count(doc.parse_with_insertion(ctx.offset, candidate.replace("\n", ctx.eol))) <= baseline:
            chosen = candidate
            break
    if len(memo) < 64:
        memo[text] = chosen
    return chosen


def trim_trailing_whitespace(text: str, ctx: CompletionContext) -> str:
    """No trailing spaces on lines, no trailing blank lines (the document's next line follows)."""
    return "\n".join(line.rstrip() for line in text.split("\n")).rstrip("\n")


def drop_whitespace_only(text: str, ctx: CompletionContext) -> str:
    return text if text.strip() else ""


def to_document_eol(text: str, ctx: CompletionContext) -> str:
    return text.replace("\n", ctx.eol) if ctx.eol != "\n" else text


FILTERS: list[Filter] = [
    normalize_newlines,
    strip_healed_whitespace,
    limit_lines,
    drop_repetitive_tail,
    trim_suffix_line_overlap,
    trim_closing_overlap,
    drop_repeated_suffix,
    normalize_indentation,
    fix_first_line_indent,
    prefer_parsable,
    trim_trailing_whitespace,
    drop_whitespace_only,
    to_document_eol,
]


def postprocess(text: str, ctx: CompletionContext, filters: Sequence[Filter] = FILTERS) -> str:
    if ctx.mode == "none":
        return ""
    for apply in filters:
        text = apply(text, ctx)
        if not text:
            return ""
    return text
