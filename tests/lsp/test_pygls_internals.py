"""The pygls internals lsp/protocol.py relies on, exercised by behaviour through the real server process.

lsp/protocol.py is the one module that touches pygls's private attributes (PYGLS_INTERNALS). A pygls
upgrade that renames one of them, or keeps the name but changes what it does, must fail here and not in an
editor: so each internal is covered by what the server does with it (a request answered, a
$/cancelRequest answered -32800, a request after shutdown refused, exit ending the process, no handler
future leaked), over raw JSON-RPC frames, so the test sees exactly the bytes an editor would."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from codespec.llama_server import free_port
from lsp.protocol import PYGLS_INTERNALS
from tests.lsp.helpers import LOAD_WAIT_S, SERVER_ENV, WAIT_S, server_command, wait_until

PY_DOC = "def add(a, b):\n    return a + b\n\n\ndef scale(values, factor):\n    result = "
URI = "file:///t/pygls.py"
SLOW = {"stepDelay": 0.5, "earlyAnswer": False, "maxTokens": 200, "prefetch": False}  # >= 100 s unless cancelled

# Which test below fails when pygls moves or changes each internal.
COVERED_BY = {
    ("protocol", "_shutdown"): "test_a_stdio_session_through_the_internals (request after shutdown: -32600)",
    ("protocol", "_request_futures"): "test_a_stdio_session_through_the_internals (cancel; handlersInFlight 0)",
    ("protocol", "_converter"): "test_a_stdio_session_through_the_internals (bad params: -32602)",
    ("protocol", "_send_response"): "test_a_stdio_session_through_the_internals (invalid requests answered)",
    ("protocol", "_serialize_message"): "test_a_stdio_session_through_the_internals (id null kept)",
    ("protocol", "_execute_handler"): "test_a_stdio_session_through_the_internals (handlersInFlight 0)",
    ("protocol", "_check_handler_result"): "test_a_stdio_session_through_the_internals (handlersInFlight 0)",
    ("protocol", "_handle_cancel_notification"): "test_a_stdio_session_through_the_internals (-32800)",
    ("server", "_stop_event"): "test_a_stdio_session_through_the_internals (exit ends the process)",
    ("server", "_thread_pool"): "test_a_stdio_session_through_the_internals (exit ends the process)",
    ("server", "_server"): "test_tcp_exit_closes_the_listener",
}


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class RawClient:
    """JSON-RPC over a byte stream: write frames as given, collect responses by id (notifications apart)."""

    def __init__(self, reader: asyncio.StreamReader, writer: Any) -> None:
        self.reader, self.writer = reader, writer
        self.responses: dict[Any, list[dict[str, Any]]] = {}
        self.notifications: list[dict[str, Any]] = []
        self.closed = asyncio.Event()
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            while True:
                header = await self.reader.readuntil(b"\r\n\r\n")
                fields = dict(line.split(b": ", 1) for line in header.strip().split(b"\r\n"))
                message = json.loads(await self.reader.readexactly(int(fields[b"Content-Length"])))
                if "id" in message and "method" not in message:
                    self.responses.setdefault(message["id"], []).append(message)
                else:
                    self.notifications.append(message)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed.set()

    def send(self, message: dict[str, Any]) -> None:
        self.writer.write(frame({"jsonrpc": "2.0", **message}))

    async def response(self, msg_id: Any, timeout: float = WAIT_S) -> dict[str, Any]:
        async def answered():
            return self.responses.get(msg_id)

        return (await wait_until(answered, timeout=timeout))[0]

    async def request(self, msg_id: Any, method: str, params: Any = None, timeout: float = WAIT_S) -> dict[str, Any]:
        self.send({"id": msg_id, "method": method, **({} if params is None else {"params": params})})
        return await self.response(msg_id, timeout)


def initialize_params() -> dict[str, Any]:
    return {"capabilities": {"textDocument": {"inlineCompletion": {}, "synchronization": {}}},
            "initializationOptions": {"streaming": False, "maxTokens": 8}}  # fmt: skip


def inline_params(line: int, character: int, trigger: int = 1) -> dict[str, Any]:
    return {"textDocument": {"uri": URI}, "position": {"line": line, "character": character},
            "context": {"triggerKind": trigger}}  # fmt: skip


@contextlib.asynccontextmanager
async def stdio_server(*extra: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, RawClient]]:
    process = await asyncio.create_subprocess_exec(
        *server_command(*extra), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env=SERVER_ENV,
    )  # fmt: skip
    client = RawClient(process.stdout, process.stdin)
    try:
        yield process, client
    finally:
        if process.returncode is None:
            process.kill()  # a server that did not exit is a failure the test reports
            await process.wait()
        client.task.cancel()


def test_every_internal_is_covered_by_a_behaviour_test():
    assert set(COVERED_BY) == set(PYGLS_INTERNALS), "lsp/protocol.py uses an internal no behaviour test covers"


@pytest.mark.asyncio
async def test_a_stdio_session_through_the_internals():
    async with stdio_server() as (process, client):
        init = await client.request(1, "initialize", initialize_params(), timeout=LOAD_WAIT_S)
        assert "capabilities" in init["result"]
        client.send({"method": "initialized", "params": {}})
        client.send({"method": "textDocument/didOpen",
                     "params": {"textDocument": {"uri": URI, "languageId": "python", "version": 1, "text": PY_DOC}}})  # fmt: skip
        # A request through pygls's handler futures, answered once (the model is loaded first).
        answer = await client.request(2, "textDocument/inlineCompletion", inline_params(1, 16), timeout=LOAD_WAIT_S)
        assert "result" in answer and "items" in (answer["result"] or {"items": []})

        # Notifications: pygls files a future for each; _execute_handler's callback must remove it.
        line, character = 5, len("    result = ")
        for version in range(2, 32):
            client.send({"method": "textDocument/didChange", "params": {
                "textDocument": {"uri": URI, "version": version},
                "contentChanges": [{"range": {"start": {"line": line, "character": character},
                                              "end": {"line": line, "character": character}}, "text": "x"}]}})  # fmt: skip
            character += 1

        # $/cancelRequest of a running request: _handle_cancel_notification finds its future in
        # _request_futures and cancels it; pygls answers the request with -32800 (RequestCancelled).
        client.send({"method": "workspace/didChangeConfiguration", "params": {"settings": {"codespec": SLOW}}})
        client.send({"id": "slow", "method": "textDocument/inlineCompletion", "params": inline_params(line, character)})
        client.send({"method": "$/cancelRequest", "params": {"id": "slow"}})
        cancelled = await client.response("slow")
        assert cancelled["error"]["code"] == -32800, cancelled
        client.send({"method": "$/cancelRequest", "params": {"id": "never-sent"}})  # normal traffic: ignored
        client.send({"method": "workspace/didChangeConfiguration",
                     "params": {"settings": {"codespec": {"stepDelay": 0.0, "maxTokens": 8}}}})  # fmt: skip

        async def no_handler_left():
            stats = await client.request(f"stats-{len(client.responses)}", "codespec/stats", {"recent": 0})
            return stats["result"]["handlersInFlight"] == 0 and stats["result"]["pending"] == 0

        # 30 edits, a cancel and two configurations later no handler future is held (pygls alone
        # keeps one per notification for ever); the stats request itself is answered, so not counted.
        await wait_until(no_handler_left)

        # Params that do not structure (pygls's _converter raises): answered -32602 through _send_response.
        bad = await client.request(3, "textDocument/inlineCompletion", inline_params(0, 0, trigger=3))
        assert bad["error"]["code"] == -32602
        # The same with "id": null: the error keeps "id": null (_serialize_message), as JSON-RPC wants.
        client.send({"id": None, "method": "textDocument/inlineCompletion", "params": inline_params(0, 0, trigger=3)})
        null_id = await client.response(None)
        assert null_id["error"]["code"] == -32602 and null_id["id"] is None
        # A notification method sent with an id is a request nobody else would answer.
        misused = await client.request(4, "textDocument/didSave", {"textDocument": {"uri": URI}})
        assert misused["error"]["code"] == -32600
        assert len(client.responses[2]) == 1 and len(client.responses["slow"]) == 1  # each answered once

        # shutdown sets pygls's _shutdown: a later request is refused; exit stops the read loop and the
        # handler thread pool (_stop_event, _thread_pool) and the process ends with 0.
        assert (await client.request(5, "shutdown"))["result"] is None
        refused = await client.request(6, "codespec/stats", {})
        assert refused["error"]["code"] == -32600
        client.send({"method": "exit"})
        assert await asyncio.wait_for(process.wait(), WAIT_S) == 0
        await asyncio.wait_for(client.closed.wait(), WAIT_S)


@pytest.mark.asyncio
async def test_tcp_exit_closes_the_listener():
    """Over TCP, release_server closes pygls's listener (server._server): after shutdown and exit the
    process ends with 0 and the port refuses new connections."""
    port = free_port()
    command = server_command("--load", "lazy")
    command[command.index("--stdio")] = "--tcp"
    process = await asyncio.create_subprocess_exec(*command, "--port", str(port), env=SERVER_ENV,
                                                   stderr=asyncio.subprocess.DEVNULL)  # fmt: skip
    writer = None
    try:

        async def connected():
            nonlocal writer
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return None
            return RawClient(reader, writer)

        client = await wait_until(connected, timeout=LOAD_WAIT_S)
        assert "capabilities" in (await client.request(1, "initialize", initialize_params()))["result"]
        assert (await client.request(2, "shutdown"))["result"] is None
        client.send({"method": "exit"})
        assert await asyncio.wait_for(process.wait(), WAIT_S) == 0
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if writer is not None:
            writer.close()


def test_the_wrappers_read_and_stop_what_they_say():
    from lsp.options import ServerOptions
    from lsp.protocol import reading_stopped, release_server, start_reading
    from lsp.server import create_server

    server = create_server(ServerOptions(load_models="lazy"))
    assert server.protocol.shutdown_requested is False and server.protocol.requests_in_flight == 0
    start_reading(server)
    assert not reading_stopped(server)
    release_server(server)
    assert reading_stopped(server)
