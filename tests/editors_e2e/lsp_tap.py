"""A transparent stdio tap between VS Code's language client and the real `codespec serve --stdio`.

    python lsp_tap.py --dir DIR -- codespec serve --stdio --model tiny ...

The extension launches this (its `codespec.server.path` / `codespec.server.args`) instead of the server;
it starts the server as its child and copies every frame both ways unchanged, so the extension talks to
the real server. Besides, it

- logs every frame (direction, time, the JSON message) to DIR/frames.jsonl, so that tests compare what
  VS Code shows and inserts with what the server answered, and see the `$/cancelRequest`s it sent;
- writes the server's pid to DIR/server.pid (tests kill it to check the extension's restart);
- serves requests from the tests on the Unix socket DIR/control.sock (one JSON line in, one out:
  `{"method": "codespec/stats", "params": {}}` -> the server's result), sent to the server with ids
  of its own whose answers never reach VS Code.

When the server exits, the tap exits with its code (the extension sees its server die); when VS Code
closes the tap's stdin, the server's stdin is closed too. Stdlib only: it runs with any Python 3.11.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

TAP_ID_PREFIX = "e2e-tap-"


def read_frame(stream: BinaryIO) -> bytes | None:
    """One LSP frame's body (None at EOF)."""
    length = None
    while True:
        line = stream.readline()
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            if length is not None:
                break
            continue
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = stream.read(length)
    return body if len(body) == length else None


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Tap:
    def __init__(self, directory: Path, command: list[str]) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = (self.dir / "frames.jsonl").open("a", encoding="utf-8")
        self.log_lock = threading.Lock()
        self.server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        (self.dir / "server.pid").write_text(str(self.server.pid))
        self.to_server_lock = threading.Lock()
        self.to_client_lock = threading.Lock()
        self.ids = itertools.count(1)
        self.waiting: dict[str, tuple[threading.Event, list[Any]]] = {}

    def record(self, direction: str, body: bytes) -> None:
        try:
            message: Any = json.loads(body)
        except ValueError:
            message = {"unparsed": body.decode("utf-8", "replace")}
        line = json.dumps({"dir": direction, "t": time.time(), "pid": self.server.pid, "msg": message})
        with self.log_lock:
            self.log.write(line + "\n")
            self.log.flush()

    def send_to_server(self, body: bytes) -> None:
        assert self.server.stdin is not None
        with self.to_server_lock:
            self.server.stdin.write(frame(body))
            self.server.stdin.flush()

    def client_to_server(self) -> None:
        while (body := read_frame(sys.stdin.buffer)) is not None:
            self.record("client->server", body)
            try:
                self.send_to_server(body)
            except (BrokenPipeError, ValueError):
                break
        try:
            assert self.server.stdin is not None
            self.server.stdin.close()
        except (BrokenPipeError, ValueError):
            pass

    def server_to_client(self) -> None:
        assert self.server.stdout is not None
        while (body := read_frame(self.server.stdout)) is not None:
            try:
                message = json.loads(body)
            except ValueError:
                message = None
            msg_id = message.get("id") if isinstance(message, dict) else None
            if isinstance(msg_id, str) and msg_id in self.waiting:
                event, slot = self.waiting.pop(msg_id)
                slot.append(message)
                event.set()
                continue
            self.record("server->client", body)
            with self.to_client_lock:
                sys.stdout.buffer.write(frame(body))
                sys.stdout.buffer.flush()

    def request(self, method: str, params: Any, timeout_s: float = 30.0) -> Any:
        msg_id = f"{TAP_ID_PREFIX}{next(self.ids)}"
        event, slot = threading.Event(), []
        self.waiting[msg_id] = (event, slot)
        self.send_to_server(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method,
                                        "params": params}).encode())
        if not event.wait(timeout_s):
            self.waiting.pop(msg_id, None)
            return {"error": {"message": f"no answer to {method} within {timeout_s} s"}}
        return slot[0]

    def notify(self, method: str, params: Any) -> Any:
        self.send_to_server(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode())
        return {"result": None}

    def control(self) -> None:
        path = self.dir / "control.sock"
        path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen()
        while True:
            connection, _ = listener.accept()
            threading.Thread(target=self.serve_control, args=(connection,), daemon=True).start()

    def serve_control(self, connection: socket.socket) -> None:
        with connection, connection.makefile("rwb") as stream:
            line = stream.readline()
            try:
                query = json.loads(line)
                if query.get("notify"):
                    answer = self.notify(query["method"], query.get("params"))
                else:
                    answer = self.request(query["method"], query.get("params"), float(query.get("timeout", 30)))
            except Exception as error:  # the test sees it as an error answer
                answer = {"error": {"message": f"tap: {error!r}"}}
            stream.write(json.dumps(answer).encode() + b"\n")
            stream.flush()

    def run(self) -> int:
        threading.Thread(target=self.client_to_server, daemon=True).start()
        threading.Thread(target=self.control, daemon=True).start()
        self.server_to_client()  # until the server's stdout closes: it exited (or is exiting)
        code = self.server.wait()
        self.record("tap", json.dumps({"serverExit": code}).encode())
        return code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="where frames.jsonl, server.pid, control.sock go")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the server command")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    code = Tap(args.dir, command).run()
    sys.stdout.flush()
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
