"""Completion mode from the cursor and the syntax tree: none, a single line, or a block.

- none: inside an identifier, or text right of the cursor that a completion cannot continue before.
- block: a new line right after a block opener (`def f():`, `{`, `=>`, `do`, `then`, ...) whose body is
  still empty, or the end of such an opener line.
- line: everything else (mid-line, after a complete statement, an empty line in a block)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import tree_sitter

from codespec.context.document import Document
from codespec.context.languages import LanguageInfo

# What may stand right of the cursor for a completion to make sense: closers and punctuation.
_CONTINUABLE_AFTER = re.compile(r"[\s)\]}>\"'`;,:.]*")
_WORD_CHAR = re.compile(r"\w")
_SEARCH_LINES = 64

# Line endings that open a block, per language group. The trailing comment is stripped first.
_BRACE_OPENER = re.compile(r"(\{|=>|\(\s*\)\s*=>)\s*$")
_PY_OPENER = re.compile(r":\s*$")
_KEYWORD_OPENERS = {
    "ruby": re.compile(
        r"(^\s*(def|class|module|if|unless|while|until|case|begin|for)\b.*|\bdo(\s*\|[^|]*\|)?|\{\s*(\|[^|]*\|)?)\s*$"
    ),
    "lua": re.compile(r"(\b(then|do|repeat|else)|\bfunction\b.*\)|\{)\s*$"),
    "bash": re.compile(r"(\b(then|do|else|in)|\{|\(\))\s*$"),
}
_STRINGY = ("string", "comment", "heredoc", "template", "regex", "char_literal", "raw_string")


@dataclass(frozen=True)
class ModeDecision:
    mode: str  # "none" | "line" | "block"
    reason: str
    opener_line: int | None = None  # 0-based line of the block opener (block mode)
    opener_indent: int = 0  # its indentation width in columns


def indent_width(line: str, tab_size: int = 4) -> int:
    expanded = line.expandtabs(tab_size)
    return len(expanded) - len(expanded.lstrip())


def strip_line_comment(line: str, comment: str) -> str:
    """Drop a trailing line comment (rough: ignores comment markers inside strings)."""
    index = line.find(comment)
    if index < 0 or line[:index].count('"') % 2 or line[:index].count("'") % 2:
        return line
    return line[:index]


def is_block_opener(line: str, info: LanguageInfo) -> bool:
    code = strip_line_comment(line, info.line_comment).rstrip()
    if not code:
        return False
    if info.indent_blocks:
        return bool(_PY_OPENER.search(code)) and not code.lstrip().startswith(("#", "@"))
    pattern = _KEYWORD_OPENERS.get(info.name)
    if pattern is not None:
        return bool(pattern.search(code))
    return bool(_BRACE_OPENER.search(code))


def in_string_or_comment(tree: tree_sitter.Tree | None, byte: int) -> bool:
    if tree is None:
        return False
    node = tree.root_node.descendant_for_byte_range(byte, byte)
    while node is not None:
        if any(kind in node.type for kind in _STRINGY) and node.start_byte < byte:
            return True
        node = node.parent
    return False


def _neighbour_line(doc: Document, line: int, step: int) -> int | None:
    """The nearest non-blank line above (step -1) or below (step +1)."""
    for _ in range(_SEARCH_LINES):
        line += step
        if not 0 <= line < doc.line_count:
            return None
        if doc.line_text(line).strip():
            return line
    return None


def _body_is_empty(doc: Document, opener: int, tab_size: int, after_line: int) -> bool:
    following = _neighbour_line(doc, after_line, +1)
    if following is None:
        return True
    return indent_width(doc.line_text(following), tab_size) <= indent_width(doc.line_text(opener), tab_size)


def _opener_above_docstring(doc: Document, line: int, info: LanguageInfo) -> int:
    """A body holding only a docstring is still empty: `def f():\n    \"\"\"Doc.\"\"\"\n    |`
    is a block position. Returns the opener's line when `line` ends such a docstring, else `line`."""
    text = doc.line_text(line).strip()
    quote = text[-3:]
    if quote not in ('"""', "'''"):
        return line
    start = line
    if not (text.count(quote) >= 2 and len(text) > 3):  # not a one-line docstring: find its first line
        start = next((r for r in range(line - 1, max(line - 200, -1), -1) if quote in doc.line_text(r)), None)
        if start is None:
            return line
    if not doc.line_text(start).strip().lstrip("rRbBuU").startswith(quote):
        return line
    above = _neighbour_line(doc, start, -1)
    return above if above is not None and is_block_opener(doc.line_text(above), info) else line


def decide_mode(
    doc: Document, offset: int, info: LanguageInfo, *, tab_size: int = 4, tree: tree_sitter.Tree | None = None
) -> ModeDecision:
    """`tree`: the tree to consult (default: the document's, parsed if needed)."""
    line = doc.line_of(offset)
    text = doc.line_text(line)
    column = offset - doc.line_start(line)
    before, after = text[:column], text[column:]
    if before and after and _WORD_CHAR.match(before[-1]) and _WORD_CHAR.match(after[0]):
        return ModeDecision("none", "inside an identifier")
    if not _CONTINUABLE_AFTER.fullmatch(after):
        return ModeDecision("none", "text right of the cursor")
    if after.strip():
        return ModeDecision("line", "mid-line before closing characters")
    if in_string_or_comment(tree if tree is not None else doc.tree, doc.byte_offset(offset)):
        return ModeDecision("line", "inside a string or comment")
    if before.strip():
        if is_block_opener(before, info) and _body_is_empty(doc, line, tab_size, line):
            return ModeDecision("block", "end of a block opener", line, indent_width(text, tab_size))
        return ModeDecision("line", "end of a line")
    opener = _neighbour_line(doc, line, -1)
    if opener is not None and info.indent_blocks:
        opener = _opener_above_docstring(doc, opener, info)
    if opener is not None:
        opener_text = doc.line_text(opener)
        if is_block_opener(opener_text, info) and _body_is_empty(doc, opener, tab_size, line):
            return ModeDecision(
                "block", "empty body after a block opener", opener, indent_width(opener_text, tab_size)
            )
    return ModeDecision("line", "empty line")
