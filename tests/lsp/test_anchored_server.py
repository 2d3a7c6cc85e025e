"""The real server with the anchored layout (tiny model): the first request in a file goes without a block,
idle time pins one and computes its KV, a jump then re-prefills only the cursor window, a request during
idle-time work pre-empts it, and a file-switch storm keeps the pinned blocks and cached prompts bounded."""

from __future__ import annotations

import asyncio

import pytest

from lsp.blocks import MAX_PINNED
from tests.lsp.helpers import (
    bounded,
    close_opened,
    inline,
    insert,
    open_doc,
    session,
    settle,
    stats,
    wait_until,
)

pytestmark = pytest.mark.asyncio(loop_scope="function")

FUNCTIONS = "".join(
    f"def handler_{i}(request, value):\n    result = value * {i} + len(request)\n    return result\n\n\n"
    for i in range(30)
)
URI = "file:///work/proj/handlers.py"
OPTIONS = {"promptLayout": "anchored", "maxTokens": 8, "prefetch": False, "idleDelay": 0.05}


async def pinned_for(client, uri: str) -> dict | None:
    report = await stats(client, recent=0)
    return next((block for block in report["prompt"]["pinned"] if block["uri"] == uri), None)


async def test_cold_first_then_pinned_in_idle_time_then_a_jump_costs_the_window_only():
    async with session(init_options=OPTIONS) as client:
        text = FUNCTIONS + "def main():\n    "
        open_doc(client, URI, text)
        last = text.count("\n")
        await bounded(inline(client, URI, last, 4))
        report = await settle(client)
        budget = report["prompt"]["budget"]
        assert report["prompt"]["idle"]["coldPrompts"] >= 1  # no block yet: the cursor window alone
        window = budget["windowTokens"]
        # Idle time pins a block of the file and computes its KV.
        await wait_until(lambda: pinned_for(client, URI))
        pinned = await pinned_for(client, URI)
        assert pinned["lines"] == [0, last + 1] and pinned["hole"][1] == last + 1 and pinned["editCount"] == 0
        # A jump to another place in the file: the block's KV is reused, only the window is computed.
        await bounded(inline(client, URI, 7, len("    result = value * 1 + len(request)")))
        report = await settle(client)
        requests = [r for r in report["recentRequests"] if r["method"] == "textDocument/inlineCompletion"]
        assert requests[-1]["prefillTokens"] is not None
        assert 0 < requests[-1]["prefillTokens"] <= window + 48  # the window, the rest of the line, markers
        assert requests[-1]["reusedTokens"] > window  # the block's tokens came from the cache
        kv = report["prompt"]["kv"]
        assert kv["maxSlots"] >= 2 and len(kv["slotTokens"]) >= 2  # the first place's slot was kept
        close_opened(client)


async def test_an_edit_makes_a_new_block_in_idle_time_and_a_request_preempts_the_work():
    async with session(init_options={**OPTIONS, "stepDelay": 0.0}) as client:
        text = FUNCTIONS + "def main():\n    "
        open_doc(client, URI, text)
        last = text.count("\n")
        await bounded(inline(client, URI, last, 4))
        await settle(client)
        await wait_until(lambda: pinned_for(client, URI))
        insert(client, URI, 2, last, 4, "x = handler_3(")
        # A request right after the edit: answered (no wait for the new block), the old block still pinned.
        await bounded(inline(client, URI, last, 4 + len("x = handler_3(")))
        assert (await pinned_for(client, URI))["editCount"] in (0, 1)
        # Idle time then pins a block of the edited document.
        await settle(client)

        async def refreshed():
            block = await pinned_for(client, URI)
            return block is not None and block["editCount"] == 1

        await wait_until(refreshed)
        idle = (await stats(client, recent=0))["prompt"]["idle"]
        assert idle["blocksPinned"] >= 2 and idle["failed"] == 0  # an unchanged block is pinned without work
        close_opened(client)


async def test_pending_work_counts_the_idle_time_work_until_its_block_is_pinned():
    # A benchmark waits for pendingWork 0 before its next play: it must count the idle timer and the work
    # it starts, and reach 0 only once the block is pinned (the work done, not just not started yet).
    async with session(init_options={**OPTIONS, "idleDelay": 1.0, "stepDelay": 0.0}) as client:
        text = FUNCTIONS + "def main():\n    "
        open_doc(client, URI, text)
        await bounded(inline(client, URI, text.count("\n"), 4))
        assert (await stats(client, recent=0))["pendingWork"] >= 1  # the generation or the idle timer (1 s)
        assert await pinned_for(client, URI) is None

        async def no_work():
            return (await stats(client, recent=0))["pendingWork"] == 0

        await wait_until(no_work)
        assert await pinned_for(client, URI) is not None
        await asyncio.sleep(1.5)  # longer than the idle delay: nothing was left to start
        report = await stats(client, recent=0)
        assert report["pendingWork"] == 0 and report["prompt"]["idle"]["failed"] == 0
        close_opened(client)


async def test_file_switch_storm_keeps_blocks_and_cached_prompts_bounded():
    async with session(init_options=OPTIONS) as client:
        uris = [f"file:///work/proj/m{i}.py" for i in range(MAX_PINNED + 6)]
        for i, uri in enumerate(uris):
            body = FUNCTIONS[: 400 + 37 * i] + "\ndef tail():\n    "
            open_doc(client, uri, body)
            insert(client, uri, 2, body.count("\n"), 4, "r")
            await bounded(inline(client, uri, body.count("\n"), 5))
        report = await settle(client)
        assert len(report["prompt"]["pinned"]) <= MAX_PINNED
        kv = report["prompt"]["kv"]
        assert len(kv["slotTokens"]) <= kv["maxSlots"]
        errors = [r for r in report["recentRequests"] if r["outcome"] == "error"]
        assert errors == []
        close_opened(client)


async def test_a_huge_file_gets_a_block_of_the_budget_around_the_cursor():
    async with session(init_options=OPTIONS) as client:
        uri = "file:///work/proj/huge.py"
        text = FUNCTIONS * 400 + "def main():\n    "  # ~1 M characters, 60,000 lines
        open_doc(client, uri, text)
        last = text.count("\n")
        await bounded(inline(client, uri, last, 4))
        report = await settle(client)
        await wait_until(lambda: pinned_for(client, uri))
        block = await pinned_for(client, uri)
        budget = (await stats(client, recent=0))["prompt"]["budget"]
        assert block["lines"][1] == last + 1 and block["lines"][0] > 0  # the lines above the cursor
        assert block["chars"] <= budget["blockTokens"] * 2  # byte tokens: about a character each
        assert [r for r in report["recentRequests"] if r["outcome"] == "error"] == []
        close_opened(client)
