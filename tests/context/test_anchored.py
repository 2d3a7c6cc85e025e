"""The anchored layout: the pinned block first (a function of the snapshot, not of the cursor), the cursor
window in the FIM part; a jump keeps every pinned token, typing keeps every token before the line prefix,
a large file's block shows the lines around the snapshot's cursor, and the budget follows the hardware."""

from __future__ import annotations

import sysconfig
from pathlib import Path

from codespec.context import ContextCache, ContextConfig, Document, build_context
from codespec.context.block import (
    DEFAULT_BUDGET,
    MAX_WINDOW_TOKENS,
    MIN_WINDOW_TOKENS,
    block_sections,
    make_block,
    prompt_budget,
)
from codespec.context.build import COLD
from codespec.decode.runtimes.kv import common_prefix_len
from codespec.tiny import tiny_tokenizer
from tests.context.helpers import context_at

TOK = tiny_tokenizer()
PREFIX_ID = TOK.convert_tokens_to_ids("<|fim_prefix|>")
ANCHORED = ContextConfig(layout="anchored", window_tokens=64, block_tokens=4096)
STDLIB = Path(sysconfig.get_paths()["stdlib"])
SOURCE = "import os\n\n\ndef add(a, b):\n    return ┃\n\nprint(add(1, 2))\n"


def build(doc: Document, line: int, character: int, config=ANCHORED, **kwargs):
    kwargs.setdefault("cache", ContextCache())
    return build_context(doc, line, character, tokenizer=TOK, config=config, **kwargs)


def test_anchored_prompt_pieces() -> None:
    ctx = context_at(SOURCE, config=ANCHORED)
    # The window shows the lines above the cursor (all of them here): the block holds the lines below.
    assert ctx.prompt == (
        "<|repo_name|>proj\n<|file_sep|>proj/t.python (below the cursor)\n\nprint(add(1, 2))\n\n"
        "<|file_sep|>proj/t.python\n"
        "<|fim_prefix|>import os\n\n\ndef add(a, b):\n    return <|fim_suffix|>\n<|fim_middle|>"
    )
    assert ctx.layout == "anchored" and ctx.block is not None and ctx.block.whole_file
    assert (ctx.block.hole_start, ctx.block.hole_end) == (0, 5)
    # The pinned part ends right before the FIM prefix marker.
    assert ctx.prompt_ids[ctx.pinned_tokens] == PREFIX_ID


def test_the_block_leaves_out_the_lines_the_window_shows() -> None:
    source = (STDLIB / "colorsys.py").read_text()
    at = source.index("def hls_to_rgb(h, l, s):\n") + len("def hls_to_rgb(h, l, s):\n")
    text = source[:at] + "    \n" + source[at:]  # a new line in the body, the cursor after its indentation
    doc = Document("file:///w/colorsys.py", "python", text)
    row = doc.line_of(at) - 1
    ctx = build(doc, row + 1, 4)
    block = ctx.block
    assert block.whole_file and 0 < block.hole_start < row + 1 < block.hole_end == row + 2
    window_lines = [doc.line_text(r) for r in range(ctx.window_start_line, row + 1)]
    assert block.hole_start <= ctx.window_start_line  # the window lies inside the hole
    assert "def hls_to_rgb(h, l, s):" not in block.above + block.below
    assert all(line in text for line in window_lines)
    # Typing there keeps the cursor in the hole (lines typed move its end down); elsewhere it is not.
    assert block.at_hole(row + 1, doc.line_count) and block.at_hole(row + 4, doc.line_count + 3)
    assert not block.at_hole(row + 4, doc.line_count) and not block.at_hole(block.hole_start - 1, doc.line_count)


def test_cold_prompt_is_the_cursor_window_alone() -> None:
    ctx = context_at(SOURCE, config=ANCHORED, block=COLD)
    assert ctx.block is None and ctx.pinned_tokens == 0
    assert ctx.prompt == "<|fim_prefix|>import os\n\n\ndef add(a, b):\n    return <|fim_suffix|>\n<|fim_middle|>"


def test_a_jump_keeps_every_pinned_token_and_the_window_is_bounded() -> None:
    text = (STDLIB / "colorsys.py").read_text()
    doc = Document("file:///w/colorsys.py", "python", text)
    block = make_block(doc, 10, _tokens(), 4096, hole_tokens=64)
    lines = [row for row in range(doc.line_count) if doc.line_text(row).startswith("    ")]
    prompts = [build(doc, row, len(doc.line_text(row)), block=block) for row in lines[::10]]
    prompts = [ctx for ctx in prompts if ctx.mode != "none"]
    assert len(prompts) >= 4
    pinned = prompts[0].pinned_tokens
    assert pinned > 1000  # the whole file is in the block
    for ctx in prompts:
        assert ctx.pinned_tokens == pinned and ctx.prompt_ids[:pinned] == prompts[0].prompt_ids[:pinned]
        window = len(ctx.prompt_ids) - pinned
        cursor_line = len(TOK.encode(ctx.line_prefix + ctx.near_suffix))
        assert window <= ANCHORED.window_tokens + cursor_line + 8  # the lines above, the cursor line, markers


def test_typing_keeps_every_token_before_the_line_prefix() -> None:
    text = (STDLIB / "colorsys.py").read_text()
    offset = text.index("    maxc = max(r, g, b)") + len("    maxc = max(r, g, b)\n")
    typed = "    rangec = (maxc - minc)\n    if not rangec:\n        return"
    cache = ContextCache()
    doc = Document("file:///w/colorsys.py", "python", text[:offset] + "\n" + text[offset:])
    block = make_block(doc, doc.line_of(offset), _tokens(), 4096, hole_tokens=64)
    previous = None
    shared = []
    for i in range(1, len(typed) + 1):
        doc = Document("file:///w/colorsys.py", "python", text[:offset] + typed[:i] + "\n" + text[offset:])
        line, character = doc.position_at(offset + i)
        ctx = build(doc, line, character, block=block, cache=cache)
        if previous is not None:
            same_line = ctx.window_start_line == previous.window_start_line
            if same_line:
                line_start = len(ctx.prompt_ids) - len(TOK.encode(ctx.line_prefix + ctx.near_suffix)) - 2
                shared.append(common_prefix_len(previous.prompt_ids, ctx.prompt_ids) >= line_start - 8)
        previous = ctx
    assert shared and all(shared)
    # The window moves by half its budget at a time, not at every keystroke.
    assert len(shared) >= len(typed) - 4


def test_a_large_file_block_holds_the_lines_around_the_snapshot_cursor() -> None:
    text = (STDLIB / "argparse.py").read_text()
    doc = Document("file:///w/argparse.py", "python", text)
    block = make_block(doc, 1500, _tokens(), 1024, hole_tokens=64)
    assert not block.whole_file and block.first_line < block.hole_start <= 1500 < block.hole_end <= block.last_line
    above, below = block.hole_start - block.first_line, block.last_line - block.hole_end
    assert above > below  # most of it above the cursor
    shown = [*range(block.first_line, block.hole_start), *range(block.hole_end, block.last_line)]
    assert sum(_tokens().count_line(doc.line_text(r)) for r in shown) <= 1024
    titles = [title for title, _ in block_sections("w/argparse.py", block)]
    assert titles == [f"w/argparse.py (lines {block.first_line + 1}-{block.hole_start})", "w/argparse.py (below the cursor)"]


def test_budget_follows_the_prefill_speed() -> None:
    slow, fast = prompt_budget(100.0), prompt_budget(20_000.0)
    assert slow.window_tokens == 50 and slow.block_tokens == 1000
    assert fast.window_tokens == MAX_WINDOW_TOKENS and fast.block_tokens == 3072
    assert prompt_budget(10.0).window_tokens == MIN_WINDOW_TOKENS
    assert prompt_budget(None) == DEFAULT_BUDGET
    assert "100 tokens/s" in slow.why
    chunked = prompt_budget(100.0, cost_points=((1, 0.03), (16, 0.2), (64, 0.45)))
    assert chunked.idle_chunk_tokens == 16 and slow.idle_chunk_tokens == 16
    assert prompt_budget(5000.0, cost_points=((1, 0.01), (16, 0.02), (64, 0.04))).idle_chunk_tokens == 64


def _tokens():
    return ContextCache().tokens(TOK)
