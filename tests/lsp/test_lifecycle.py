"""Start-up, transports, encodings and the end of the process, each with its own server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import make_test_lsp_client

from codespec.llama_server import free_port
from tests.lsp.helpers import (
    LOAD_WAIT_S,
    SERVER_ENV,
    WAIT_S,
    advance,
    bounded,
    capabilities,
    configure,
    document_text,
    end_position,
    inline,
    insert,
    item_text,
    open_doc,
    record_of,
    server_command,
    session,
    settle,
    stats,
    wait_until,
)


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def parse_frames(data: bytes) -> list[dict]:
    """Strict parse: stdout must be nothing but Content-Length framed JSON."""
    messages = []
    while data:
        header, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, f"stray bytes on stdout: {data[:80]!r}"
        fields = dict(line.split(b": ", 1) for line in header.split(b"\r\n"))
        length = int(fields[b"Content-Length"])
        messages.append(json.loads(rest[:length]))
        data = rest[length:]
    return messages


def test_stdout_is_protocol_only_and_every_request_is_answered():
    """Raw frames through a real process (lazy loading, so no model is touched)."""
    frames = [
        frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}),
        b"Content-Length: 12\r\n\r\n{broken json",
        frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
        frame(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "textDocument/inlineCompletion",
                "params": {
                    "textDocument": {"uri": "file:///x.py"},
                    "position": {"line": 0, "character": 0},
                    "context": {"triggerKind": 3},
                },
            }
        ),
        frame({"jsonrpc": "2.0", "id": 3, "method": "codespec/documentText", "params": {"uri": "file:///x.py"}}),
        frame({"jsonrpc": "2.0", "id": 4, "method": "shutdown"}),
        frame({"jsonrpc": "2.0", "id": 5, "method": "codespec/stats", "params": {}}),
        frame({"jsonrpc": "2.0", "method": "exit"}),
    ]
    done = subprocess.run(
        server_command("--load", "lazy"),
        input=b"".join(frames),
        capture_output=True,
        timeout=WAIT_S,
        env=SERVER_ENV,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    messages = [m for m in parse_frames(done.stdout) if "id" in m]
    assert sorted(m["id"] for m in messages) == [1, 2, 3, 4, 5]  # each request answered exactly once
    replies = {m["id"]: m for m in messages}
    assert replies[1]["result"]["capabilities"]["positionEncoding"] == "utf-16"
    assert replies[2]["error"]["code"] == -32602
    assert replies[3]["result"] is None  # unknown document
    assert replies[4]["result"] is None
    assert replies[5]["error"]["code"] == -32600  # after shutdown


def test_exit_without_shutdown_and_vanished_client_end_the_process():
    init = frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}})
    exited = subprocess.run(
        server_command("--load", "lazy"),
        input=init + frame({"jsonrpc": "2.0", "method": "exit"}),
        capture_output=True,
        timeout=WAIT_S,
        env=SERVER_ENV,
    )
    assert exited.returncode == 1  # exit without shutdown
    vanished = subprocess.run(
        server_command("--load", "lazy"), input=init, capture_output=True, timeout=WAIT_S, env=SERVER_ENV
    )
    assert vanished.returncode in (0, 1)
    assert parse_frames(vanished.stdout)[0]["id"] == 1


def test_remote_host_is_refused_without_allow_remote():
    done = subprocess.run(
        [sys.executable, "-m", "codespec.cli", "serve", "--tcp", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        timeout=WAIT_S,
        env=SERVER_ENV,
    )
    assert done.returncode == 2
    assert b"--allow-remote" in done.stderr


@pytest.mark.asyncio
async def test_tcp_transport():
    port = free_port()
    command = [*server_command("--load", "lazy")]
    command[command.index("--stdio")] = "--tcp"
    server = await asyncio.create_subprocess_exec(*command, "--port", str(port), env=SERVER_ENV)
    client = make_test_lsp_client()
    try:

        async def connect():
            try:
                await client.start_tcp("127.0.0.1", port)
                return True
            except OSError:
                return False

        await wait_until(connect, interval=0.1)
        result = await bounded(client.initialize_session(types.InitializeParams(capabilities=capabilities())))
        assert result.capabilities.inline_completion_provider is not None
        open_doc(client, "file:///tcp.py", "x = 1\n")
        assert (await document_text(client, "file:///tcp.py"))["text"] == "x = 1\n"
        await bounded(client.shutdown_async(None))
        client.exit(None)
        assert await bounded(server.wait()) == 0
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
        await client.stop()


@pytest.mark.asyncio
async def test_utf8_negotiation_lazy_progress_and_exit_during_generation():
    async with session(
        "--load",
        "lazy",
        caps=capabilities(encodings=["utf-16", "utf-8"], progress=True),
        init_options={"maxTokens": 24},
    ) as client:
        assert client.init_result.capabilities.position_encoding == types.PositionEncodingKind.Utf8
        uri = "file:///u8.py"
        doc = 'name = "h\u00e9llo"\ngreeting = "\u4e16\u754c" + '
        open_doc(client, uri, doc)
        line, character = end_position(doc, units=utf8_len)
        assert character == len('greeting = "') + 6 + len('" + ')  # two CJK characters, 3 bytes each
        assert not client.progress_reports  # lazy: nothing loaded before the first request

        first = await bounded(inline(client, uri, line, character, trigger=1), LOAD_WAIT_S)
        (reports,) = client.progress_reports.values()  # loading on the first request, with progress
        assert isinstance(reports[0], types.WorkDoneProgressBegin) and isinstance(reports[-1], types.WorkDoneProgressEnd)
        assert first["items"][0]["range"]["start"] == {"line": line, "character": character}

        # An edit in utf-8 columns inside multi-byte text lands where it should.
        insert(client, uri, 2, 0, utf8_len('name = "h\u00e9'), "\u00e9")
        doc = 'name = "h\u00e9\u00e9llo"\ngreeting = "\u4e16\u754c" + '
        assert await document_text(client, uri) == {"text": doc, "version": 2}
        await settle(client)
        full = await bounded(inline(client, uri, line, character, trigger=1))
        text = item_text(full)
        assert text
        # Typing along from a utf-8 column: the offsets of edit and request agree.
        insert(client, uri, 3, line, character, text[0])
        follow = inline(client, uri, *advance(line, character, text[0], units=utf8_len))
        assert item_text(await bounded(follow)) == text[1:]
        assert record_of(await stats(client), follow.msg_id)["source"] == "typed-along"

        # shutdown while a slow generation runs: its request is cancelled, exit ends the process.
        configure(client, stepDelay=1.0, maxTokens=200, earlyAnswer=False)
        insert(client, uri, 4, 0, 0, "# slow\n")
        doc = "# slow\n" + doc + text[0]
        slow = inline(client, uri, *end_position(doc, units=utf8_len), trigger=1)
        await wait_until(lambda: _generation_running(client))
        await bounded(client.shutdown_async(None))
        with pytest.raises(JsonRpcException) as error:
            await bounded(slow)
        assert error.value.code == -32800
        client.exit(None)
        assert await bounded(client._server.wait(), 5.0) == 0


async def _generation_running(client) -> bool:
    report = await stats(client, recent=0)
    return report["generations"]["started"] > report["generations"]["finished"]


@pytest.mark.asyncio
async def test_model_load_failure_is_reported_and_the_server_keeps_serving():
    async with session("--model", "tiny:not-a-seed") as client:
        uri = "file:///load.py"
        open_doc(client, uri, "x = ")  # while the worker imports the engine (once lost the document)
        await wait_until(lambda: _message_shown(client), timeout=LOAD_WAIT_S)  # eager load failed
        assert "seed must be an integer" in client.messages[-1].message
        assert len(client.messages) == 1
        with pytest.raises(JsonRpcException) as error:
            await bounded(inline(client, uri, 0, 4, trigger=1), LOAD_WAIT_S)  # the load is retried
        assert error.value.code == -32603 and error.value.data == {"kind": "load"}
        assert (await document_text(client, uri))["text"] == "x = "


async def _message_shown(client) -> bool:
    return any(m.type == types.MessageType.Error for m in client.messages)


async def test_record_writes_every_client_message_as_a_session(tmp_path):
    from codespec.sessions.format import read_session

    path = tmp_path / "recorded.jsonl"
    uri = "file:///rec.py"
    async with session("--record", str(path)) as client:
        open_doc(client, uri, "def f():\n    ")
        insert(client, uri, 2, 1, 4, "r")
        await bounded(inline(client, uri, 1, 5))
        insert(client, uri, 3, 1, 5, "e")
        await bounded(document_text(client, uri))
    recorded = read_session(path)
    assert recorded.header["format"] == "codespec-session" and recorded.header["language"] == "python"
    methods = [event.method for event in recorded.events]
    assert methods[:4] == ["textDocument/didOpen", "textDocument/didChange", "textDocument/inlineCompletion",
                           "textDocument/didChange"]
    assert recorded.events[1].params["contentChanges"][0]["text"] == "r"
    assert all(a.t <= b.t for a, b in zip(recorded.events, recorded.events[1:], strict=False))
