"""A small pygls language server for the replay tests: answers every inline completion with one fixed
suggestion after a delay, honours $/cancelRequest (pygls cancels the handler's task), and offers the
codespec/documentText and codespec/stats extensions. Flags break it on purpose so that the tests can
show the replay's checks fail when they should."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer


def _get(params: Any, key: str) -> Any:
    return params.get(key) if isinstance(params, dict) else getattr(params, key, None)


def build_server(args: argparse.Namespace) -> LanguageServer:
    server = LanguageServer("fake-codespec", "0")
    counts = {"requests": 0, "answered": 0}
    polls = {"settle": 0}  # stats polls since the last inline request (--work-after-play)

    def answer() -> types.InlineCompletionList:
        counts["answered"] += 1
        return types.InlineCompletionList(items=[types.InlineCompletionItem(insert_text=args.suggestion)])

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def configure(ls: LanguageServer, params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings if isinstance(params.settings, dict) else {}
        args.suggestion = settings.get("suggestion", args.suggestion)

    if args.ignore_cancel:  # a thread handler: pygls cannot cancel it once it runs

        @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION)
        @server.thread()
        def inline_blocking(ls: LanguageServer, params: types.InlineCompletionParams):
            counts["requests"] += 1
            polls["settle"] = 0
            time.sleep(args.delay)
            return answer()

    else:

        @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION)
        async def inline(ls: LanguageServer, params: types.InlineCompletionParams):
            counts["requests"] += 1
            polls["settle"] = 0
            await asyncio.sleep(args.delay)
            return answer()

    if args.no_extensions:
        return server

    @server.feature("codespec/documentText")
    def document_text(ls: LanguageServer, params: Any):
        doc = ls.workspace.get_text_document(_get(params, "uri"))
        text = doc.source + ("#" if args.corrupt_text else "")
        return {"text": text, "version": doc.version}

    @server.feature("codespec/stats")
    def stats(ls: LanguageServer, params: Any):
        if args.work_after_play is None:
            return dict(counts)
        # Work left after each play that ends only after `work_after_play` polls (the replayer's settle);
        # a new request starts the count again.
        polls["settle"] += 1
        left = max(0, args.work_after_play - polls["settle"])
        return {**counts, "pendingWork": left, "settlePolls": polls["settle"]}

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--suggestion", default="pass")
    parser.add_argument("--ignore-cancel", action="store_true")
    parser.add_argument("--corrupt-text", action="store_true")
    parser.add_argument("--work-after-play", type=int, default=None,
                        help="report pendingWork until polled this many times after the last request")
    parser.add_argument("--no-extensions", action="store_true", help="no codespec/documentText or stats")
    args = parser.parse_args()
    build_server(args).start_io()


if __name__ == "__main__":
    main()
