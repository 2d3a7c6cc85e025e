"""A tiny stand-in for `codespec serve --stdio`: it speaks the same protocol (inline completion with an
accept command, `codespec/stats`, opt-in `codespec/partialCompletion` streaming) but always suggests
SUGGESTION after a configurable delay. The editor tests use it to check exact ghost text and buffer
contents, which a random-weight model cannot give; the real server is covered by the e2e tests.

    python tests/editors/standin_server.py [--delay SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

# Two lines, so that clients must show inline text and a virtual line.
SUGGESTION = "(a, b):\n    return a + b"
ACCEPT_COMMAND = "codespec.accept"
REJECT_COMMAND = "codespec.reject"
STREAM_CHUNKS = 3


class StandinServer(LanguageServer):
    def __init__(self, delay_s: float) -> None:
        super().__init__("codespec-standin", "0.0-standin")
        self.delay_s = delay_s
        self.streaming = False
        self.counts = {"requests": 0, "completed": 0, "cancelled": 0, "accepted": 0, "rejected": 0}
        self.latencies_ms: list[float] = []
        self.accepted_args: list[Any] = []
        self.rejected_args: list[Any] = []


def build_server(delay_s: float) -> StandinServer:
    server = StandinServer(delay_s)

    @server.feature(types.INITIALIZE)
    def on_initialize(ls: StandinServer, params: types.InitializeParams) -> None:
        options = params.initialization_options
        ls.streaming = bool(isinstance(options, dict) and options.get("streaming"))

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: StandinServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList:
        ls.counts["requests"] += 1
        started = time.perf_counter()
        uri, position = params.text_document.uri, params.position
        version = ls.workspace.get_text_document(uri).version
        try:
            for step in range(1, STREAM_CHUNKS + 1):
                await asyncio.sleep(ls.delay_s / STREAM_CHUNKS)
                if ls.streaming:
                    partial = SUGGESTION[: len(SUGGESTION) * step // STREAM_CHUNKS]
                    ls.protocol.notify(
                        "codespec/partialCompletion",
                        {"uri": uri, "version": version, "position": {"line": position.line,
                         "character": position.character}, "text": partial, "done": step == STREAM_CHUNKS},
                    )
        except asyncio.CancelledError:
            ls.counts["cancelled"] += 1
            raise
        ls.counts["completed"] += 1
        ls.latencies_ms.append((time.perf_counter() - started) * 1000)
        item = types.InlineCompletionItem(
            insert_text=SUGGESTION,
            range=types.Range(position, position),
            command=types.Command(
                title="codespec accepted", command=ACCEPT_COMMAND, arguments=[{"id": ls.counts["requests"]}]
            ),
        )
        return types.InlineCompletionList(items=[item])

    @server.command(ACCEPT_COMMAND)
    def accept(ls: StandinServer, *arguments: Any) -> dict[str, bool]:
        ls.counts["accepted"] += 1
        ls.accepted_args.extend(arguments)
        return {"known": True}

    @server.command(REJECT_COMMAND)
    def reject(ls: StandinServer, *arguments: Any) -> None:
        ls.counts["rejected"] += 1
        ls.rejected_args.extend(arguments)

    @server.feature("standin/configure")
    def configure(ls: StandinServer, params: Any) -> None:
        """Tests share one server: set its delay and streaming, and zero its counters."""
        ls.delay_s = float(getattr(params, "delay", ls.delay_s))
        ls.streaming = bool(getattr(params, "streaming", ls.streaming))
        ls.counts = dict.fromkeys(ls.counts, 0)
        ls.latencies_ms.clear()
        ls.accepted_args.clear()
        ls.rejected_args.clear()

    @server.feature("codespec/stats")
    def stats(ls: StandinServer, _params: Any) -> dict[str, Any]:
        ordered = sorted(ls.latencies_ms)

        def pct(p: float) -> float | None:
            return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else None

        served = ls.counts["completed"]
        # The real server's key names (lsp/stats.py), a subset of its counts.
        return {
            **ls.counts,
            "latencyMs": {"count": len(ordered), "p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99)},
            "acceptanceRate": ls.counts["accepted"] / served if served else None,
            "acceptedArgs": ls.accepted_args,
            "rejectedArgs": ls.rejected_args,
            "engine": {"loaded": True, "model": "standin"},
        }

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.05, help="seconds before answering (default 0.05)")
    args = parser.parse_args()
    build_server(args.delay).start_io()


if __name__ == "__main__":
    main()
