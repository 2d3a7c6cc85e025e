"""A text document that applies LSP incremental edits and keeps a tree-sitter tree in step.

Positions are (line, character) with `character` counted in the negotiated position encoding
(utf-16 code units by default, utf-8 bytes or utf-32 code points). Lines end at "\\n", "\\r\\n" or
a lone "\\r", as LSP defines them. Offsets (`offset_at`, `position_at`) are indices into `.text`.

Each edit updates the line index locally, records the edit on the old tree with `Tree.edit`, and the
tree is re-parsed incrementally (lazily: several edits between two reads cost one parse)."""

from __future__ import annotations

import re
import time
from bisect import bisect_right
from collections import deque

import tree_sitter

from codespec.context.languages import canonical_name, new_parser

# Files bigger than this are kept as plain text: a full parse would stall a keystroke.
MAX_PARSE_BYTES = 4_000_000

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_LONE_CR = re.compile(r"\r(?!\n)")

Position = tuple[int, int]
Range = tuple[Position, Position]


def normalize_encoding(encoding: object) -> str:
    """'utf-16' | 'utf-8' | 'utf-32' from any spelling (lsprotocol's PositionEncodingKind included)."""
    name = str(getattr(encoding, "value", encoding) or "utf-16").lower().replace("_", "-")
    name = {"utf16": "utf-16", "utf8": "utf-8", "utf32": "utf-32"}.get(name, name)
    if name not in ("utf-8", "utf-16", "utf-32"):
        raise ValueError(f"unsupported position encoding: {encoding!r}")
    return name


def utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _unit_width(char: str, encoding: str) -> int:
    code = ord(char)
    if encoding == "utf-16":
        return 2 if code > 0xFFFF else 1
    if encoding == "utf-8":
        return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
    return 1


def units_to_index(line: str, character: int, encoding: str) -> int:
    """Index into `line` for a character count in `encoding`; clamped to the line, rounded down
    when it falls inside a multi-unit character."""
    if character <= 0:
        return 0
    if encoding == "utf-32" or line.isascii():
        return min(character, len(line))
    units = 0
    for index, char in enumerate(line):
        width = _unit_width(char, encoding)
        if units + width > character:
            return index
        units += width
    return len(line)


def index_to_units(line: str, index: int, encoding: str) -> int:
    prefix = line[:index]
    if encoding == "utf-32" or prefix.isascii():
        return len(prefix)
    if encoding == "utf-8":
        return utf8_len(prefix)
    return len(prefix) + sum(1 for char in prefix if ord(char) > 0xFFFF)


class Document:
    def __init__(
        self,
        uri: str,
        language_id: str,
        text: str,
        version: int = 0,
        encoding: object = "utf-16",
        *,
        max_parse_bytes: int = MAX_PARSE_BYTES,
    ) -> None:
        self.uri = uri
        self.language_id = language_id
        self.language = canonical_name(language_id)
        self.version = version
        self.encoding = normalize_encoding(encoding)
        self.max_parse_bytes = max_parse_bytes
        self._parser: tree_sitter.Parser | None = new_parser(language_id)
        self._tree: tree_sitter.Tree | None = None
        self._tree_stale = False  # edits recorded on _tree but not re-parsed yet
        self.parse_count = 0  # full + incremental parses, for tests and benchmarks
        self.edit_count = 0
        self.deferred_parses = 0  # parses given up for a keystroke's budget (see tree_within)
        self._skip_attempts = 0
        self._backoff = 2
        self._edit_starts: deque[tuple[int, int]] = deque(maxlen=4096)  # (edit_count, start offset)
        self._replace_all(text)

    # ----- reading -------------------------------------------------------------------------------

    @property
    def text(self) -> str:
        return self._text

    @property
    def line_count(self) -> int:
        return len(self._starts)

    @property
    def tree(self) -> tree_sitter.Tree | None:
        if self._parser is None or len(self._bytes) > self.max_parse_bytes:
            return None
        if self._tree is None or self._tree_stale:
            self._tree = (
                self._parser.parse(self._bytes, self._tree) if self._tree else self._parser.parse(self._bytes)
            )
            self._tree_stale = False
            self.parse_count += 1
        return self._tree

    @property
    def tree_is_fresh(self) -> bool:
        """True when `.tree` would not need a parse."""
        return self._tree is not None and not self._tree_stale

    def tree_within(self, budget_s: float) -> tree_sitter.Tree | None:
        """The tree, re-parsed only when that fits in `budget_s`; otherwise the previous tree with the
        edits applied (node positions shifted, structure as before the edits) and the parse is left for
        a later read. Incremental parses are usually far under a millisecond, but error recovery (an
        unclosed string or bracket while typing) can re-parse most of a large file; a keystroke must
        not wait for that. The first parse is never skipped; `.tree` always parses."""
        if self._parser is None or len(self._bytes) > self.max_parse_bytes:
            return None
        if self._tree is None or not self._tree_stale:
            return self.tree
        if self._skip_attempts > 0:  # a recent attempt ran out of time: do not pay for another yet
            self._skip_attempts -= 1
            return self._tree
        source, deadline, cut = self._bytes, time.perf_counter() + budget_s, False

        def read(offset: int, _point) -> bytes:
            nonlocal cut
            if time.perf_counter() > deadline:
                cut = True
                return b""
            return source[offset : offset + 2048]

        tree = self._parser.parse(read, self._tree)
        if cut:  # back off: in a long error state most keystrokes should not pay for a failed attempt
            self.deferred_parses += 1
            self._backoff = min(self._backoff * 2, 32)
            self._skip_attempts = self._backoff
            return self._tree
        self._backoff = 2
        self._tree, self._tree_stale = tree, False
        self.parse_count += 1
        return tree

    def line_start(self, line: int) -> int:
        return self._starts[line]

    def line_end(self, line: int) -> int:
        """Offset of the end of the line's content (before its line break)."""
        if line + 1 >= len(self._starts):
            return len(self._text)
        following = self._starts[line + 1]
        return following - 2 if self._text.startswith("\r\n", following - 2) else following - 1

    def line_text(self, line: int) -> str:
        return self._text[self._starts[line] : self.line_end(line)]

    def line_of(self, offset: int) -> int:
        return bisect_right(self._starts, offset) - 1

    def offset_at(self, line: int, character: int) -> int:
        """Offset into `.text` of an LSP position; clamped to the document and to the line."""
        if line < 0:
            return 0
        if line >= len(self._starts):
            return len(self._text)
        start = self._starts[line]
        return start + units_to_index(self._text[start : self.line_end(line)], character, self.encoding)

    def position_at(self, offset: int) -> Position:
        offset = max(0, min(offset, len(self._text)))
        line = self.line_of(offset)
        start = self._starts[line]
        offset = min(offset, self.line_end(line))
        return line, index_to_units(self._text[start:offset], offset - start, self.encoding)

    def byte_offset(self, offset: int) -> int:
        line = self.line_of(offset)
        return self._byte_starts[line] + utf8_len(self._text[self._starts[line] : offset])

    def point_at(self, offset: int) -> tuple[int, int]:
        """tree-sitter (row, byte column) of an offset; rows count "\\n" only."""
        byte = self.byte_offset(offset)
        if not self._lone_cr:
            line = self.line_of(offset)
            return line, byte - self._byte_starts[line]
        row = self._bytes.count(b"\n", 0, byte)
        return row, byte - (self._bytes.rfind(b"\n", 0, byte) + 1)

    # ----- editing -------------------------------------------------------------------------------

    def lowest_edit_since(self, edit_count: int) -> int:
        """The lowest offset any edit after `edit_count` started at (len(text) when none): callers
        cache what they derived from the text before some offset while it stays untouched."""
        if edit_count >= self.edit_count:
            return len(self._text)
        if not self._edit_starts or self._edit_starts[0][0] > edit_count + 1:
            return 0  # older than the log: assume the worst
        lowest = len(self._text)
        for count, start in reversed(self._edit_starts):
            if count <= edit_count:
                break
            lowest = min(lowest, start)
        return lowest

    def apply_change(self, range: Range | None, text: str, version: int | None = None) -> None:  # noqa: A002
        """Apply one LSP content change: `range` None replaces the whole text."""
        self.edit_count += 1
        if range is None:
            self._edit_starts.append((self.edit_count, 0))
            self._replace_all(text)
            self._tree = None
        else:
            (start_line, start_char), (end_line, end_char) = range
            start = self.offset_at(start_line, start_char)
            end = self.offset_at(end_line, end_char)
            if end < start:
                start, end = end, start
            self._edit_starts.append((self.edit_count, start))
            self._replace(start, end, text)
        if version is not None:
            self.version = version

    def _replace_all(self, text: str) -> None:
        self._text = text
        self._bytes = text.encode("utf-8", "surrogatepass")
        self._lone_cr = bool(_LONE_CR.search(text))
        self._starts, self._byte_starts = [0], [0]
        self._scan_line_starts(0, 0, len(text), self._starts, self._byte_starts)

    def _scan_line_starts(
        self, begin: int, begin_byte: int, end: int, starts: list[int], byte_starts: list[int]
    ) -> None:
        """Append the line starts after each line break in text[begin:end] (bytes counted along)."""
        previous, previous_byte = begin, begin_byte
        for match in _LINE_BREAK.finditer(self._text, begin, end):
            start = match.end()
            previous_byte += utf8_len(self._text[previous:start])
            previous = start
            starts.append(start)
            byte_starts.append(previous_byte)
            if match.group() == "\r" and not self._lone_cr:
                self._lone_cr = True

    def _replace(self, start: int, end: int, new: str) -> None:
        old_text, starts, byte_starts = self._text, self._starts, self._byte_starts
        first_line, last_line = self.line_of(start), self.line_of(end)
        start_byte, old_end_byte = self.byte_offset(start), self.byte_offset(end)
        start_point, old_end_point = self.point_at(start), self.point_at(end)
        new_bytes = new.encode("utf-8", "surrogatepass")

        self._text = old_text[:start] + new + old_text[end:]
        self._bytes = self._bytes[:start_byte] + new_bytes + self._bytes[old_end_byte:]
        delta, delta_bytes = len(new) - (end - start), len(new_bytes) - (old_end_byte - start_byte)
        if self._lone_cr:  # rare: recount (an edit may have joined "\r" and "\n")
            self._lone_cr = bool(_LONE_CR.search(self._text))

        # Re-scan from the line before the edit (a "\r" there may join a "\n" that was inserted)
        # to the first unchanged line start; later line starts just shift.
        rescan_from = max(first_line - 1, 0)
        new_starts = starts[: rescan_from + 1]
        new_byte_starts = byte_starts[: rescan_from + 1]
        has_tail = last_line + 1 < len(starts)
        rescan_to = starts[last_line + 1] + delta if has_tail else len(self._text)
        self._scan_line_starts(
            starts[rescan_from], byte_starts[rescan_from], rescan_to, new_starts, new_byte_starts
        )
        if has_tail:
            if new_starts[-1] != rescan_to:  # an edit split a "\r\n": fall back to a full scan
                self._replace_all(self._text)
            else:
                new_starts.extend(s + delta for s in starts[last_line + 2 :])
                new_byte_starts.extend(b + delta_bytes for b in byte_starts[last_line + 2 :])
                self._starts, self._byte_starts = new_starts, new_byte_starts
        else:
            self._starts, self._byte_starts = new_starts, new_byte_starts

        if self._tree is not None:
            new_end = start + len(new)
            self._tree.edit(
                start_byte=start_byte,
                old_end_byte=old_end_byte,
                new_end_byte=start_byte + len(new_bytes),
                start_point=start_point,
                old_end_point=old_end_point,
                new_end_point=self.point_at(new_end),
            )
            self._tree_stale = True

    # ----- what-if parsing (post-processing) -----------------------------------------------------

    def parse_with_insertion(self, offset: int, inserted: str) -> tree_sitter.Tree | None:
        """The tree the document would have with `inserted` at `offset`, re-using the current tree."""
        tree = self.tree
        if tree is None or self._parser is None:
            return None
        start_byte = self.byte_offset(offset)
        inserted_bytes = inserted.encode("utf-8", "surrogatepass")
        row, column = self.point_at(offset)
        lines = inserted_bytes.split(b"\n")
        end_point = (row + len(lines) - 1, (column if len(lines) == 1 else 0) + len(lines[-1]))
        copy = tree.copy()
        copy.edit(
            start_byte=start_byte,
            old_end_byte=start_byte,
            new_end_byte=start_byte + len(inserted_bytes),
            start_point=(row, column),
            old_end_point=(row, column),
            new_end_point=end_point,
        )
        return self._parser.parse(self._bytes[:start_byte] + inserted_bytes + self._bytes[start_byte:], copy)

    def __repr__(self) -> str:
        return (
            f"Document({self.uri!r}, {self.language_id!r}, version={self.version}, lines={self.line_count})"
        )
