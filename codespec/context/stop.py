"""Stop rules for streamed generation: `rule(text_so_far)` -> length of text to keep, or None.

They are called after every decode step with the whole text so far, so they do O(new text) work:
a block rule remembers how far it has judged the text and only looks at the lines after that."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from codespec.context.mode import indent_width

_OPENING = {"(": ")", "[": "]", "{": "}"}
_CLOSING = {")", "]", "}"}
_CLOSER_WORDS = ("end", "fi", "done", "esac", "until")


def _bracket_steps(text: str) -> Iterator[tuple[int, int]]:
    """(index, +1 or -1) for each bracket outside simple one-line string literals: a quote opens a
    literal that its own quote or the line's end closes (so an apostrophe in a comment costs one line)."""
    quote, escaped = "", False
    for index, char in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote or char == "\n":
                quote = ""
        elif char in "\"'`":
            quote = char
        elif char in _OPENING:
            yield index, 1
        elif char in _CLOSING:
            yield index, -1


def bracket_depth(text: str) -> int:
    """Net open brackets in `text`."""
    return sum(step for _, step in _bracket_steps(text))


def first_unbalanced_closer(text: str) -> int | None:
    """Index of the first closing bracket that closes something opened before `text`."""
    depth = 0
    for index, step in _bracket_steps(text):
        depth += step
        if depth < 0:
            return index
    return None


def starts_with_closer(stripped: str) -> bool:
    if stripped[:1] in _CLOSING:
        return True
    word = stripped.split(None, 1)[0] if stripped else ""
    return word.rstrip(";") in _CLOSER_WORDS


@dataclass
class LineStop:
    """Single-line mode: stop at the end of the line (a leading empty line is allowed: the completion
    may start on the next line), or before text that repeats the rest of the cursor's line."""

    line_suffix: str = ""
    healed: str = ""  # whitespace before the cursor the model is expected to write again

    def __call__(self, text: str) -> int | None:
        if self.healed and text.startswith(self.healed):
            keep = self._judge(text[len(self.healed) :])
            return None if keep is None else keep + len(self.healed)
        return self._judge(text)

    def _judge(self, text: str) -> int | None:
        newline = text.find("\n")
        if newline >= 0 and not text[:newline].strip():
            second = text.find("\n", newline + 1)
            return second if second >= 0 else None
        if newline >= 0:
            return newline
        rest = self.line_suffix.strip()
        if rest and text.endswith(rest):
            keep = len(text) - len(rest)
            if text[:keep].strip() and bracket_depth(text[:keep]) == 0:
                return len(text[:keep].rstrip())
        return None


@dataclass
class BlockStop:
    """Block mode: stop when a line returns to the opener's indentation (keeping a closer line the
    suffix does not already have), when a bracket opened before the cursor closes, at `max_lines`,
    or before a line that repeats the first line of the suffix."""

    opener_indent: int
    line_prefix: str = ""  # text of the cursor line before the cursor (without `healed`)
    healed: str = ""  # whitespace before the cursor left out of the prompt
    suffix_first_line: str = ""  # first non-blank line after the cursor line
    suffix_has_closer: bool = False  # that line already closes the block (`}` / `end` at opener level)
    max_lines: int = 16
    tab_size: int = 4
    _judged: str = field(default="", repr=False)  # text whose complete lines are judged
    _lines: int = field(default=0, repr=False)
    _depth: int = field(default=0, repr=False)

    def __call__(self, text: str) -> int | None:
        if not text.startswith(self._judged):
            self._judged, self._lines, self._depth = "", 0, 0
        position = len(self._judged)
        while True:
            newline = text.find("\n", position)
            line = text[position:] if newline < 0 else text[position:newline]
            verdict = self._judge(line, position, complete=newline >= 0)
            if verdict is not None:
                return len(text[:verdict].rstrip())  # no trailing blank lines
            if newline < 0:
                return None
            self._judged = text[: newline + 1]
            position = newline + 1

    def _healed_first(self, line: str) -> str:
        """The first line as it will stand in the document: whitespace left out of the prompt before
        the cursor is there whether or not the model writes it again."""
        leading = line[: len(line) - len(line.lstrip(" \t"))]
        if self.healed and self.healed.startswith(leading):
            return self.healed + line[len(leading) :]
        return line

    def _judge(self, line: str, position: int, *, complete: bool) -> int | None:
        first = position == 0
        effective = self.line_prefix + self._healed_first(line) if first else line
        stripped = effective.strip()
        continues_opener = first and bool(self.line_prefix.strip())  # cursor at the end of the opener line
        if stripped and not continues_opener and indent_width(effective, self.tab_size) <= self.opener_indent:
            if (
                not complete
                and stripped not in _CLOSER_WORDS
                and any(w.startswith(stripped) for w in _CLOSER_WORDS)
            ):
                return None  # "e" may still become "end"
            if starts_with_closer(stripped) and not self.suffix_has_closer:
                return position + len(line) if complete else None
            return position
        closer = first_unbalanced_closer(line) if self._depth == 0 else None
        if closer is not None:
            return position + (closer if self.suffix_has_closer else closer + 1)
        if not complete:
            return None
        if stripped and not first and effective.rstrip() == self.suffix_first_line.rstrip():
            return position
        self._depth = max(self._depth + bracket_depth(line), 0)
        if stripped and not continues_opener:
            self._lines += 1
            if self._lines >= self.max_lines:
                return position + len(line)
        return None


def stop_now(text: str) -> int | None:
    return 0
