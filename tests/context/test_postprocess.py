"""Post-processing: each filter on its own, then the whole list on the complaints users file most; the
filters are pure, the parse check apart from them (┃ marks the cursor)."""

import dataclasses

import pytest

from codespec.context import parse_checked, postprocess, prefer_parsable
from codespec.context.postprocess import (
    FILTERS,
    FilterContext,
    drop_repeated_suffix,
    drop_repetitive_tail,
    drop_whitespace_only,
    fix_first_line_indent,
    limit_lines,
    normalize_indentation,
    normalize_newlines,
    to_document_eol,
    trim_closing_overlap,
    trim_suffix_line_overlap,
    trim_trailing_whitespace,
)
from tests.context.helpers import context_at


def test_normalize_newlines() -> None:
    ctx = context_at("x = ┃\n")
    assert normalize_newlines("a\r\nb\rc", ctx) == "a\nb\nc"


def test_drop_repetitive_tail() -> None:
    ctx = context_at("def main():\n    ┃\n")
    looping = "x = load()\n    print(area(3.0))\n    print(area(4.0))\n    print(area(5.0))\n    print(area"
    assert drop_repetitive_tail(looping.rsplit("\n", 1)[0], ctx) == "x = load()\n    print(area(3.0))"
    varied = "a = 1\n    b = 2\n    c = 3"
    assert drop_repetitive_tail(varied, ctx) == varied  # different statements are no loop
    assert drop_repetitive_tail("f(1)\n    f(2)", ctx) == "f(1)\n    f(2)"  # two are not yet a loop


def test_limit_lines() -> None:
    ctx = context_at("def f():\n    ┃\n")
    ctx.max_lines = 2
    assert limit_lines("a\nb\nc", ctx) == "a\nb"
    assert limit_lines("\na\nb\nc", ctx) == "\na\nb"  # the cursor line's own line break does not count


@pytest.mark.parametrize(
    ("source", "completion", "expected"),
    [
        ("def f(x):\n    ┃\n    return x\n", "y = x * 2\n    return x", "y = x * 2"),
        ("def f(x):\n    ┃\n    return x\n", "return x", ""),  # repeats the line below: nothing new
        ("function f() {\n  ┃\n}\n", "return 1;\n}", "return 1;"),
        (
            "function f() {\n  ┃\n}\n",
            "if (a) {\n    b();\n  }\n  return 1;",
            "if (a) {\n    b();\n  }\n  return 1;",
        ),
        ("a = 1\n┃\nb = 2\nc = 3\n", "x = 0\nb = 2\nc = 3", "x = 0"),
    ],
)
def test_trim_suffix_line_overlap(source: str, completion: str, expected: str) -> None:
    assert (
        trim_suffix_line_overlap(completion, context_at(source, "javascript" if "{" in source else "python"))
        == expected
    )


@pytest.mark.parametrize(
    ("source", "completion", "expected"),
    [
        ("print(foo(┃))\n", "x))", "x"),
        ("items = [┃]\n", "1, 2, 3]", "1, 2, 3"),
        ("call({┃})\n", "a: 1})", "a: 1"),
        ("print(┃)\n", "len(x))", "len(x)"),
        ("print(┃)\n", "len(x)", "len(x)"),  # balanced: nothing duplicated
        ('print("┃")\n', 'hello")', "hello"),
        ('x = "┃"\n', 'abc"', "abc"),
        ("if (ok(┃)) {\n", "a)) {", "a"),
        ("x = [┃]\n", "\n    1,\n    2,\n]", "\n    1,\n    2,\n"),
    ],
)
def test_trim_closing_overlap(source: str, completion: str, expected: str) -> None:
    assert trim_closing_overlap(completion, context_at(source)) == expected


def test_drop_repeated_suffix() -> None:
    assert drop_repeated_suffix(")", context_at("f(┃)\n")) == ""
    assert drop_repeated_suffix("x)", context_at("f(┃)\n")) == "x)"


def test_normalize_indentation_tabs_and_spaces() -> None:
    tabbed = context_at("func f() {\n\tx := 1\n\tif x > 0 {\n\t\t┃\n\t}\n}\n", "go")
    assert tabbed.indent_unit == "\t"
    assert normalize_indentation("y := 2\n        return y", tabbed) == "y := 2\n\t\treturn y"
    spaced = context_at("def f():\n    x = 1\n    ┃\n")
    assert spaced.indent_unit == "    "
    assert normalize_indentation("y = 2\n\treturn y", spaced) == "y = 2\n    return y"
    assert normalize_indentation("y = 2\n    return y", spaced) == "y = 2\n    return y"
    two = context_at("function f() {\n  if (a) {\n    b();\n  }\n  ┃\n}\n", "javascript")
    assert two.indent_unit == "  "
    assert normalize_indentation("c();\n\td();", two) == "c();\n  d();"


def test_fix_first_line_indent() -> None:
    ctx = context_at("def f():\n    ┃\n")
    assert fix_first_line_indent("    x = 1\n    return x", ctx) == "x = 1\n    return x"
    assert fix_first_line_indent("    x = 1\n        return x", ctx) == "    x = 1\n        return x"
    # A block written as if from column 0: the body lines are at their real columns already.
    block = "    if n <= 1:\n        return n\n    else:\n        return f(n - 1)"
    assert fix_first_line_indent(block, ctx) == block[4:]
    deeper = "    if n <= 1:\n            return n"  # the body one unit below the first line as written
    assert fix_first_line_indent(deeper, ctx) == deeper


def test_trim_trailing_whitespace_and_blank() -> None:
    ctx = context_at("x = ┃\n")
    assert trim_trailing_whitespace("a  \nb\t\n\n", ctx) == "a\nb"
    assert trim_trailing_whitespace("\n    foo()  ", ctx) == "\n    foo()"
    assert drop_whitespace_only("  \n\t ", ctx) == ""
    assert postprocess("   \n  ", ctx) == ""


def test_filters_see_a_frozen_snapshot_without_the_document() -> None:
    ctx = context_at("def f(x):\n    ┃\n\nprint(1)\n")
    seen = []

    def spy(text: str, snapshot: FilterContext) -> str:
        seen.append(snapshot)
        return text

    postprocess("y = x", ctx, [spy, *FILTERS])
    (snapshot,) = seen
    assert isinstance(snapshot, FilterContext) and not hasattr(snapshot, "document")
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.line_suffix = "changed"  # type: ignore[misc]


def test_postprocess_is_the_same_after_the_document_moves_on() -> None:
    # The server post-processes one generation at every token and for every typed-along request: the answer
    # must not depend on when. (The parse check used to be a filter and was silently skipped after an edit.)
    ctx = context_at("def f(x):\n    ┃\n\nprint(1)\n")
    broken = "if x:\n        return 1\n    else"
    before = postprocess(broken, ctx)
    ctx.document.apply_change(((3, 0), (3, 0)), "# typed later\n")
    assert postprocess(broken, ctx) == before == broken  # not the filters' job to judge the syntax


def test_prefer_parsable_drops_a_broken_last_line() -> None:
    ctx = context_at("def f(x):\n    ┃\n\nprint(1)\n")
    doc, offset = ctx.document, ctx.offset
    assert prefer_parsable("if x:\n        return 1\n    else", doc, offset, budget_s=0.05) == "if x:\n        return 1"
    good = "if x:\n        return 1\n    return 2"
    assert prefer_parsable(good, doc, offset, budget_s=0.05) == good
    assert prefer_parsable("foo(", doc, offset, budget_s=0.05) == "foo("  # one line: nothing to choose from
    # Line breaks are the document's: the check splits and inserts CRLF text as it is.
    crlf = context_at("def f(x):\r\n    ┃\r\n\r\nprint(1)\r\n")
    assert prefer_parsable("if x:\r\n        return 1\r\n    else", crlf.document, crlf.offset, budget_s=0.05,
                           eol="\r\n") == "if x:\r\n        return 1"


def test_prefer_parsable_checks_the_document_as_it_is_now() -> None:
    # Typed along: the user typed "x = 1" at the cursor; the rest of the suggestion is checked at the new
    # cursor in the edited document (what the server does for a typed-along answer).
    ctx = context_at("def f(x):\n    ┃\n\nprint(1)\n")
    doc = ctx.document
    doc.apply_change((doc.position_at(ctx.offset), doc.position_at(ctx.offset)), "x = 1")
    rest, cursor = "\n    y = 2\n    if x:\n        return 1\n    else", ctx.offset + len("x = 1")
    assert prefer_parsable(rest, doc, cursor, budget_s=0.05) == "\n    y = 2\n    if x:\n        return 1"
    # ... and not when the document changed since the caller looked (its cursor offset would be stale).
    assert prefer_parsable(rest, doc, cursor, budget_s=0.05, edit_count=doc.edit_count - 1) == rest


def test_parse_checked_uses_the_context_document_until_it_moves_on() -> None:
    ctx = context_at("def f(x):\n    ┃\n\nprint(1)\n")
    broken = "if x:\n        return 1\n    else"
    assert parse_checked(broken, ctx) == "if x:\n        return 1"
    ctx.document.apply_change(((3, 0), (3, 0)), "# typed later\n")
    assert parse_checked(broken, ctx) == broken


def test_crlf_document() -> None:
    ctx = context_at("def f():\r\n    ┃\r\n")
    assert ctx.eol == "\r\n" and ctx.mode == "block"
    assert "\r" not in ctx.prompt  # the model sees "\n" line breaks
    assert to_document_eol("x = 1\n    return x", ctx) == "x = 1\r\n    return x"
    assert postprocess("x = 1\r\n    return x\r\n", ctx) == "x = 1\r\n    return x"


def test_non_ascii_positions() -> None:
    ctx = context_at('s = "😀"; t = foo(┃)\n', encoding="utf-16")
    assert ctx.line_prefix == 's = "😀"; t = foo(' and ctx.line_suffix == ")"
    assert postprocess("x)", ctx) == "x"
    ctx8 = context_at("ünïcode = [┃]\n", encoding="utf-8")
    assert ctx8.line_prefix == "ünïcode = [" and postprocess("1, 2]", ctx8) == "1, 2"


@pytest.mark.parametrize(
    ("language", "source", "completion", "expected"),
    [
        ("python", "result = compute(a, ┃)\n", "b)", "b"),
        ("javascript", "const x = [1, 2, ┃];\n", "3];", "3"),
        ("python", "def f(x):\n    ┃\n    return y\n", "y = x + 1\n    return y\n", "y = x + 1"),
        ("javascript", "if (a) {\n  ┃\n}\n", "b();\n}\n", "b();"),
        ("python", "def f():\n    ┃\n", "    x = 1\n    return x", "x = 1\n    return x"),
        ("python", "def f():\n    ┃\n", "  \n", ""),
    ],
)
def test_complaints_end_to_end(language: str, source: str, completion: str, expected: str) -> None:
    assert postprocess(completion, context_at(source, language)) == expected


def test_none_mode_gives_nothing() -> None:
    assert postprocess("anything", context_at("fo┃o\n")) == ""


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

PIECES = ["x", " ", "\t", "\n", "\r\n", "(", ")", "]", "}", "'", '"', "return 1", "    ", "😀", "end"]
SOURCES = [
    ("python", "def f(x):\n    ┃\n    return x\n"),
    ("python", "print(foo(┃))\n"),
    ("javascript", "function f() {\r\n  ┃\r\n}\r\n"),
    ("go", "func f() {\n\t┃\n}\n"),
]


@settings(max_examples=80, deadline=None)
@given(pieces=st.lists(st.sampled_from(PIECES), max_size=25), which=st.integers(0, len(SOURCES) - 1))
def test_postprocess_is_total_and_keeps_line_endings(pieces: list[str], which: int) -> None:
    language, source = SOURCES[which]
    ctx = context_at(source, language)
    out = postprocess("".join(pieces), ctx)
    assert isinstance(out, str)
    if ctx.eol == "\n":
        assert "\r" not in out
    else:
        assert "\n" not in out.replace("\r\n", "")
    assert out == "" or out.strip()  # never whitespace only
    ctx.healed = ""  # the first pass already removed the re-written whitespace before the cursor
    assert postprocess(out.replace(ctx.eol, "\n"), ctx) == out  # a second pass changes nothing
