"""Replay codespec-session files against any LSP server over stdio and measure what a user would see.

The client side speaks JSON-RPC itself (Content-Length framing over the server's pipes) rather than
through pygls's LanguageClient: session messages are raw JSON that must reach the server byte-for-byte
whatever server it is (no lsprotocol round trip that would drop or reshape unknown fields), the send and
receive instants must be taken right at the pipe, and the replayer has to see responses that a library
client would swallow (answers after a cancellation, duplicates, responses to unknown methods).

Per document the replayer behaves like VS Code: when it sends a newer inline-completion request it
first sends `$/cancelRequest` for the older one if that is still unanswered. After each cancel it can
send a probe (a request for an unknown method, which LSP servers answer at once with MethodNotFound):
the server answers in the order it reads, so an items answer that arrives after the probe's answer was
produced after the server had read the cancellation - a timing-free check of "nothing answered after
its cancellation".
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from codespec.errors import CodespecError
from codespec.sessions.format import (
    DID_CHANGE,
    DID_CLOSE,
    INLINE_COMPLETION,
    PROBE_METHOD,
    DocumentSet,
    Session,
    TextBuffer,
    is_notification,
)
from codespec.stats import percentile
from lsp.framing import READ_CHUNK, FrameParser, frame

# LSP error codes that mean "cancelled" rather than "failed".
CANCEL_CODES = {-32800, -32801, -32802}  # RequestCancelled, ContentModified, ServerCancelled
METHOD_NOT_FOUND = -32601
OUTCOMES = ("items", "null", "cancelled", "error", "missing")


def default_server_command() -> list[str]:
    return [sys.executable, "-m", "codespec.cli", "serve", "--stdio"]


# ----------------------------------------------------------------------------------------------
# JSON-RPC over a subprocess's stdio


class ServerExited(CodespecError):
    pass


class LspConnection:
    """A server subprocess and the JSON-RPC stream to it. Responses resolve futures by id; requests
    from the server get a null (or per-item null) answer; notifications are counted."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future[tuple[dict[str, Any], float]]] = {}
        self.on_response: Callable[[int, dict[str, Any], float], None] | None = None
        self.notifications: dict[str, int] = {}
        self.stderr_tail: deque[str] = deque(maxlen=40)
        self.closed = asyncio.get_running_loop().create_future()
        self._tasks = [asyncio.create_task(self._read_loop()), asyncio.create_task(self._read_stderr())]

    @classmethod
    async def start(cls, command: Sequence[str], env: dict[str, str] | None = None) -> LspConnection:
        try:
            proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **(env or {})},
                limit=1 << 24,
            )
        except OSError as exc:
            raise CodespecError(f"cannot start the server {shlex.join(command)}: {exc.strerror}") from None
        return cls(proc)

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _write(self, message: dict[str, Any]) -> float:
        body = json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":")).encode("utf-8")
        assert self.proc.stdin is not None
        now = time.perf_counter()
        self.proc.stdin.write(frame(body))
        return now

    def notify(self, method: str, params: Any = None) -> float:
        return self._write({"method": method, **({"params": params} if params is not None else {})})

    def request(self, method: str, params: Any = None, msg_id: int | None = None) -> tuple[int, float]:
        """Send a request; returns (id, send instant). Use `wait(id)` or `on_response` for its answer."""
        msg_id = self.new_id() if msg_id is None else msg_id
        self._waiting[msg_id] = asyncio.get_running_loop().create_future()
        sent = self._write(
            {"id": msg_id, "method": method, **({"params": params} if params is not None else {})}
        )
        return msg_id, sent

    async def wait(self, msg_id: int, timeout: float | None = None) -> tuple[dict[str, Any], float]:
        future = self._waiting[msg_id]
        done, _ = await asyncio.wait(
            {future, self.closed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if future in done:
            return future.result()
        if self.closed in done:
            raise ServerExited(self.exit_message())
        raise TimeoutError(f"no answer to request {msg_id} within {timeout} s")

    async def call(self, method: str, params: Any = None, timeout: float | None = 30.0) -> dict[str, Any]:
        msg_id, _ = self.request(method, params)
        response, _ = await self.wait(msg_id, timeout)
        return response

    async def drain(self) -> None:
        assert self.proc.stdin is not None
        try:
            await self.proc.stdin.drain()
        except (ConnectionResetError, BrokenPipeError):
            raise ServerExited(self.exit_message()) from None

    def exit_message(self) -> str:
        tail = "\n".join(self.stderr_tail)
        return f"the server exited (code {self.proc.returncode})" + (
            f"; its last output:\n{tail}" if tail else ""
        )

    async def _read_loop(self) -> None:
        assert self.proc.stdout is not None
        reader = self.proc.stdout
        parser = FrameParser()
        try:
            while data := await reader.read(READ_CHUNK):
                for body in parser.feed(data):
                    self._dispatch(json.loads(body), time.perf_counter())
        except (ConnectionResetError, ValueError):
            return
        finally:
            if not self.closed.done():
                self.closed.set_result(None)

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for line in self.proc.stderr:
            self.stderr_tail.append(line.decode("utf-8", "replace").rstrip())

    def _dispatch(self, message: dict[str, Any], now: float) -> None:
        if "method" in message:
            method = message["method"]
            if "id" in message:  # a request from the server: answer so that it never waits on us
                items = (message.get("params") or {}).get("items")
                result = [None] * len(items) if method == "workspace/configuration" and items else None
                self._write({"id": message["id"], "result": result})
            else:
                self.notifications[method] = self.notifications.get(method, 0) + 1
            return
        msg_id = message.get("id")
        if self.on_response is not None and isinstance(msg_id, int):
            self.on_response(msg_id, message, now)
        future = self._waiting.pop(msg_id, None) if isinstance(msg_id, int) else None
        if future is not None and not future.done():
            future.set_result((message, now))

    async def shutdown(self, timeout: float = 10.0) -> int | None:
        try:
            if self.proc.returncode is None and not self.closed.done():
                await self.call("shutdown", None, timeout=timeout)
                self.notify("exit")
                await self.drain()
            await asyncio.wait_for(self.proc.wait(), timeout)
        except (TimeoutError, CodespecError, ConnectionResetError, BrokenPipeError):
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
        for task in self._tasks:
            task.cancel()
        return self.proc.returncode


# ----------------------------------------------------------------------------------------------
# What one inline request did


@dataclass
class ReplayedRequest:
    session: str
    label: str  # the play's label (a benchmark variant), "" by default
    uri: str
    id: int
    t: float  # the session's time for it, seconds
    line: int
    character: int
    sent_s: float = 0.0  # replay clock: seconds since the replay started
    latency_ms: float | None = None
    outcome: str = "missing"
    responses: int = 0
    cancel_sent_s: float | None = None
    late: bool = False  # a result came for a request already cancelled (the editor discards it)
    answered_after_cancel: bool | None = None  # items produced after the server read the cancel
    error: dict[str, Any] | None = None
    expect: dict[str, str] | None = None
    shown: str | None = None
    accepted: bool | None = None
    chars_saved: int = 0
    line_text: str = ""  # the cursor line when it was sent
    probe_answered: bool = False
    play: int = 0  # which play of the replay (one session under one label) it belongs to
    # The keystroke (didChange) this request followed, when it is the document's first request since
    # one: the replay-clock instant that keystroke was sent, the scheduled time after it without another
    # keystroke in the session (to the next one, or to the session's last message; session time / speed),
    # and when the session's next keystroke was sent (None: it was the last). The pause figures use them.
    keystroke_s: float | None = None
    gap_ms: float | None = None
    next_keystroke_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("line_text")
        data.pop("probe_answered")
        return data


def first_item_text(result: Any) -> tuple[str, dict[str, Any] | None] | None:
    """(insertText, range) of the first inline completion item, from a list or an InlineCompletionList."""
    items = result.get("items") if isinstance(result, dict) else result
    if not isinstance(items, list) or not items or not isinstance(items[0], dict):
        return None
    text = items[0].get("insertText")
    if isinstance(text, dict):  # a StringValue snippet
        text = text.get("value")
    return (text, items[0].get("range")) if isinstance(text, str) else None


def shown_suggestion(insert_text: str, range_: dict[str, Any] | None, line: int, line_text: str,
                     character: int) -> str | None:  # fmt: skip
    """What the editor would show after the cursor: the item's text past the part of the line its range
    replaces before the cursor (editors only show items whose text extends that part)."""
    if range_ is None or range_["start"]["line"] != line:
        return insert_text
    buf = TextBuffer(line_text)
    try:
        start = buf.offset_at(0, min(range_["start"]["character"], character))
        cursor = buf.offset_at(0, character)
    except ValueError:
        return None
    typed = line_text[start:cursor]
    return insert_text[len(typed) :] if insert_text.startswith(typed) else None


def judge(shown: str, expect: dict[str, str]) -> tuple[bool, int]:
    """(accepted, characters saved). The suggestion is accepted when its first line is a non-empty
    prefix of what the user typed to the end of the line, or when all of it is a prefix of what the
    user typed next (line rest and the following lines); it saves all of itself in the second case,
    otherwise its first line (accepted line by line)."""
    line_rest, next_lines = expect.get("line_rest", ""), expect.get("next_lines", "")
    typed_next = line_rest + ("\n" + next_lines if next_lines else "")
    if shown and typed_next.startswith(shown):
        return True, len(shown)
    first_line = shown.split("\n", 1)[0]
    if first_line and line_rest.startswith(first_line):
        return True, len(first_line)
    return False, 0


# ----------------------------------------------------------------------------------------------
# The replay


@dataclass
class DocumentCheck:
    session: str
    label: str
    uri: str
    ok: bool | None  # None: the server offers no codespec/documentText
    client_version: int | None = None
    server_version: int | None = None
    detail: str = ""


@dataclass
class Play:
    """One session to replay, with server settings sent first (workspace/didChangeConfiguration) and a
    label that tags its records (benchmarks replay the same session under several settings)."""

    session: Session
    settings: Any = None
    label: str = ""
    speed: float | None | str = "default"  # this play's speed (None = max); "default": the replay's


@dataclass
class ReplayResult:
    server: list[str]
    speed: float | None  # None: max
    records: list[ReplayedRequest] = field(default_factory=list)
    documents: list[DocumentCheck] = field(default_factory=list)
    keystrokes: dict[str, int] = field(default_factory=dict)  # by play label
    other_requests: dict[str, int] = field(default_factory=dict)
    other_errors: int = 0
    server_stats: Any = None
    session_stats: list[Any] = field(default_factory=list)  # codespec/stats after each play
    sessions: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    max_send_lag_ms: float = 0.0
    notifications: dict[str, int] = field(default_factory=dict)


class Replayer:
    def __init__(self, conn: LspConnection, result: ReplayResult, *, speed: float | None, probe_cancel: bool,
                 drain_timeout_s: float, on_record: Callable[[ReplayedRequest], None] | None) -> None:  # fmt: skip
        self.conn, self.result, self.speed = conn, result, speed
        self.probe_cancel, self.drain_timeout_s, self.on_record = probe_cancel, drain_timeout_s, on_record
        self.by_id: dict[int, ReplayedRequest] = {}
        self.probes: dict[int, ReplayedRequest] = {}
        self.other: dict[int, str] = {}
        self.pending: dict[int, asyncio.Future[None]] = {}
        self.doc_text_supported: bool | None = None
        self.label = ""
        self.play_index = -1
        # per play: the keystroke each document's next request follows (send instant, gap in ms), and the
        # keystroke-triggered requests still waiting for the session's next keystroke
        self.keystroke: dict[str, tuple[float, float]] = {}
        self.awaiting_next_keystroke: list[ReplayedRequest] = []
        self.epoch = time.perf_counter()
        conn.on_response = self._on_response

    def _clock(self, instant: float) -> float:
        return instant - self.epoch

    def _on_response(self, msg_id: int, message: dict[str, Any], now: float) -> None:
        if msg_id in self.probes:
            record = self.probes.pop(msg_id)
            record.probe_answered = record.responses == 0
            return
        record = self.by_id.get(msg_id)
        if record is None:
            if msg_id in self.other and "error" in message:
                self.result.other_errors += 1
            self._resolve(msg_id)
            return
        record.responses += 1
        if record.responses > 1:
            return  # a duplicate answer: counted, the first one stands
        record.latency_ms = (self._clock(now) - record.sent_s) * 1000.0
        self._classify(record, message)
        self._resolve(msg_id)
        if self.on_record is not None:
            self.on_record(record)

    def _resolve(self, msg_id: int) -> None:
        future = self.pending.pop(msg_id, None)
        if future is not None and not future.done():
            future.set_result(None)

    def _classify(self, record: ReplayedRequest, message: dict[str, Any]) -> None:
        if "error" in message:
            record.error = message["error"]
            code = message["error"].get("code") if isinstance(message["error"], dict) else None
            record.outcome = "cancelled" if code in CANCEL_CODES else "error"
            return
        item = first_item_text(message.get("result"))
        if record.cancel_sent_s is not None:
            record.outcome = "cancelled"
            record.late = item is not None
            if item is not None and record.probe_answered:
                record.answered_after_cancel = True
            elif record.probe_answered or item is None:
                record.answered_after_cancel = False
            return
        record.outcome = "items" if item is not None else "null"
        if item is not None:
            record.shown = shown_suggestion(item[0], item[1], record.line, record.line_text, record.character)
            if record.expect is not None and record.shown:
                record.accepted, record.chars_saved = judge(record.shown, record.expect)

    async def _sleep_until(self, t: float, t0: float, start: float) -> None:
        if self.speed is None:  # max: wait for every answer, then send at once
            if self.pending:
                await self._wait_pending(list(self.pending), self.drain_timeout_s)
            return
        target = start + (t - t0) / self.speed
        delay = target - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        # how late the replayer itself sends (a busy machine): reported so that its fidelity is known
        lag_ms = (time.perf_counter() - target) * 1000.0
        self.result.max_send_lag_ms = max(self.result.max_send_lag_ms, lag_ms)

    async def _wait_pending(self, ids: list[int], timeout: float) -> None:
        futures = [self.pending[i] for i in ids if i in self.pending]
        if not futures:
            return
        # asyncio.wait, not gather: a timeout must leave the answers' futures alive (late answers
        # still count), and the server exiting ends the wait at once.
        deadline = time.perf_counter() + timeout
        remaining = set(futures)
        while remaining:
            left = deadline - time.perf_counter()
            if left <= 0:
                return
            done, _ = await asyncio.wait(
                remaining | {self.conn.closed}, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            if self.conn.closed in done:
                raise ServerExited(self.conn.exit_message())
            remaining -= done

    async def play(self, play: Play, default_speed: float | None) -> None:
        session, self.label = play.session, play.label
        self.speed = default_speed if play.speed == "default" else play.speed
        self.play_index += 1
        self.keystroke, self.awaiting_next_keystroke = {}, []
        if play.settings is not None:
            self.conn.notify("workspace/didChangeConfiguration", {"settings": play.settings})
        docs = DocumentSet()
        latest: dict[str, ReplayedRequest] = {}
        t0, start = (session.events[0].t if session.events else 0.0), time.perf_counter()
        gaps = iter(keystroke_gaps_ms(session, self.speed))
        for event in session.events:
            await self._sleep_until(event.t, t0, start)
            if event.method == DID_CLOSE and event.uri is not None:
                await self._finish_document(session, event.uri, docs)
            try:
                docs.apply(event)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise CodespecError(f"{session.name}: invalid session at t={event.t}: {exc}") from None
            if event.method == INLINE_COMPLETION:
                self._send_inline(session, event, docs, latest)
            elif is_notification(event.method):
                sent = self._clock(self.conn.notify(event.method, event.params))
                if event.method == DID_CHANGE:
                    self.result.keystrokes[self.label] = self.result.keystrokes.get(self.label, 0) + 1
                    for record in self.awaiting_next_keystroke:
                        record.next_keystroke_s = sent
                    self.awaiting_next_keystroke = []
                    self.keystroke[event.uri or ""] = (sent, next(gaps))
            else:
                msg_id, _ = self.conn.request(event.method, event.params)
                self.other[msg_id] = event.method
                self.pending[msg_id] = asyncio.get_running_loop().create_future()
                self.result.other_requests[event.method] = self.result.other_requests.get(event.method, 0) + 1
            await self.conn.drain()
        for uri in list(docs.open):  # a recorded session may end without didClose
            await self._finish_document(session, uri, docs)
        stats = await self._optional("codespec/stats", {})
        self.result.session_stats.append(stats)
        self.result.server_stats = stats if stats is not None else self.result.server_stats

    def _send_inline(
        self, session: Session, event, docs: DocumentSet, latest: dict[str, ReplayedRequest]
    ) -> None:
        uri = event.uri or ""
        older = latest.get(uri)
        if older is not None and older.responses == 0 and older.cancel_sent_s is None:
            older.cancel_sent_s = self._clock(self.conn.notify("$/cancelRequest", {"id": older.id}))
            if self.probe_cancel:
                probe_id, _ = self.conn.request(PROBE_METHOD, {})
                self.probes[probe_id] = older
        pos = event.params["position"]
        buf = docs.open[uri]
        start = buf.line_starts[pos["line"]]
        record = ReplayedRequest(session.name, self.label, uri, self.conn.new_id(), event.t, pos["line"], pos["character"],
                               expect=event.expect, line_text=buf.text[start : buf._line_end(pos["line"])])  # fmt: skip
        record.play = self.play_index
        if uri in self.keystroke:  # the first request since a keystroke in this document: a pause candidate
            record.keystroke_s, record.gap_ms = self.keystroke.pop(uri)
            self.awaiting_next_keystroke.append(record)
        self.by_id[record.id] = record
        self.pending[record.id] = asyncio.get_running_loop().create_future()
        _, sent = self.conn.request(INLINE_COMPLETION, event.params, msg_id=record.id)
        record.sent_s = self._clock(sent)
        latest[uri] = record
        self.result.records.append(record)

    async def _finish_document(self, session: Session, uri: str, docs: DocumentSet) -> None:
        """Before a document closes: wait for its answers, then compare the server's text with ours."""
        ids = [i for i, r in self.by_id.items() if r.uri == uri and i in self.pending]
        await self._wait_pending(ids, self.drain_timeout_s)
        buf = docs.open[uri]
        check = DocumentCheck(session.name, self.label, uri, None, client_version=buf.version)
        answer = await self._optional("codespec/documentText", {"uri": uri})
        if isinstance(answer, dict) and isinstance(answer.get("text"), str):
            check.server_version = answer.get("version")
            check.ok = answer["text"] == buf.text
            if not check.ok:
                check.detail = _first_difference(buf.text, answer["text"])
        self.result.documents.append(check)

    async def _optional(self, method: str, params: Any) -> Any:
        """The result of a codespec extension request, or None when the server does not offer it."""
        if method == "codespec/documentText" and self.doc_text_supported is False:
            return None
        try:
            response = await self.conn.call(method, params, timeout=self.drain_timeout_s)
        except TimeoutError:
            return None
        if "error" in response:
            if method == "codespec/documentText":
                self.doc_text_supported = False
            return None
        self.doc_text_supported = self.doc_text_supported or method == "codespec/documentText"
        return response.get("result")


def keystroke_gaps_ms(session: Session, speed: float | None) -> list[float]:
    """For each keystroke (didChange) of the session in order: the scheduled time until the session's
    next keystroke, or until its last message for the last one, in replay milliseconds (session seconds
    / speed; at max speed the session's own gaps)."""
    times = [e.t for e in session.events if e.method == DID_CHANGE]
    end = session.events[-1].t if session.events else 0.0
    factor = 1000.0 / (speed or 1.0)
    return [(later - t) * factor for t, later in zip(times, [*times[1:], end], strict=True)]


def _first_difference(ours: str, theirs: str) -> str:
    i = next(
        (k for k, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs))
    )
    return f"first difference at offset {i}: ours {ours[i : i + 30]!r}, server {theirs[i : i + 30]!r}"


WARMUP_URI = "file:///codespec-replay/warmup.py"


async def warm_up(conn: LspConnection, timeout: float) -> None:
    text = "def add(a, b):\n    "
    doc = {"uri": WARMUP_URI, "languageId": "python", "version": 1, "text": text}
    conn.notify("textDocument/didOpen", {"textDocument": doc})
    params = {"textDocument": {"uri": WARMUP_URI}, "position": {"line": 1, "character": 4},
              "context": {"triggerKind": 1}}  # fmt: skip
    try:
        await conn.call(INLINE_COMPLETION, params, timeout=timeout)
    except TimeoutError:
        raise CodespecError(f"the server did not answer a first completion within {timeout} s") from None
    conn.notify("textDocument/didClose", {"textDocument": {"uri": WARMUP_URI}})


def initialize_params(init_options: Any = None) -> dict[str, Any]:
    return {
        "processId": os.getpid(),
        "clientInfo": {"name": "codespec-replay", "version": "1"},
        "rootUri": None,
        "capabilities": {
            "general": {"positionEncodings": ["utf-16"]},
            "textDocument": {
                "synchronization": {"dynamicRegistration": False, "didSave": False},
                "inlineCompletion": {"dynamicRegistration": False},
            },
            "window": {"workDoneProgress": True},
        },
        **({"initializationOptions": init_options} if init_options is not None else {}),
    }


class ReplayServer:
    """One server process held open across plays: `start()` (initialize, warm-up), then `play(...)` any
    number of times (plays of several servers may interleave), then `close()` for the result. With
    `warmup`, one inline request on a scratch document is answered first (models loaded, as when a
    user starts typing a while after the editor started the server); it is not part of the report."""

    def __init__(
        self,
        server: Sequence[str] | None = None,
        *,
        speed: float | None = 1.0,
        probe_cancel: bool = True,
        drain_timeout_s: float = 60.0,
        init_timeout_s: float = 600.0,
        init_options: Any = None,
        env: dict[str, str] | None = None,
        on_record: Callable[[ReplayedRequest], None] | None = None,
        warmup: bool = True,
    ) -> None:
        self.command = list(server or default_server_command())
        self.speed, self.probe_cancel, self.drain_timeout_s = speed, probe_cancel, drain_timeout_s
        self.init_timeout_s, self.init_options, self.env = init_timeout_s, init_options, env
        self.on_record, self.warmup = on_record, warmup
        self.result = ReplayResult(server=self.command, speed=speed)
        self.conn: LspConnection | None = None
        self.replayer: Replayer | None = None

    async def start(self) -> None:
        self.conn = conn = await LspConnection.start(self.command, self.env)
        try:
            init = await conn.call(
                "initialize", initialize_params(self.init_options), timeout=self.init_timeout_s
            )
        except TimeoutError:
            raise CodespecError(
                f"the server did not answer initialize within {self.init_timeout_s} s"
            ) from None
        if "error" in init:
            raise CodespecError(f"the server refused initialize: {init['error'].get('message')}")
        conn.notify("initialized", {})
        if self.warmup:
            await warm_up(conn, self.init_timeout_s)
        self.replayer = Replayer(conn, self.result, speed=self.speed, probe_cancel=self.probe_cancel,
                                 drain_timeout_s=self.drain_timeout_s, on_record=self.on_record)  # fmt: skip

    async def play(self, play: Play | Session) -> None:
        if self.replayer is None:
            raise CodespecError("ReplayServer.play before start()")
        play = play if isinstance(play, Play) else Play(play)
        self.result.sessions.append(play.session.name)
        started = time.perf_counter()
        await self.replayer.play(play, self.speed)
        self.result.wall_s += time.perf_counter() - started  # this server's plays only

    async def __aenter__(self) -> ReplayServer:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> ReplayResult:
        """Shut the server down (also after a failure); the result of every play so far."""
        if self.conn is not None:
            self.result.notifications = dict(self.conn.notifications)
            await self.conn.shutdown()
            self.conn = None
        return self.result


async def replay_sessions(
    sessions: Sequence[Session | Play], server: Sequence[str] | None = None, **kwargs: Any
) -> ReplayResult:
    """Replay `sessions` one after another through one server process (keyword arguments: those of
    ReplayServer; `speed` None = max)."""
    async with ReplayServer(server, **kwargs) as replay_server:
        for play in sessions:
            await replay_server.play(play)
    return replay_server.result


def replay(
    sessions: Sequence[Session | Play], server: Sequence[str] | None = None, **kwargs: Any
) -> ReplayResult:
    return asyncio.run(replay_sessions(sessions, server, **kwargs))


# ----------------------------------------------------------------------------------------------
# Summary, table, plot


PAUSE_MS = 500.0


@dataclass
class Pause:
    """The screen at one pause: a keystroke that triggered an inline request and was followed by at
    least the pause length without another keystroke in the session (or by the session's end)."""

    record: ReplayedRequest  # the request that keystroke triggered
    ghost: str | None  # the ghost text on screen when the pause ended (None: nothing)
    # keystroke sent -> that ghost text on screen (0: ghost text stayed on screen through the keystroke)
    time_to_ghost_ms: float | None
    accepted: bool | None  # the ghost text was what the user typed next (None: not judged, no expect)

    @property
    def covered(self) -> bool:
        return self.ghost is not None


def typed_along(ghost: str, before: ReplayedRequest, after: ReplayedRequest) -> str | None:
    """What is left of `ghost` (shown at `before`'s cursor) once the user typed its start, which takes the
    document to `after`'s cursor line and position: editors keep such ghost text on screen. None when the
    typing went elsewhere or did not match the ghost text."""
    if after.uri != before.uri or after.line != before.line:
        return None
    try:
        cursor = TextBuffer(before.line_text).offset_at(0, before.character)
        new_cursor = TextBuffer(after.line_text).offset_at(0, after.character)
    except ValueError:
        return None
    typed = after.line_text[cursor:new_cursor]
    inserted = before.line_text[:cursor] + typed + before.line_text[cursor:]
    if not typed or after.line_text != inserted or not ghost.startswith(typed):
        return None
    return ghost[len(typed) :] or None


def screen_pauses(records: Sequence[ReplayedRequest], pause_ms: float = PAUSE_MS) -> tuple[list[Pause], int]:
    """(the pauses, how many answers put ghost text on screen) of one play's records (send order).

    The screen is played forward on the replay clock. An answer that arrives before a newer keystroke
    (and after no newer answer) replaces the ghost text: its suggestion, or nothing for a null. A
    keystroke keeps the ghost text when it typed the ghost text's start (the rest stays), otherwise
    clears it. A pause ends at the session's next keystroke as sent, or for the last keystroke when its
    scheduled gap has passed; what is on screen then is the pause's ghost text."""
    key, pause_end, answer = 1, 0, 2  # event order at equal instants: a pause ends before the next keystroke
    events: list[tuple[float, int, int]] = []
    keystroke_s: dict[int, float] = {}  # by record index
    # by record index: when the keystroke after the one it followed was sent; its answer is stale from then
    # on, even when that keystroke triggered no request (so that no record tells of it)
    stale_from: dict[int, float | None] = {}
    next_key: float | None = None
    for index, record in enumerate(records):
        if record.keystroke_s is not None:
            keystroke_s[index], next_key = record.keystroke_s, record.next_keystroke_s
            events.append((record.keystroke_s, key, index))
            if record.gap_ms is not None and record.gap_ms >= pause_ms:
                end = record.next_keystroke_s
                events.append(
                    (record.keystroke_s + record.gap_ms / 1000.0 if end is None else end, pause_end, index)
                )
        stale_from[index] = next_key
        if record.outcome in ("items", "null") and record.latency_ms is not None:
            events.append((record.sent_s + record.latency_ms / 1000.0, answer, index))
    events.sort()
    ghost: str | None = None
    anchor: ReplayedRequest | None = None  # the request whose cursor the ghost text follows
    since: float | None = None  # since when ghost text has been on screen without a gap
    newest_key = newest_answer = -1
    pauses: list[Pause] = []
    shown = 0
    for instant, kind, index in events:
        record = records[index]
        if kind == pause_end:
            wait = None if since is None else max(0.0, (since - keystroke_s[index]) * 1000.0)
            verdict = None if ghost is None or record.expect is None else judge(ghost, record.expect)[0]
            pauses.append(Pause(record, ghost, wait, verdict))
        elif kind == key:
            newest_key = index
            left = typed_along(ghost, anchor, record) if ghost is not None and anchor is not None else None
            ghost, anchor = (left, record) if left else (None, None)
            since = since if left else None
        else:
            later_key = stale_from[index]
            if index < newest_key or (later_key is not None and instant >= later_key):
                continue  # a newer keystroke was sent first: the editor dropped the answer
            if index < newest_answer:
                continue  # overtaken by a newer request's answer: the editor dropped it too
            newest_answer = index
            text = record.shown if record.outcome == "items" else None
            if text:
                shown += 1
                since = instant if ghost is None else since
                ghost, anchor = text, record
            else:
                ghost = anchor = since = None
    return pauses, shown


def pause_summary(records: Sequence[ReplayedRequest], keystrokes: int, chars_saved: int,
                  pause_ms: float = PAUSE_MS) -> dict[str, Any]:  # fmt: skip
    """The headline figures: what the user sees when they stop typing."""
    pauses: list[Pause] = []
    shown = 0
    by_play: dict[int, list[ReplayedRequest]] = {}
    for record in records:
        by_play.setdefault(record.play, []).append(record)
    for play_records in by_play.values():
        found, count = screen_pauses(play_records, pause_ms)
        pauses += found
        shown += count
    covered = [p for p in pauses if p.covered]
    waits = [p.time_to_ghost_ms for p in covered if p.time_to_ghost_ms is not None]
    judged = [p for p in pauses if p.record.expect is not None]
    accepted = sum(p.accepted is True for p in judged)
    return {
        "pause_ms": pause_ms,
        "count": len(pauses),
        "covered": len(covered),
        "coverage": len(covered) / len(pauses) if pauses else None,
        "time_to_ghost_ms": {"p50": percentile(waits, 50), "p90": percentile(waits, 90)},
        "accepted_at_pause": accepted,
        # over the pauses with an expect, covered or not: how often the user found the right text waiting
        "accepted_at_pause_rate": accepted / len(judged) if judged else None,
        "suggestions_per_100_keystrokes": 100.0 * shown / keystrokes if keystrokes else None,
        "chars_saved_per_keystroke": chars_saved / keystrokes if keystrokes else None,
    }


def summarize(result: ReplayResult, label: str | None = None, pause_ms: float = PAUSE_MS) -> dict[str, Any]:
    """The report: the pause figures first, then counts per outcome, latency percentiles of answered
    requests, acceptance (of the plays with `label` only, when given)."""
    records = [r for r in result.records if label is None or r.label == label]
    counts = {o: sum(r.outcome == o for r in records) for o in OUTCOMES}
    answered = [r.latency_ms for r in records if r.outcome in ("items", "null") and r.latency_ms is not None]
    with_items = [r.latency_ms for r in records if r.outcome == "items" and r.latency_ms is not None]
    shown = [r for r in records if r.shown and r.expect is not None]
    accepted = [r for r in shown if r.accepted]
    saved = sum(r.chars_saved for r in records)
    keys = sum(n for name, n in result.keystrokes.items() if label is None or name == label)
    checked = [d for d in result.documents if d.ok is not None and (label is None or d.label == label)]
    return {
        "pauses": pause_summary(records, keys, saved, pause_ms),
        "server": shlex.join(result.server),
        "speed": "max" if result.speed is None else result.speed,
        "sessions": len(result.sessions),
        "requests": len(records),
        "answered": counts["items"] + counts["null"],
        "items": counts["items"],
        "null": counts["null"],
        "cancelled": counts["cancelled"],
        "errors": counts["error"],
        "missing": counts["missing"],
        "duplicate_responses": sum(max(0, r.responses - 1) for r in records),
        "late_results": sum(r.late for r in records),
        "answered_after_cancel": sum(r.answered_after_cancel is True for r in records),
        "latency_ms": {
            "p50": percentile(answered, 50),
            "p90": percentile(answered, 90),
            "p99": percentile(answered, 99),
            "mean": sum(answered) / len(answered) if answered else None,
            "max": max(answered) if answered else None,
        },
        # the same over answers that carried a suggestion (nulls are often instant "nothing to suggest")
        "latency_items_ms": {
            "p50": percentile(with_items, 50),
            "p90": percentile(with_items, 90),
            "p99": percentile(with_items, 99),
        },
        "shown": len(shown),
        "accepted": len(accepted),
        "accepted_rate": len(accepted) / len(shown) if shown else None,
        "keystrokes": keys,
        "chars_saved": saved,
        "chars_saved_per_keystroke": saved / keys if keys else None,
        "documents_checked": len(checked),
        "documents_mismatched": sum(d.ok is False for d in checked),
        "other_requests": result.other_requests,
        "other_errors": result.other_errors,
        "server_stats": result.server_stats,
        "max_send_lag_ms": round(result.max_send_lag_ms, 1),
        "first_error": next((r.error for r in records if r.outcome == "error"), None),
        "wall_s": round(result.wall_s, 3),
    }


def format_table(summary: dict[str, Any]) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} ms"

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    lat = summary["latency_ms"]
    rate = summary["accepted_rate"]
    per_key = summary["chars_saved_per_keystroke"]
    pauses = summary["pauses"]
    per_100 = pauses["suggestions_per_100_keystrokes"]
    rows = [  # the pauses first: the moment the user looks for ghost text
        (
            f"pauses (>= {pauses['pause_ms']:.0f} ms)",
            f"{pauses['count']}, ghost text at {pauses['covered']} ({pct(pauses['coverage'])})",
        ),
        (
            "  time to ghost text p50 / p90",
            " / ".join(ms(pauses["time_to_ghost_ms"][q]) for q in ("p50", "p90")),
        ),
        (
            "  what was typed next",
            f"{pauses['accepted_at_pause']} ({pct(pauses['accepted_at_pause_rate'])} of judged pauses)",
        ),
        ("suggestions shown / 100 keys", "-" if per_100 is None else f"{per_100:.1f}"),
        (
            "chars saved / keystroke",
            "-" if per_key is None else f"{per_key:.3f} ({summary['chars_saved']} chars)",
        ),
        ("server", summary["server"]),
        ("sessions / speed", f"{summary['sessions']} / {summary['speed']}"),
        ("inline requests", summary["requests"]),
        ("answered (items / null)", f"{summary['answered']} ({summary['items']} / {summary['null']})"),
        ("cancelled", summary["cancelled"]),
        ("errors / missing", f"{summary['errors']} / {summary['missing']}"),
        ("answered after cancel", summary["answered_after_cancel"]),
        ("latency p50 / p90 / p99", f"{ms(lat['p50'])} / {ms(lat['p90'])} / {ms(lat['p99'])}"),
        ("  of items answers", " / ".join(ms(summary["latency_items_ms"][q]) for q in ("p50", "p90", "p99"))),
        (
            "shown / accepted",
            f"{summary['shown']} / {summary['accepted']}" + (f" ({rate:.1%})" if rate is not None else ""),
        ),  # fmt: skip
        (
            "final text checked",
            f"{summary['documents_checked']} docs, {summary['documents_mismatched']} mismatched",
        ),
        ("wall time / max send lag", f"{summary['wall_s']:.1f} s / {summary['max_send_lag_ms']:.0f} ms"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    if summary.get("first_error"):
        lines.append(f"{'first error':<{width}}  {json.dumps(summary['first_error'])[:200]}")
    stats = summary.get("server_stats")
    if isinstance(stats, dict):  # the scalar counters; the full object is in --json
        flat = {k: v for k, v in sorted(stats.items()) if isinstance(v, int | float | str | bool)}
        lines.append(f"{'server stats':<{width}}  {json.dumps(flat)}")
    elif stats is not None:
        lines.append(f"{'server stats':<{width}}  {json.dumps(stats)[:300]}")
    return "\n".join(lines)


def pause_waits(result: ReplayResult, label: str | None = None,
                pause_ms: float = PAUSE_MS) -> tuple[list[float], int]:  # fmt: skip
    """(time to ghost text of the covered pauses in ms, the number of pauses) of a replay's plays."""
    by_play: dict[int, list[ReplayedRequest]] = {}
    for record in result.records:
        if label is None or record.label == label:
            by_play.setdefault(record.play, []).append(record)
    pauses = [p for records in by_play.values() for p in screen_pauses(records, pause_ms)[0]]
    return [p.time_to_ghost_ms for p in pauses if p.time_to_ghost_ms is not None], len(pauses)


def plot_pause_cdf(ax: Any, waits: list[float], count: int, label: str = "", until: float | None = None,
                   **style: Any) -> None:  # fmt: skip
    """The share of pauses with ghost text on screen by each time after the keystroke: the curve
    levels off at the coverage (pauses never covered never arrive). It runs from 0 (ghost text that
    stayed through the keystroke) to `until` ms (default: a little past the slowest)."""
    if not count:
        return
    values = sorted(waits)
    xs = [0.0, *values, until if until is not None else max(values, default=0.0) * 1.05 + 1.0]
    ys = [sum(v <= 0.0 for v in values) / count, *((i + 1) / count for i in range(len(values)))]
    ys.append(ys[-1])
    text = f"{label} " if label else ""
    ax.step(xs, ys, where="post", label=f"{text}{len(values)}/{count} covered", **style)


def style_pause_axes(ax: Any, pause_ms: float) -> None:
    ax.set_xlabel("keystroke -> ghost text on screen (ms)")
    ax.set_ylabel("share of pauses with ghost text")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(f"at pauses (>= {pause_ms:.0f} ms without a keystroke)", fontsize=9)


def plot_result(result: ReplayResult, path: str, title: str = "", pause_ms: float = PAUSE_MS) -> None:
    """Latency of every inline request over the replay, the distribution of answered latencies, and the
    time to ghost text at pauses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (over_time, dist, at_pause) = plt.subplots(
        1, 3, figsize=(16, 4.4), gridspec_kw={"width_ratios": [2, 1, 1]}
    )
    styles = {"items": ("tab:green", "o"), "null": ("tab:gray", "."), "cancelled": ("tab:orange", "x"),
              "error": ("tab:red", "s")}  # fmt: skip
    for outcome, (color, marker) in styles.items():
        rows = [r for r in result.records if r.outcome == outcome and r.latency_ms is not None]
        if rows:
            over_time.scatter([r.sent_s for r in rows], [r.latency_ms for r in rows], s=10, c=color,
                              marker=marker, label=f"{outcome} ({len(rows)})")  # fmt: skip
    over_time.set_xlabel("replay time (s)")
    over_time.set_ylabel("send-to-response latency (ms)")
    over_time.set_yscale("log")
    over_time.legend(loc="upper right", fontsize=8)
    answered = [
        r.latency_ms for r in result.records if r.outcome in ("items", "null") and r.latency_ms is not None
    ]
    if answered:
        dist.hist(answered, bins=40, color="tab:blue")
        for q, style in ((50, "-"), (90, "--"), (99, ":")):
            value = percentile(answered, q)
            dist.axvline(value, color="black", linestyle=style, label=f"p{q} {value:.0f} ms")
        dist.legend(fontsize=8)
    dist.set_xlabel("answered latency (ms)")
    dist.set_ylabel("requests")
    waits, count = pause_waits(result, pause_ms=pause_ms)
    plot_pause_cdf(at_pause, waits, count, color="tab:purple")
    for q, style in ((50, "-"), (90, "--")):
        value = percentile(waits, q)
        if value is not None:
            at_pause.axvline(
                value, color="black", linestyle=style, linewidth=0.8, label=f"p{q} {value:.0f} ms"
            )
    if count:
        at_pause.legend(loc="best", fontsize=8)
    style_pause_axes(at_pause, pause_ms)
    fig.suptitle(title or f"replay: {len(result.sessions)} sessions, speed {result.speed or 'max'}")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def parse_speed(text: str) -> float | None:
    if text == "max":
        return None
    try:
        value = float(text)
    except ValueError:
        raise CodespecError(f"--speed wants a factor or 'max', not {text!r}") from None
    if value <= 0:
        raise CodespecError("--speed must be positive")
    return value
