"""Mode decision: hand-written cursor cases per language (┃ marks the cursor)."""

import pytest

from tests.context.helpers import context_at

CASES = [
    # python
    ("python", "def f():\n    ┃\n", "block"),
    ("python", "def f():┃\n", "block"),
    ("python", "class A:\n    def m(self):\n        ┃\n\nx = 1\n", "block"),
    ("python", "if x:\n    ┃\nelse:\n    pass\n", "block"),
    ("python", "def f():\n    ┃\n    return 1\n", "line"),  # the body is not empty
    ("python", "x = foo(┃)\n", "line"),
    ("python", "print(1)┃\n", "line"),
    ("python", "x = fo┃o\n", "none"),  # inside an identifier
    ("python", "x = ┃foo\n", "none"),  # text right of the cursor
    ("python", "d = {'a': ┃}\n", "line"),
    ("python", 'x = """\nif a:\n    ┃\n"""\n', "line"),  # inside a string: no block
    ("python", "# note:\n┃\n", "line"),  # a comment ending in ':' opens nothing
    ("python", 'def f(x):\n    """Doc."""\n    ┃\n', "block"),  # a docstring alone is an empty body
    ("python", 'def f(x):\n    """\n    Long doc.\n    """\n    ┃\n\nprint(1)\n', "block"),
    ("python", 'def f(x):\n    """Doc."""\n    ┃\n    return 1\n', "line"),
    ("python", 'x = 1\n"""doc"""\n┃\n', "line"),
    # javascript / typescript / tsx
    ("javascript", "function f(a) {\n  ┃\n}\n", "block"),
    ("javascript", "const g = (a) =>\n  ┃\n", "block"),
    ("javascript", "if (x) {┃}\n", "line"),
    ("javascript", "foo(┃);\n", "line"),
    ("javascript", "const total = ┃items.length;\n", "none"),
    ("typescript", "class A {\n  m(): number {\n    ┃\n  }\n}\n", "block"),
    ("typescript", "let n: number = 1┃\n", "line"),
    ("tsx", "const C = () => {\n  ┃\n};\n", "block"),
    ("tsx", "const el = <div>{na┃me}</div>;\n", "none"),
    # go, rust, java, c, c++
    ("go", "func main() {\n\t┃\n}\n", "block"),
    ("go", "x := ┃y\n", "none"),
    ("go", "func main() {\n\tx := 1\n\t┃\n}\n", "line"),
    ("rust", "fn main() {\n    ┃\n}\n", "block"),
    ("rust", "let v = vec![1, 2┃];\n", "line"),
    ("java", "class A {\n    void m() {\n        ┃\n    }\n}\n", "block"),
    ("java", "String s = name┃;\n", "line"),
    ("c", "int main(void) {\n    ┃\n}\n", "block"),
    ("c", "#include <stdio.h>┃\n", "line"),
    ("cpp", "namespace n {\nint f() {\n    ┃\n}\n}\n", "block"),
    ("cpp", "std::vector<int> v{1, 2┃};\n", "line"),
    # ruby, lua, bash
    ("ruby", "def greet(name)\n  ┃\nend\n", "block"),
    ("ruby", "[1, 2].each do |x|\n  ┃\nend\n", "block"),
    ("ruby", "puts 'hi'┃\n", "line"),
    ("lua", "function f(a)\n  ┃\nend\n", "block"),
    ("lua", "if x then\n  ┃\nend\n", "block"),
    ("lua", "for i = 1, 10 do\n  ┃\nend\n", "block"),
    ("lua", "local t = {1, 2┃}\n", "line"),
    ("bash", "if [ -f x ]; then\n  ┃\nfi\n", "block"),
    ("bash", "for f in *.txt; do\n  ┃\ndone\n", "block"),
    ("bash", "echo hi┃\n", "line"),
    # any other language id is plain text
    ("plaintext", "hello wor┃ld\n", "none"),
    ("no-such-language", "hello ┃\n", "line"),
]


@pytest.mark.parametrize(
    ("language", "source", "mode"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_mode(language: str, source: str, mode: str) -> None:
    ctx = context_at(source, language)
    assert ctx.mode == mode, ctx.reason
    assert ctx.max_lines == {"none": 0, "line": 1, "block": 16}[mode]
    if mode == "none":
        assert ctx.prompt_ids == [] and ctx.stop("anything") == 0


def test_every_core_language_has_a_tree() -> None:
    for language in [
        "python",
        "javascript",
        "typescript",
        "tsx",
        "go",
        "rust",
        "java",
        "c",
        "cpp",
        "ruby",
        "lua",
        "bash",
    ]:
        ctx = context_at("x┃\n", language)
        assert ctx.document.tree is not None, language
        assert ctx.language == language
