"""Security: the server uses only the text the client sent (a URI never makes it read a file),
never runs anything from a document, opens no network socket in stdio mode (offline even for a
hub model under HF_HUB_OFFLINE), and in TCP mode listens on 127.0.0.1 only."""

from __future__ import annotations

import json
import os
import socket
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from codespec.reliability import procinfo
from codespec.reliability.rpc import (
    WAIT_S,
    StdioServer,
    did_open,
    document_text,
    frame,
    inline_params,
    read_frames,
)

pytestmark = pytest.mark.skipif(not procinfo.available(), reason="needs Linux /proc")
REPO = Path(__file__).resolve().parents[2]
EXEC_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "pty.spawn")
NETWORK_EVENTS = ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.bind", "socket.sendto",
                  "http.client.connect", "urllib.Request")


class Audit:
    """The shared server's audit log (codespec.reliability.launch --audit), from a mark on."""

    def __init__(self, path: str):
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = os.path.getsize(self.path)

    def events(self, *, since_mark: bool = True) -> list[dict]:
        with open(self.path, encoding="utf-8") as log:
            log.seek(self.offset if since_mark else 0)
            return [json.loads(line) for line in log if line.strip()]


@pytest.fixture
def audit(audit_path):
    return Audit(audit_path)


def code_roots() -> list[str]:
    paths = sysconfig.get_paths()
    roots = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"], sys.prefix,
             sys.base_prefix, str(REPO / "codespec"), str(REPO / "lsp")}
    return sorted(os.path.realpath(root) for root in roots)


def opened_paths(events: list[dict]) -> list[str]:
    return [str(event["args"][0]) for event in events if event["event"] == "open" and event["args"]]


def settle(server: StdioServer, uri: str) -> dict:
    """A completion at the end of `uri`, answered (the whole model path ran)."""
    text = document_text(server, uri)["text"]
    lines = text.split("\n")
    return server.call("textDocument/inlineCompletion", inline_params(uri, len(lines) - 1, len(lines[-1])))


def test_a_uri_never_makes_the_server_read_that_file(shared, audit, tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text("API_KEY = 'codespec-secret-never-read'\n")
    sent = {
        secret.as_uri(): "def visible():\n    return ",
        "file:///etc/passwd": "root = ",
        "file:///tmp/../etc/shadow": "x = ",
        f"file://{tmp_path}/../{tmp_path.name}/secret.py": "y = ",
        "untitled:Untitled-1": "z = ",
    }
    audit.mark()
    for uri, text in sent.items():
        did_open(shared, uri, text)
        assert "result" in settle(shared, uri)
        assert document_text(shared, uri) == {"text": text, "version": 1}
    outside = [p for p in opened_paths(audit.events()) if not os.path.realpath(p).startswith(tuple(code_roots()))]
    assert outside == [], f"the server opened files that are not its own code: {outside}"
    for uri in sent:
        shared.notify("textDocument/didClose", {"textDocument": {"uri": uri}})


def test_nothing_in_a_document_is_executed(shared, audit, tmp_path):
    token = uuid.uuid4().hex
    marker = Path(tempfile.gettempdir()) / f"codespec-pwned-{token}"
    payloads = {
        "python": f"__import__('os').system('touch {marker}')\nimport subprocess\nsubprocess.run(['touch', '{marker}'])\n",
        "shellscript": f"#!/bin/sh\ntouch {marker}\n$(touch {marker})\n`touch {marker}`\n",
        "makefile": f"all:\n\ttouch {marker}\n",
        "javascript": f"require('child_process').execSync('touch {marker}')\n",
    }
    audit.mark()
    for language, text in payloads.items():
        uri = f"file:///security/{token}.{language}"
        did_open(shared, uri, text, language)
        settle(shared, uri)
        shared.call("workspace/executeCommand", {"command": "codespec.accept", "arguments": [f"$(touch {marker})"]})
        shared.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    assert not marker.exists()
    ran = [event for event in audit.events() if event["event"].startswith(EXEC_EVENTS)]
    assert ran == [], f"the server started processes: {ran}"


def test_stdio_server_opens_no_network_socket(shared, audit):
    assert procinfo.inet_sockets(shared.pid) == []
    everything = audit.events(since_mark=False)
    network = [event for event in everything if event["event"].startswith(NETWORK_EVENTS)]
    assert network == [], f"network activity: {network[:5]}"
    families = {event["args"][1] for event in everything if event["event"] == "socket.__new__"}
    assert families <= {socket.AF_UNIX}, families  # asyncio's self-pipe is a Unix socketpair


def test_a_hub_model_under_hf_hub_offline_fails_clearly_without_network(shared, audit):
    audit.mark()
    configure(shared, model="hub:codespec-test/does-not-exist")
    try:
        did_open(shared, "file:///security/hub.py", "x = ")
        error = settle(shared, "file:///security/hub.py").get("error")
        assert error and error["code"] == -32603 and "HF_HUB_OFFLINE" in error["message"], error
    finally:
        configure(shared, model="tiny")
    assert "result" in settle(shared, "file:///security/hub.py")
    network = [event for event in audit.events() if event["event"].startswith(NETWORK_EVENTS)]
    assert network == [] and procinfo.inet_sockets(shared.pid) == [], network


def configure(server: StdioServer, **settings) -> None:
    server.notify("workspace/didChangeConfiguration", {"settings": {"codespec": settings}})


def test_tcp_mode_listens_on_loopback_only():
    with StdioServer("--tcp", "--port", "0", "--load", "lazy", tiny=False, stdio=False) as server:
        listeners = wait_for_listener(server.pid)
        assert len(listeners) == 1 and listeners[0]["local"].startswith("127.0.0.1:"), listeners
        port = int(listeners[0]["local"].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as client:
            client.sendall(frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                  "params": {"processId": None, "rootUri": None, "capabilities": {}}}))
            reply = next(read_frames(client.makefile("rb"), []))
            assert "capabilities" in reply["result"]
            sockets = procinfo.inet_sockets(server.pid)
            assert all(s["local"].startswith("127.0.0.1:") for s in sockets), sockets
            assert len(sockets) == 2  # the listener and this one connection, nothing outbound


def wait_for_listener(pid: int) -> list[dict]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        listening = [s for s in procinfo.inet_sockets(pid) if s["state"] == "0A"]  # TCP_LISTEN
        if listening:
            return listening
        time.sleep(0.05)
    return []


def test_tcp_mode_refuses_a_remote_host_without_allow_remote():
    with StdioServer("--tcp", "--host", "0.0.0.0", "--port", "0", tiny=False, stdio=False) as server:
        assert server.wait_exit(WAIT_S) == 2
        assert "not a loopback address; pass --allow-remote" in server.stderr_text()
