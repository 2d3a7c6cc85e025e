"""Stop rules, consulted after every character as the engine does (┃ marks the cursor)."""

import pytest

from codespec.context import ContextConfig
from codespec.context.stop import BlockStop, LineStop, bracket_depth, first_unbalanced_closer
from tests.context.helpers import context_at, streamed

CASES = [
    # (language, document, generated text, kept text)
    ("python", "def f():\n    ┃\n\ndef g():\n    pass\n", "return 1\n\ndef h():\n    pass", "return 1"),
    (
        "python",
        "def f():\n    ┃\n",
        "x = 1\n    y = 2\n    return x + y\nprint(f())",
        "x = 1\n    y = 2\n    return x + y",
    ),
    ("python", "def f():┃\n", "\n    return 1\n\nclass B:", "\n    return 1"),
    ("python", "class A:\n    def m(self):\n        ┃\n", "pass\n    def n(self):", "pass"),
    ("python", "x = foo(┃)\n", "a, b)\nprint(x)", "a, b"),  # stops before repeating the line's `)`
    ("python", "x = foo(┃)\n", "bar(1))", "bar(1)"),
    ("python", "x = 1┃\ny = 2\n", "\nz = 3\nw = 4", "\nz = 3"),  # a completion may start on the next line
    ("python", "total = ┃\n", "a + b\nc = 1", "a + b"),
    ("javascript", "function f(a) {\n  ┃\n}\n", "return a;\n}\n\nfunction g() {", "return a;"),
    ("javascript", "function f(a) {\n  ┃\n", "return a;\n}\nfunction g() {", "return a;\n}"),  # closer kept
    ("javascript", "foo(function () {\n  ┃\n});\n", "return 1; });", "return 1;"),  # outer bracket closes
    ("go", "func main() {\n\t┃\n}\n", "fmt.Println(1)\n}\n", "fmt.Println(1)"),
    (
        "rust",
        "fn main() {\n    ┃\n}\n",
        "let x = vec![\n        1,\n    ];\n    x\n}",
        "let x = vec![\n        1,\n    ];\n    x",
    ),
    ("java", "class A {\n    void m() {\n        ┃\n    }\n}\n", "run();\n    }", "run();"),
    ("c", "int main(void) {\n    ┃\n}\n", "return 0;\n}\n", "return 0;"),
    ("cpp", "int f() {\n    ┃\n", "return 1;\n}\nint g() {", "return 1;\n}"),
    ("ruby", "def greet(name)\n  ┃\nend\n", "puts name\nend\n", "puts name"),
    ("lua", "function f(a)\n  ┃\n", "return a\nend\nprint(1)", "return a\nend"),
    ("bash", "if [ -f x ]; then\n  ┃\nfi\n", "echo yes\nfi\n", "echo yes"),
    ("bash", "for f in *.txt; do\n  ┃\ndone\n", 'wc -l "$f"\ndone', 'wc -l "$f"'),
]


@pytest.mark.parametrize(
    ("language", "source", "generated", "kept"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_stop_rule(language: str, source: str, generated: str, kept: str) -> None:
    ctx = context_at(source, language)
    assert streamed(ctx.stop, generated) == kept


def test_block_repeating_the_suffix_stops() -> None:
    rule = BlockStop(opener_indent=0, line_prefix="    ", suffix_first_line="    launch(rocket)")
    assert streamed(rule, "check()\n    launch(rocket)\n") == "check()"


def test_block_max_lines() -> None:
    ctx = context_at("def f():\n    ┃\n", config=ContextConfig(max_block_lines=3))
    assert streamed(ctx.stop, "a = 1\n    b = 2\n    c = 3\n    d = 4\n") == "a = 1\n    b = 2\n    c = 3"


def test_stop_rules_restart_on_a_new_text() -> None:
    rule = BlockStop(opener_indent=0, line_prefix="    ")
    assert rule("x = 1\n    y") is None
    assert rule("z\n") is None and rule("z\nw = 2") == 1  # not an extension of the last text: judged afresh


def test_line_stop_table() -> None:
    rule = LineStop(line_suffix="):")
    assert rule("x") is None
    assert rule("x):") == 1
    assert rule("f(x):") is None  # its own bracket is not closed yet: `):` is not the suffix's
    assert rule("abc\nmore") == 3


def test_bracket_helpers() -> None:
    assert bracket_depth("f(a, [1, 2]") == 1
    assert bracket_depth("s = ')'") == 0  # inside a string
    assert bracket_depth("# don't\nf(") == 1  # an unmatched quote ends with its line
    assert first_unbalanced_closer("# it's\n)") == 7
    assert first_unbalanced_closer("a, b) + c") == 4
    assert first_unbalanced_closer("g(x)") is None
