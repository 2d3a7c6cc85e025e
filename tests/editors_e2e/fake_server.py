"""A misbehaving stand-in for `codespec serve --stdio` (stdlib only), for the extension's fault tests.

    python fake_server.py MODE

MODE: `exit-at-start` (writes an error to stderr and exits 3 before reading anything), `garbage`
(initializes properly, then answers every inline completion with a malformed result, a frame that is
not JSON and a notification the client does not know), `fixed` (a well-behaved server that always
suggests FIXED_SUGGESTION: the harness's own check).
"""

from __future__ import annotations

import json
import sys
from typing import Any, BinaryIO

FIXED_SUGGESTION = "(a, b):\n    return a + b"


def read_frame(stream: BinaryIO) -> dict[str, Any] | None:
    length = None
    while True:
        line = stream.readline()
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if length is None:
        return {}
    return json.loads(stream.read(length))


def write_raw(body: bytes) -> None:
    sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    sys.stdout.buffer.flush()


def write(message: dict[str, Any]) -> None:
    write_raw(json.dumps({"jsonrpc": "2.0", **message}).encode())


def initialize_result() -> dict[str, Any]:
    return {"capabilities": {"textDocumentSync": 1, "inlineCompletionProvider": True,
                             "executeCommandProvider": {"commands": ["codespec.accept"]}},
            "serverInfo": {"name": "fake-codespec", "version": "0"}}


def answer(mode: str, message: dict[str, Any]) -> None:
    method, msg_id = message.get("method"), message.get("id")
    if msg_id is None:
        if method == "exit":
            sys.exit(0)
        return
    if method == "initialize":
        write({"id": msg_id, "result": initialize_result()})
    elif method == "textDocument/inlineCompletion":
        if mode == "garbage":
            write_raw(b"this is not json {")
            write({"method": "codespec/noSuchNotification", "params": [1, 2, 3]})
            write({"id": msg_id, "result": {"items": "not a list", "junk": True}})
        else:
            position = message["params"]["position"]
            write({"id": msg_id, "result": {"items": [{"insertText": FIXED_SUGGESTION,
                                                       "range": {"start": position, "end": position}}]}})
    elif method == "codespec/stats":
        write({"id": msg_id, "result": {"requests": 0, "engine": {"loaded": True, "model": f"fake-{mode}"}}})
    else:
        write({"id": msg_id, "result": None})


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "fixed"
    if mode == "exit-at-start":
        sys.stderr.write("fake codespec: cannot load the model (simulated start-up failure)\n")
        sys.exit(3)
    while (message := read_frame(sys.stdin.buffer)) is not None:
        answer(mode, message)


if __name__ == "__main__":
    main()
