"""Drive the real `codespec serve --stdio` process with pytest-lsp's client."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sys
from concurrent.futures import Future
from typing import Any

from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, make_test_lsp_client

WAIT_S = 30.0  # bound on every wait; generous for a loaded 2-core machine, never reached when healthy
LOAD_WAIT_S = 120.0  # starting a server that imports torch and loads models, on a busy machine
SERVER_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
TINY_ARGS = ["--model", "tiny", "--draft-model", "none", "--drafting", "lookup", "--threads", "1"]
_ids = itertools.count(1)


def server_command(*extra: str) -> list[str]:
    return [sys.executable, "-m", "codespec.cli", "serve", "--stdio", *TINY_ARGS, *extra]


def make_client() -> LanguageClient:
    client = make_test_lsp_client()
    client.partials = []  # codespec/partialCompletion params, in arrival order

    @client.feature("codespec/partialCompletion")
    def on_partial(params: Any) -> None:
        client.partials.append(params)

    return client


def capabilities(*, encodings: list[str] | None = None, progress: bool = False) -> types.ClientCapabilities:
    return types.ClientCapabilities(
        general=types.GeneralClientCapabilities(position_encodings=encodings) if encodings else None,
        window=types.WindowClientCapabilities(work_done_progress=progress),
        text_document=types.TextDocumentClientCapabilities(
            synchronization=types.TextDocumentSyncClientCapabilities(),
            inline_completion=types.InlineCompletionClientCapabilities(),
            completion=types.CompletionClientCapabilities(),
        ),
    )


@contextlib.asynccontextmanager
async def session(
    *extra_args: str,
    init_options: dict[str, Any] | None = None,
    caps: types.ClientCapabilities | None = None,
):
    config = ClientServerConfig(server_command=server_command(*extra_args), client_factory=make_client, server_env=SERVER_ENV)
    client = await config.start()
    try:
        result = await bounded(
            client.initialize_session(
                types.InitializeParams(
                    capabilities=caps or capabilities(), initialization_options=init_options or {}
                )
            ),
            LOAD_WAIT_S,
        )
        client.init_result = result
        yield client
    finally:
        if client._server is not None and client._server.returncode is None:
            with contextlib.suppress(Exception):
                await bounded(client.shutdown_session(), WAIT_S)
        if client._server is not None and client._server.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                client._server.kill()  # a server that did not exit is a failure reported above
        with contextlib.suppress(Exception):
            await bounded(client.stop(), WAIT_S)


async def bounded(awaitable, timeout: float = WAIT_S):
    return await asyncio.wait_for(awaitable, timeout)


def raw_request(client: LanguageClient, method: str, params: Any, msg_id: Any = None) -> asyncio.Future:
    """Send a request exactly as given (no client-side validation); the future gets the raw result
    or a JsonRpcException carrying the error code."""
    msg_id = msg_id if msg_id is not None else f"raw-{next(_ids)}"
    future: Future = Future()
    client.protocol._request_futures[msg_id] = future
    client.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    plain: Future = Future()

    def convert(done: Future) -> None:
        if done.cancelled():
            plain.cancel()
        elif done.exception() is not None:
            plain.set_exception(done.exception())
        else:
            plain.set_result(to_plain(done.result()))

    future.add_done_callback(convert)
    wrapped = asyncio.wrap_future(plain)
    wrapped.msg_id = msg_id
    return wrapped


def to_plain(value: Any) -> Any:
    """pygls turns untyped JSON objects into namedtuples; tests compare plain JSON."""
    if hasattr(value, "_asdict"):
        return {key: to_plain(item) for key, item in value._asdict().items()}
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    return value


def cancel_request(client: LanguageClient, msg_id: Any) -> None:
    client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=msg_id))


async def stats(client: LanguageClient, recent: int = 64) -> dict[str, Any]:
    return await bounded(raw_request(client, "codespec/stats", {"recent": recent}))


async def document_text(client: LanguageClient, uri: str) -> dict[str, Any] | None:
    return await bounded(raw_request(client, "codespec/documentText", {"uri": uri}))


async def wait_until(predicate, *, timeout: float = WAIT_S, interval: float = 0.05):
    """Poll an async predicate until it returns a truthy value (bounded)."""

    async def poll():
        while True:
            value = await predicate()
            if value:
                return value
            await asyncio.sleep(interval)

    return await bounded(poll(), timeout)


def open_doc(client: LanguageClient, uri: str, text: str, language: str = "python", version: int = 1) -> None:
    client.opened = [*getattr(client, "opened", []), uri]
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)
        )
    )


def close_opened(client: LanguageClient) -> None:
    """didClose what a test opened: other open documents feed the prompt (neighbour snippets)."""
    for uri in getattr(client, "opened", []):
        client.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )
    client.opened = []


def insert(client: LanguageClient, uri: str, version: int, line: int, character: int, text: str) -> None:
    at = types.Position(line=line, character=character)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=text)],
        )
    )


def inline_params(
    uri: str,
    line: int,
    character: int,
    *,
    trigger: int = 2,
    selected: dict[str, Any] | None = None,
) -> dict[str, Any]:
    context: dict[str, Any] = {"triggerKind": trigger}
    if selected is not None:
        context["selectedCompletionInfo"] = selected
    return {
        "textDocument": {"uri": uri},
        "position": {"line": line, "character": character},
        "context": context,
    }


def inline(client: LanguageClient, uri: str, line: int, character: int, **kwargs) -> asyncio.Future:
    """textDocument/inlineCompletion; the raw JSON result (None, or {"items": [...]})."""
    return raw_request(client, types.TEXT_DOCUMENT_INLINE_COMPLETION, inline_params(uri, line, character, **kwargs))


def item_text(result: Any) -> str | None:
    if not result or not result.get("items"):
        return None
    return result["items"][0]["insertText"]


FAIL_MARKER = "codespec_simulated_failure_marker"
FIRST_DOC = "file:///t/first.py"
DEFAULTS = {
    "stepDelay": 0.0,
    "earlyAnswer": True,
    "maxTokens": 24,
    "cache": True,
    "typingAlong": True,
    "prefetch": True,
    "prefetchDelay": 0.0,  # prefetch at once: settle() then sees it
}


def configure(client: LanguageClient, **settings: Any) -> None:
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"codespec": settings}))


async def settle(client: LanguageClient) -> dict[str, Any]:
    """Wait until every generation (prefetch included) has finished; returns the stats."""

    async def idle():
        report = await stats(client, recent=0)  # polled: keep the answer small
        generations = report["generations"]
        return generations["started"] == generations["finished"] and report["pending"] == 0

    await wait_until(idle)
    return await stats(client)


def record_of(report: dict[str, Any], msg_id: Any) -> dict[str, Any]:
    return next(r for r in report["recentRequests"] if r["id"] == msg_id)


def generation_of(report: dict[str, Any], gen_id: int) -> dict[str, Any]:
    return next(g for g in report["generations"]["recent"] if g["id"] == gen_id)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def advance(line: int, character: int, text: str, *, units=utf16_len) -> tuple[int, int]:
    """The position after inserting `text` at (line, character), LSP line breaks (\\r\\n, \\r, \\n)."""
    parts = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if len(parts) == 1:
        return line, character + units(text)
    return line + len(parts) - 1, units(parts[-1])


def end_position(text: str, *, units=utf16_len) -> tuple[int, int]:
    return advance(0, 0, text, units=units)


def needs_llama_server() -> None:
    """Skip, saying why, where `make llama-server` has not built llama.cpp's server (`make test` builds it)."""
    import pytest

    from codespec.errors import CodespecError
    from codespec.llama_server import find_llama_server

    try:
        find_llama_server()
    except CodespecError as exc:
        pytest.skip(str(exc))


@contextlib.contextmanager
def tiny_llama_server(directory, *, slots: int = 2):
    """llama.cpp's llama-server (built by `make llama-server`) serving the tiny model as a GGUF; yields its URL."""
    from codespec.llama_server import LlamaServer
    from tests.tiny_gguf import write_tiny_gguf

    needs_llama_server()
    gguf = write_tiny_gguf(directory / "tiny.gguf", merges=True)
    with LlamaServer(gguf, threads=1, context=2048 * slots, slots=slots) as server:
        yield server.url
