"""`codespec serve --engine` while the engine is down: empty answers at once (no error, no hang), the trouble
in `codespec/stats`, and suggestions again by themselves once the engine is back at the same address."""

from __future__ import annotations

import asyncio

import pytest

from codespec.llama_server import LlamaServer, free_port
from tests.lsp.helpers import (
    LOAD_WAIT_S,
    bounded,
    inline,
    item_text,
    needs_llama_server,
    open_doc,
    session,
    stats,
)
from tests.tiny_gguf import write_tiny_gguf

pytestmark = pytest.mark.asyncio

DOC = "def add(a, b):\n    return a + b\n\n\ndef scale(values, factor):\n    result = "


async def test_engine_down_then_back(tmp_path):
    needs_llama_server()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    async with session("--engine", url, init_options={"maxTokens": 8}) as client:
        uri = "file:///t/outage.py"
        open_doc(client, uri, DOC)
        for _ in range(3):
            answer = await bounded(inline(client, uri, 5, 13, trigger=1), LOAD_WAIT_S)
            assert answer == {"items": []}  # nothing to show, and no error for the editor to report
        report = await stats(client)
        assert report["engine"]["remote"]["trouble"] and "unreachable" in report["engine"]["remote"]["trouble"][0]
        server = LlamaServer(write_tiny_gguf(tmp_path / "tiny.gguf", merges=True), threads=1)
        server.port, server.url = port, url
        with server:
            for _ in range(40):  # the back-off ends within seconds; each request tries again after it
                answer = await bounded(inline(client, uri, 5, 13, trigger=1))
                if item_text(answer):
                    break
                await asyncio.sleep(0.25)
            assert item_text(answer)
            assert (await stats(client))["engine"]["remote"]["trouble"] == []
