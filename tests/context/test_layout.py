"""Prompt layouts: the near-suffix layout's pieces, its stability while typing and pressing Enter
(prompts share every token up to the line prefix; the far suffix never enters the changing tail),
and the psm layout's unchanged format."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from codespec.benchmarks.layout import common_prefix_len, layout_config, session_requests
from codespec.context import ContextCache, ContextConfig, Document, build_context
from codespec.context.build import far_suffix_start
from codespec.tiny import tiny_tokenizer
from tests.context.helpers import context_at

TOK = tiny_tokenizer()
SUFFIX_ID = TOK.convert_tokens_to_ids("<|fim_suffix|>")
PREFIX_ID = TOK.convert_tokens_to_ids("<|fim_prefix|>")
# A wider suffix budget: the byte tokenizer spends ~70 of the default 123 tokens on the far section's paths.
NEAR = ContextConfig(layout="near-suffix", near_suffix_lines=0, suffix_fraction=0.25)
PSM = ContextConfig(layout="psm")
SOURCE = "def add(a, b):\n    return ┃\n\nprint(add(1, 2))\n"
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def test_psm_layout_is_unchanged() -> None:
    ctx = context_at(SOURCE, config=PSM)
    assert ctx.prompt == (
        "<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>"
    )
    assert ctx.layout == "psm" and ctx.near_suffix == "" and ctx.far_suffix == ""


def test_near_suffix_pieces_with_a_repository_format() -> None:
    ctx = context_at(SOURCE, config=NEAR)
    assert ctx.near_suffix == "\n"  # the rest of the cursor line and its line break
    assert ctx.far_suffix.startswith("\nprint(add(1, 2))")
    assert ctx.prompt == (
        "<|repo_name|>proj\n<|file_sep|>proj/t.python (below the cursor)\n" + ctx.far_suffix + "\n"
        "<|file_sep|>proj/t.python\n<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n<|fim_middle|>"
    )
    assert TOK.decode(ctx.prompt_ids) == ctx.prompt
    # ctx.suffix keeps meaning the document after the cursor (the stop rules read it).
    assert ctx.suffix.startswith("\n\nprint(add(1, 2))")


def test_near_suffix_lines_and_rest_of_line() -> None:
    ctx = context_at("x = f(┃)\ny = 2\nz = 3\nw = 4\n", config=layout_config("near1"))
    assert ctx.near_suffix == ")\ny = 2\n"
    assert "y = 2" not in ctx.far_suffix and ctx.far_suffix.startswith("z = 3")
    assert ctx.prompt.endswith("<|fim_suffix|>)\ny = 2\n<|fim_middle|>")


def test_near_suffix_without_a_repository_format_uses_comments() -> None:
    ctx = context_at(SOURCE, config=ContextConfig(layout="near-suffix", family="codellama"))
    assert ctx.prompt.startswith(" <PRE># Path: proj/t.python (below the cursor)\n#\n# print(add(1, 2))\n")
    assert ctx.prompt.endswith("    return  <SUF>\n <MID>")


def test_document_text_in_the_far_suffix_never_becomes_special_tokens() -> None:
    ctx = context_at('x = ┃\nMARK = "<|fim_middle|>"\n', config=NEAR)
    assert "<|fim_middle|>" in ctx.far_suffix
    assert ctx.prompt_ids.count(TOK.convert_tokens_to_ids("<|fim_middle|>")) == 1


def test_unknown_layout_is_an_error() -> None:
    with pytest.raises(ValueError):
        context_at(SOURCE, config=ContextConfig(layout="spm-ish"))


def _tail(before: list[int], after: list[int]) -> int:
    return len(after) - common_prefix_len(before, after)


def _typing_steps(doc: Document, line: int, text: str):
    """Types `text` at the end of `line` one character at a time ("\\n" = Enter with auto-indent),
    yielding (previous context, new context) around each keystroke."""
    cache = ContextCache()
    character = len(doc.line_text(line))
    previous = build_context(doc, line, character, tokenizer=TOK, config=NEAR, cache=cache)
    for char in text:
        insert = char
        if char == "\n":
            insert += doc.line_text(line)[: len(doc.line_text(line)) - len(doc.line_text(line).lstrip())]
        doc.apply_change(((line, character), (line, character)), insert)
        if char == "\n":
            line, character = line + 1, len(insert) - 1
        else:
            character += 1
        ctx = build_context(doc, line, character, tokenizer=TOK, config=NEAR, cache=cache)
        yield previous, ctx
        previous = ctx


@pytest.mark.parametrize("name", ["textwrap.py", "json/decoder.py"])
def test_typing_and_enter_keep_every_token_before_the_line_prefix(name: str) -> None:
    path = STDLIB / name
    doc = Document(path.as_uri(), "python", path.read_text(encoding="utf-8"))
    line = next(i for i in range(doc.line_count // 2, doc.line_count) if doc.line_text(i).startswith("        "))
    steps = 0
    for before, after in _typing_steps(doc, line, "x = 1\nif x:\ny = x + 1\n"):
        if before.mode == "none" or after.mode == "none" or before.window_start_line != after.window_start_line:
            continue  # the prefix window moved a whole step (rare; the same in every layout)
        steps += 1
        assert before.far_suffix and before.far_suffix == after.far_suffix
        # Everything before the old prompt's FIM suffix marker (its line prefix included) is shared...
        assert common_prefix_len(before.prompt_ids, after.prompt_ids) >= before.prompt_ids.index(SUFFIX_ID)
        # ... so what changes is the end of the line prefix, the near suffix and the markers.
        near = len(TOK(after.near_suffix, add_special_tokens=False)["input_ids"])
        assert _tail(before.prompt_ids, after.prompt_ids) <= near + 4 + len(after.line_prefix) - len(
            after.line_prefix.lstrip()
        )
        # The far suffix stays before the prefix, out of the changing tail.
        assert after.prompt.index(after.far_suffix) < after.prompt.index("<|fim_prefix|>")
    assert steps >= 15


def test_psm_tail_carries_the_suffix_near_suffix_does_not() -> None:
    path = STDLIB / "textwrap.py"
    text = path.read_text(encoding="utf-8")
    line = next(i for i, row in enumerate(text.split("\n")) if i > 200 and row.startswith("        "))
    tails = {}
    for name, config in (("psm", PSM), ("near", NEAR)):
        doc = Document(path.as_uri(), "python", text)
        cache = ContextCache()
        character = len(doc.line_text(line))
        before = build_context(doc, line, character, tokenizer=TOK, config=config, cache=cache)
        doc.apply_change(((line, character), (line, character)), "x")
        after = build_context(doc, line, character + 1, tokenizer=TOK, config=config, cache=cache)
        tails[name] = _tail(before.prompt_ids, after.prompt_ids)
    assert tails["near"] <= 4 < 32 < tails["psm"]


def test_far_suffix_start_is_anchored_below_the_cursor_line() -> None:
    doc = Document("file:///t.py", "python", "".join(f"line_{i} = {i}\n" for i in range(200)))
    start = far_suffix_start(doc, 51, 100)
    assert start is not None and start >= 51
    # Typing on line 50 shifts offsets but not the grid counted from the end.
    doc.apply_change(((50, 0), (50, 0)), "typed text ")
    assert far_suffix_start(doc, 51, 100) == start
    # Moving the cursor down keeps the far block until the near suffix passes the grid line.
    assert all(far_suffix_start(doc, first, 100) == start for first in range(51, start + 1))
    assert far_suffix_start(doc, start + 1, 100) > start


def test_session_replay_yields_requests() -> None:
    session = next(iter(sorted((Path(__file__).parents[1] / "sessions" / "data").glob("stdlib-*.jsonl"))))
    requests = list(session_requests(session))
    assert requests and all(0 <= line < doc.line_count for _, doc, line, _ in requests)
