"""Post-processing of a raw completion: small pure filters that fix what users complain about most.

Tabby-agent style: a list of small pure filters `(text, snapshot) -> text`, applied in order, where the
snapshot (`FilterContext`) holds only values copied from the completion context when post-processing starts:
no document, no clock. Each fixes one of the complaints users file most: duplicated closing brackets,
repeated suffix lines, wrong indentation, whitespace-only results. Because they are pure, the server can run
them again on the same generation at every token and for every typed-along request and get the same answer.
The check that a suggestion parses needs the live document and a time budget: it is a separate step
(codespec/context/parsecheck.py) that whoever answers applies to the text it shows."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from codespec.context.mode import indent_width
from codespec.context.stop import first_unbalanced_closer

if TYPE_CHECKING:
    from codespec.context.build import CompletionContext


@dataclass(frozen=True)
class FilterContext:
    """What a filter may read of a completion context: strings and numbers fixed when the context was built."""

    mode: str = "line"
    line_prefix: str = ""  # the cursor line before the cursor
    line_suffix: str = ""  # ... and after it
    suffix: str = ""  # the document after the cursor
    healed: str = ""  # whitespace before the cursor left out of the prompt (token healing)
    max_lines: int = 0
    indent_unit: str = "    "
    eol: str = "\n"

    @classmethod
    def of(cls, ctx: CompletionContext | FilterContext) -> FilterContext:
        if isinstance(ctx, FilterContext):
            return ctx
        return cls(mode=ctx.mode, line_prefix=ctx.line_prefix, line_suffix=ctx.line_suffix, suffix=ctx.suffix,
                   healed=ctx.healed, max_lines=ctx.max_lines, indent_unit=ctx.indent_unit, eol=ctx.eol)


Filter = Callable[[str, FilterContext], str]


def normalize_newlines(text: str, ctx: FilterContext) -> str:
    """Work in "\\n" (the model may emit "\\r\\n" in CRLF files); `to_document_eol` restores them."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def strip_healed_whitespace(text: str, ctx: FilterContext) -> str:
    """The whitespace before the cursor was left out of the prompt (token healing); the model wrote it
    again: remove it (or as much of it as the completion starts with)."""
    healed = ctx.healed
    if not healed:
        return text
    if text.startswith(healed):
        return text[len(healed) :]
    leading = len(text) - len(text.lstrip(" \t"))
    return text[min(leading, len(healed)) :] if healed.startswith(text[:leading]) else text


def limit_lines(text: str, ctx: FilterContext) -> str:
    """At most `max_lines` lines (a leading newline, the cursor's own line ending, does not count)."""
    if ctx.max_lines <= 0:
        return text
    lines = text.split("\n")
    keep = ctx.max_lines + (1 if lines and not lines[0].strip() and len(lines) > 1 else 0)
    return "\n".join(lines[:keep])


_NUMBERS = re.compile(r"\d+")


def drop_repetitive_tail(text: str, ctx: FilterContext) -> str:
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


def _suffix_lines(ctx: FilterContext) -> list[str]:
    """The lines after the cursor's line, blank ones skipped."""
    lines = ctx.suffix.split("\n")[1:]
    return [line for line in lines if line.strip()]


def _same_line(a: str, b: str) -> bool:
    """Lines equal ignoring trailing spaces; short ones (`}`, `end`) must match their indentation too."""
    a, b = a.rstrip(), b.rstrip()
    if len(a.strip()) < 4:
        return a == b
    return a.strip() == b.strip()


def trim_suffix_line_overlap(text: str, ctx: FilterContext) -> str:
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


def trim_closing_overlap(text: str, ctx: FilterContext) -> str:
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


def drop_repeated_suffix(text: str, ctx: FilterContext) -> str:
    """A completion that only repeats the rest of the line is no completion."""
    rest = ctx.line_suffix.strip()
    if rest and text.strip() == rest:
        return ""
    return text


def normalize_indentation(text: str, ctx: FilterContext) -> str:
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


def fix_first_line_indent(text: str, ctx: FilterContext) -> str:
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


def trim_trailing_whitespace(text: str, ctx: FilterContext) -> str:
    """No trailing spaces on lines, no trailing blank lines (the document's next line follows)."""
    return "\n".join(line.rstrip() for line in text.split("\n")).rstrip("\n")


def drop_whitespace_only(text: str, ctx: FilterContext) -> str:
    return text if text.strip() else ""


def to_document_eol(text: str, ctx: FilterContext) -> str:
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
    trim_trailing_whitespace,
    drop_whitespace_only,
    to_document_eol,
]


def postprocess(text: str, ctx: CompletionContext | FilterContext, filters: Sequence[Filter] = FILTERS) -> str:
    """The text to insert at the cursor: `filters` in order over a snapshot of `ctx` (empty: no suggestion).
    Pure: the same text and context give the same answer whatever happened to the document since."""
    snapshot = FilterContext.of(ctx)
    if snapshot.mode == "none":
        return ""
    for apply in filters:
        text = apply(text, snapshot)
        if not text:
            return ""
    return text
