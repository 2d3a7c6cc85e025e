import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codespec.context.document import Document

_UNIT_BYTES = {"utf-8": ("utf-8", 1), "utf-16": ("utf-16-le", 2), "utf-32": ("utf-32-le", 4)}


def reference_offset(text: str, line: int, character: int, encoding: str) -> int:
    """Offset of an LSP position computed the slow, obvious way (encode the line, cut, decode)."""
    lines, begin = [], 0
    for match in re.finditer(r"\r\n|\r|\n", text):
        lines.append(text[begin : match.end()])
        begin = match.end()
    lines.append(text[begin:])
    if line >= len(lines):
        return len(text)
    content = lines[line].rstrip("\r\n")
    codec, unit = _UNIT_BYTES[encoding]
    prefix = content.encode(codec, "surrogatepass")[: character * unit].decode(codec, "ignore")
    return sum(len(x) for x in lines[:line]) + len(prefix)


@pytest.mark.parametrize(
    ("encoding", "character", "expected_index"),
    [
        ("utf-16", 2, 2),  # "a" "é" are one unit each
        ("utf-16", 3, 2),  # inside the emoji's surrogate pair: rounds down
        ("utf-16", 4, 3),  # after the emoji
        ("utf-16", 5, 4),  # after the CJK char
        ("utf-8", 3, 2),  # a(1) é(2)
        ("utf-8", 5, 2),  # inside the emoji (4 bytes)
        ("utf-8", 7, 3),
        ("utf-8", 10, 4),  # 中 is 3 bytes
        ("utf-32", 3, 3),
        ("utf-32", 99, 7),  # clamped to the line (not into the line break)
    ],
)
def test_positions_in_each_encoding(encoding: str, character: int, expected_index: int) -> None:
    line = "aé😀中e\u0301x"  # combining acute accent is its own code point
    doc = Document("file:///t.txt", "plaintext", f"first\r\n{line}\nlast", encoding=encoding)
    offset = doc.offset_at(1, character)
    assert offset == len("first\r\n") + expected_index
    assert doc.offset_at(*doc.position_at(offset)) == offset


def test_utf16_edit_after_emoji_and_crlf() -> None:
    doc = Document("file:///t.py", "python", "s = '😀'\r\nx = 1\r\n")
    doc.apply_change(((0, 7), (0, 7)), "!", version=3)  # after the 2-unit emoji
    assert doc.text == "s = '😀!'\r\nx = 1\r\n"
    assert doc.version == 3
    doc.apply_change(((1, 4), (1, 5)), "22")
    assert doc.line_text(1) == "x = 22"
    assert doc.line_count == 3
    assert str(doc.tree.root_node) == str(Document("u", "python", doc.text).tree.root_node)


def test_full_replacement_and_plain_text() -> None:
    doc = Document("file:///t.txt", "no-such-language", "abc")
    assert doc.tree is None
    doc.apply_change(None, "x\ny", version=7)
    assert (doc.text, doc.version, doc.line_count) == ("x\ny", 7, 2)


def test_edits_reparse_lazily_and_incrementally() -> None:
    doc = Document("file:///t.py", "python", "def f():\n    return 1\n")
    assert doc.tree is not None and doc.parse_count == 1
    for i, char in enumerate("+ 2"):
        doc.apply_change(((1, 12 + i), (1, 12 + i)), char)
    assert doc.parse_count == 1  # no parse until the tree is read
    assert "binary_operator" in str(doc.tree.root_node)
    assert doc.parse_count == 2


def test_lone_cr_rows_follow_tree_sitter() -> None:
    doc = Document("file:///t.py", "python", "a = 1\rb = 2\nc = 3\n")
    assert doc.line_count == 4  # LSP counts the lone "\r" as a line break
    doc.apply_change(((2, 0), (2, 1)), "cc")
    assert doc.text == "a = 1\rb = 2\ncc = 3\n"
    assert str(doc.tree.root_node) == str(Document("u", "python", doc.text).tree.root_node)


def test_parse_with_insertion_does_not_change_document() -> None:
    doc = Document("file:///t.py", "python", "def f(:\n    pass\n")
    before = doc.text
    tree = doc.parse_with_insertion(6, ")")
    assert not tree.root_node.has_error
    assert doc.text == before and doc.tree.root_node.has_error


ALPHABET = [
    "a",
    "b",
    " ",
    "\t",
    "\n",
    "\r\n",
    "(",
    ")",
    ":",
    "=",
    "'",
    "é",
    "😀",
    "中",
    "\u0301",
    "def ",
    "if x:\n  ",
]
texts = st.lists(st.sampled_from(ALPHABET), max_size=30).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start_text=texts,
    language=st.sampled_from(["python", "javascript", "rust"]),
    encoding=st.sampled_from(["utf-8", "utf-16", "utf-32"]),
    data=st.data(),
)
def test_random_edits_match_reference_and_full_parse(
    start_text: str, language: str, encoding: str, data
) -> None:
    doc = Document("file:///t", language, start_text, encoding=encoding)
    expected = start_text
    for _ in range(data.draw(st.integers(1, 6))):
        lines = expected.count("\n") + 2
        positions = [(data.draw(st.integers(0, lines)), data.draw(st.integers(0, 12))) for _ in range(2)]
        positions.sort(key=lambda p: reference_offset(expected, *p, encoding))
        inserted = data.draw(texts)
        start = reference_offset(expected, *positions[0], encoding)
        end = reference_offset(expected, *positions[1], encoding)
        expected = expected[:start] + inserted + expected[end:]
        doc.apply_change((positions[0], positions[1]), inserted)
        assert doc.text == expected
        if data.draw(st.booleans()):
            assert doc.tree is not None  # sometimes re-parse between edits, sometimes batch them
    fresh = Document("file:///t", language, expected, encoding=encoding)
    assert doc._starts == fresh._starts and doc._byte_starts == fresh._byte_starts
    assert str(doc.tree.root_node) == str(fresh.tree.root_node)
    for offset in range(0, len(expected) + 1, 3):
        assert doc.point_at(offset) == fresh.point_at(offset)


def test_tree_within_budget_falls_back_to_the_edited_tree() -> None:
    doc = Document("file:///t.py", "python", "def f():\n    return 1\n" * 50)
    first = doc.tree
    doc.apply_change(((0, 0), (0, 0)), "x = '")  # an unclosed string: error recovery re-parses a lot
    stale = doc.tree_within(0.0)  # no time at all: the parse is given up
    assert stale is first and doc.deferred_parses == 1
    assert stale.root_node.children[0].start_byte == len("x = '")  # shifted by Tree.edit
    assert doc.tree_within(0.0) is first  # the next reads do not even try (they would run out again)
    fresh = doc.tree
    assert fresh is not first and str(fresh.root_node) == str(
        Document("u", "python", doc.text).tree.root_node
    )
    assert doc.tree_within(0.0) is fresh  # nothing stale: no parse needed
