"""The server with the real bundled 0.5B model: early answer after the first line, the block kept
generating in the background, typing along and prefetch on text a real model writes. Slow."""

from __future__ import annotations

import pytest

from tests.lsp.helpers import (
    LOAD_WAIT_S,
    advance,
    bounded,
    end_position,
    inline,
    insert,
    item_text,
    open_doc,
    record_of,
    session,
    settle,
    stats,
)

MODEL = "qwen2.5-coder-0.5b"


def model_ready() -> bool:
    from codespec.models import bundled_cache_dir, check_cache

    return check_cache(bundled_cache_dir(MODEL)).state == "converted"


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not model_ready(), reason=f"bundled:{MODEL} is not converted (make fetch)"),
]

DOC = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    '


@pytest.mark.asyncio
async def test_early_answer_then_the_longer_block_then_typing_along():
    async with session(
        "--model",
        f"bundled:{MODEL}",
        "--draft-model",
        "none",
        "--drafting",
        "lookup",
        init_options={"maxTokens": 64, "stepDelay": 0.05, "prefetch": False},
    ) as client:
        uri = "file:///real/fib.py"
        open_doc(client, uri, DOC)
        line, character = end_position(DOC)
        first = inline(client, uri, line, character, trigger=1)
        early = item_text(await bounded(first, LOAD_WAIT_S))
        assert early and "\n" not in early.strip("\n")  # answered with the first line only
        await settle(client)
        again = inline(client, uri, line, character, trigger=1)
        block = item_text(await bounded(again))
        report = await stats(client)
        assert record_of(report, again.msg_id)["source"] == "cache"
        assert record_of(report, again.msg_id)["generation"] == record_of(report, first.msg_id)["generation"]
        # The rest of the block came later. (Post-processing may re-indent the first line once the
        # whole block is known, so compare without leading whitespace.)
        assert block.lstrip().startswith(early.lstrip()) and "\n" in block.strip("\n")

        typed = block[:3]
        insert(client, uri, 2, line, character, typed)
        follow = inline(client, uri, *advance(line, character, typed))
        assert item_text(await bounded(follow)) == block[3:]
        assert record_of(await stats(client), follow.msg_id)["modelCall"] is False
