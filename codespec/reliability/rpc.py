"""A raw JSON-RPC client for the real `codespec serve --stdio` process.

Raw on purpose: the fuzzers write arbitrary bytes, and every check (exactly one response per
request id, nothing but frames on stdout) needs the wire as it is, with no client library that
validates or retries. A reader thread parses stdout strictly and files each message by id."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codespec.framing import frame as lsp_frame
from codespec.framing import read_strict_frames

TINY_ARGS = ("--model", "tiny", "--draft-model", "none", "--drafting", "lookup", "--threads", "1")
WAIT_S = 30.0  # bound on every wait; never reached by a healthy server
START_WAIT_S = 120.0  # the first start imports torch and builds the tiny model on a loaded machine


class ServerGone(Exception):
    """The server closed stdout (exited) while a response was awaited."""


class NoResponse(Exception):
    """No response arrived within the bound."""


def frame(message: Any) -> bytes:
    return lsp_frame(json.dumps(message).encode())


def id_key(msg_id: Any) -> str:
    """Ids of any JSON type (the fuzzers send odd ones) as a hashable key."""
    return json.dumps(msg_id, sort_keys=True)


@dataclass
class Received:
    """What came back from the server, filed by the reader thread."""

    responses: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    notifications: list[dict[str, Any]] = field(default_factory=list)
    server_requests: list[dict[str, Any]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)  # stray bytes, bad frames on stdout
    arrival: dict[str, float] = field(default_factory=dict)  # id -> perf_counter of first response


def server_command(
    *server_args: str, launcher_args: Sequence[str] = (), tiny: bool = True, stdio: bool = True
) -> list[str]:
    """`python -m codespec.reliability.launch [LAUNCHER ARGS] -- serve --stdio [tiny] ARGS`; with no
    launcher options the launcher only runs `codespec` (same process as the console script)."""
    serve = ["serve", *(["--stdio"] if stdio else []), *(TINY_ARGS if tiny else ()), *server_args]
    return [sys.executable, "-m", "codespec.reliability.launch", *launcher_args, "--", *serve]


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


class StdioServer:
    """One `codespec serve --stdio` child process with its own session (process group); with
    `stdio=False` (and `--tcp` among the args) its stdio pipes carry only logs."""

    def __init__(
        self,
        *server_args: str,
        launcher_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        tiny: bool = True,
        stdio: bool = True,
    ):
        self._stderr_file = tempfile.NamedTemporaryFile(prefix="codespec-serve-", suffix=".log", delete=False)
        self.command = server_command(*server_args, launcher_args=launcher_args, tiny=tiny, stdio=stdio)
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr_file,
            env=server_env(env),
            start_new_session=True,  # its own process group: orphans are easy to find
        )
        self.pid = self.proc.pid
        self.received = Received()
        self._cond = threading.Condition()
        self._eof = False
        self._write_lock = threading.Lock()
        self._next_id = 0
        self.sent_at: dict[str, float] = {}
        self._reader = threading.Thread(target=self._read_loop, name="rpc-reader", daemon=True)
        self._reader.start()

    # ----- writing -------------------------------------------------------------------------------

    def send_bytes(self, data: bytes) -> None:
        with self._write_lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def send(self, message: Any) -> None:
        self.send_bytes(frame(message))

    def new_id(self) -> int:
        with self._write_lock:
            self._next_id += 1
            return self._next_id

    def request(self, method: str, params: Any = None, msg_id: Any = None) -> Any:
        """Send a request; returns its id (without waiting)."""
        msg_id = self.new_id() if msg_id is None else msg_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            message["params"] = params
        self.sent_at[id_key(msg_id)] = time.perf_counter()
        self.send(message)
        return msg_id

    def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def call(self, method: str, params: Any = None, timeout: float = WAIT_S) -> dict[str, Any]:
        """Request and wait: the whole response message (result or error)."""
        return self.wait_response(self.request(method, params), timeout)

    def result(self, method: str, params: Any = None, timeout: float = WAIT_S) -> Any:
        response = self.call(method, params, timeout)
        if "error" in response:
            raise RuntimeError(f"{method} failed: {response['error']}")
        return response.get("result")

    # ----- session -------------------------------------------------------------------------------

    def initialize(self, options: dict[str, Any] | None = None, timeout: float = START_WAIT_S) -> dict[str, Any]:
        capabilities = {
            "textDocument": {"synchronization": {}, "inlineCompletion": {}, "completion": {}},
            "general": {"positionEncodings": ["utf-16"]},
        }
        params = {"processId": os.getpid(), "rootUri": None, "capabilities": capabilities,
                  "initializationOptions": options or {}}
        result = self.result("initialize", params, timeout)
        self.notify("initialized", {})
        return result

    def shutdown_and_exit(self, timeout: float = WAIT_S) -> int | None:
        with contextlib.suppress(Exception):
            self.call("shutdown", None, timeout)
            self.notify("exit")
        return self.wait_exit(timeout)

    def wait_exit(self, timeout: float = WAIT_S) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        """End the process however it is doing (bounded), and its whole process group."""
        with contextlib.suppress(Exception):
            self.proc.stdin.close()  # type: ignore[union-attr]
        if self.wait_exit(5.0) is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, 9)
            self.proc.wait(10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, 9)  # stray members of its group, if any (none expected)
        with contextlib.suppress(Exception):
            self.proc.stdout.close()  # type: ignore[union-attr]
        self._stderr_file.close()

    def stderr_text(self) -> str:
        try:
            return Path(self._stderr_file.name).read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> StdioServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
        with contextlib.suppress(OSError):
            os.unlink(self._stderr_file.name)

    # ----- reading -------------------------------------------------------------------------------

    def wait_response(self, msg_id: Any, timeout: float = WAIT_S) -> dict[str, Any]:
        key = id_key(msg_id)
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self.received.responses.get(key):
                if self._eof:
                    raise ServerGone(f"server exited before answering {msg_id!r}: {self.stderr_tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise NoResponse(f"no response to {msg_id!r} within {timeout}s")
                self._cond.wait(left)
            return self.received.responses[key][0]

    def answer_counts(self) -> tuple[dict[str, int], list[str]]:
        """How many responses each id key got, and the stdout violations, at this moment."""
        with self._cond:
            counts = {key: len(items) for key, items in self.received.responses.items()}
            return counts, list(self.received.violations)

    def responses_for(self, msg_id: Any) -> list[dict[str, Any]]:
        with self._cond:
            return list(self.received.responses.get(id_key(msg_id), []))

    def wait_until(self, predicate, timeout: float = WAIT_S) -> bool:
        """Wait (bounded) until predicate(received) holds; the reader thread notifies each message."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.received):
                left = deadline - time.monotonic()
                if left <= 0 or self._eof:
                    return predicate(self.received)
                self._cond.wait(min(left, 0.5))
            return True

    def stderr_tail(self, chars: int = 2000) -> str:
        return self.stderr_text()[-chars:]

    def _read_loop(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        try:
            for message in read_frames(stream, self.received.violations):
                self._file(message)
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def _file(self, message: Any) -> None:
        with self._cond:
            if isinstance(message, dict) and "method" in message and "id" in message:
                self.received.server_requests.append(message)
                self._answer_server_request(message)
            elif isinstance(message, dict) and "method" in message:
                self.received.notifications.append(message)
            elif isinstance(message, dict) and "id" in message:
                key = id_key(message["id"])
                self.received.responses[key].append(message)
                self.received.arrival.setdefault(key, time.perf_counter())
            else:
                self.received.violations.append(f"not a JSON-RPC message: {str(message)[:120]}")
            self._cond.notify_all()

    def _answer_server_request(self, message: dict[str, Any]) -> None:
        # window/workDoneProgress/create and the like: accept them, as an editor does (from another
        # thread: the reader must never block on a write).
        reply = {"jsonrpc": "2.0", "id": message["id"], "result": None}
        threading.Thread(target=self._send_quietly, args=(reply,), daemon=True).start()

    def _send_quietly(self, message: Any) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.send(message)


def read_frames(stream: Any, violations: list[str]) -> Iterator[Any]:
    """Strict LSP framing (codespec.framing.read_strict_frames) of JSON messages."""
    for body in read_strict_frames(stream, violations):
        try:
            yield json.loads(body)
        except ValueError as exc:
            violations.append(f"invalid JSON on stdout: {exc}")


# ----- documents ------------------------------------------------------------------------------


def did_open(server: StdioServer, uri: str, text: str, language: str = "python", version: int = 1) -> None:
    server.notify(
        "textDocument/didOpen",
        {"textDocument": {"uri": uri, "languageId": language, "version": version, "text": text}},
    )


def did_change(server: StdioServer, uri: str, version: int, changes: list[dict[str, Any]]) -> None:
    server.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                             "contentChanges": changes})


def inline_params(uri: str, line: int, character: int, trigger: int = 1) -> dict[str, Any]:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": character},
            "context": {"triggerKind": trigger}}


def document_text(server: StdioServer, uri: str, timeout: float = WAIT_S) -> dict[str, Any] | None:
    return server.result("codespec/documentText", {"uri": uri}, timeout)


def warm_up(server: StdioServer, timeout: float = START_WAIT_S) -> None:
    """One completion, so that the model is loaded and torch warm before anything is measured."""
    uri = "file:///warm-up/codespec.py"
    did_open(server, uri, "def add(a, b):\n    return ")
    server.result("textDocument/inlineCompletion", inline_params(uri, 1, 11), timeout)
    server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
