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

What the replay adds up to (the pause figures, the summary, the table, the plots) is in
codespec/sessions/metrics.py. The rest is one file for one job: the raw LSP client, the record of each
request and the replayer that drives them exist only for each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from codespec.errors import CodespecError
from codespec.framing import READ_CHUNK, FrameParser, frame
from codespec.sessions.format import (
    DID_CHANGE,
    DID_CLOSE,
    INLINE_COMPLETION,
    PROBE_METHOD,
    DocumentSet,
    Session,
    TextBuffer,
    is_notification,
    request_categories,
)

# LSP error codes that mean "cancelled" rather than "failed".
CANCEL_CODES = {-32800, -32801, -32802}  # RequestCancelled, ContentModified, ServerCancelled
METHOD_NOT_FOUND = -32601
# codespec serve appends each request's record (lsp/stats.py RequestRecord: cause, phase, prefill) to this file
REQUEST_LOG_ENV = "CODESPEC_REQUEST_LOG"
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
    # where the user was (format.request_categories: typing | jump | switch | open), from the session
    category: str = ""
    # the server's own record of the request (codespec serve's request log: cause, phase, contextReason,
    # prefillTokens, ...), None for servers that keep none
    server: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        # line_text stays: the pauses' typed-along rule reads it, so a records file can be summarized again.
        data = asdict(self)
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
    typed_chars: dict[str, int] = field(default_factory=dict)  # characters the keystrokes inserted, by label
    other_requests: dict[str, int] = field(default_factory=dict)
    other_errors: int = 0
    server_stats: Any = None
    session_stats: list[Any] = field(default_factory=list)  # codespec/stats after each play
    # The server's record of each finished generation (its request log), all plays of this server together.
    generations: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    # Time spent after plays waiting for the server's own work to end (Replayer.settle), not part of wall_s.
    settle_s: float = 0.0
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
        categories = iter(request_categories(session))
        for event in session.events:
            await self._sleep_until(event.t, t0, start)
            if event.method == DID_CLOSE and event.uri is not None:
                await self._finish_document(session, event.uri, docs)
            try:
                docs.apply(event)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise CodespecError(f"{session.name}: invalid session at t={event.t}: {exc}") from None
            if event.method == INLINE_COMPLETION:
                self._send_inline(session, event, docs, latest, next(categories, ""))
            elif is_notification(event.method):
                sent = self._clock(self.conn.notify(event.method, event.params))
                if event.method == DID_CHANGE:
                    self.result.keystrokes[self.label] = self.result.keystrokes.get(self.label, 0) + 1
                    typed = sum(len(c.get("text", "")) for c in event.params.get("contentChanges") or [])
                    self.result.typed_chars[self.label] = self.result.typed_chars.get(self.label, 0) + typed
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
        await self.settle()
        stats = await self._optional("codespec/stats", {})
        self.result.session_stats.append(stats)
        self.result.server_stats = stats if stats is not None else self.result.server_stats

    async def settle(self, poll_s: float = 0.05) -> float:
        """Wait until the server says it has no work left (`pendingWork` 0 in codespec/stats): a prefetch or
        idle-time prefill started by the play's last answers would otherwise run beside the next play, of
        this server or of another held open on the same CPU, and slow it (measured: 20-30 s of a finished
        server's idle-time prefill at half the CPU, experiments/replay-control/log.md). Servers without the
        field are not waited for. Returns the seconds waited (also added to the result's settle_s)."""
        started = time.perf_counter()
        deadline = started + self.drain_timeout_s
        while time.perf_counter() < deadline:
            try:
                stats = await self.conn.call("codespec/stats", {"recent": 0}, timeout=self.drain_timeout_s)
            except TimeoutError:
                break
            pending = (stats.get("result") or {}).get("pendingWork") if isinstance(stats, dict) else None
            if not isinstance(pending, int) or pending == 0:
                break
            await asyncio.sleep(poll_s)
        waited = time.perf_counter() - started
        self.result.settle_s += waited
        return waited

    def _send_inline(
        self, session: Session, event, docs: DocumentSet, latest: dict[str, ReplayedRequest], category: str = ""
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
        record.play, record.category = self.play_index, category
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


def attach_server_records(records: Sequence[ReplayedRequest], path: str,
                          generations: list[dict[str, Any]] | None = None) -> int:
    """Give each request the server's record of it (same JSON-RPC id) from a request log; returns how many.
    The log's generation records are appended to `generations` when given."""
    by_id: dict[Any, dict[str, Any]] = {}
    try:
        with open(path, encoding="utf-8") as log:
            for line in log:
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if isinstance(entry, dict) and "id" in entry:
                        by_id[entry["id"]] = entry
                    elif isinstance(entry, dict) and isinstance(entry.get("generation"), dict):
                        if generations is not None:
                            generations.append(entry["generation"])
    except OSError:
        return 0
    found = 0
    for record in records:
        entry = by_id.get(record.id)
        if entry is not None:
            record.server, found = entry, found + 1
    return found


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
        server_records: bool = True,
    ) -> None:
        self.command = list(server or default_server_command())
        self.speed, self.probe_cancel, self.drain_timeout_s = speed, probe_cancel, drain_timeout_s
        self.init_timeout_s, self.init_options, self.env = init_timeout_s, init_options, env
        self.on_record, self.warmup = on_record, warmup
        # The server's own record of each request (codespec serve's request log, REQUEST_LOG_ENV), read
        # back at close() into ReplayedRequest.server; other servers ignore the variable.
        self.request_log: str | None = None
        if server_records:
            handle, self.request_log = tempfile.mkstemp(prefix="codespec-requests-", suffix=".jsonl")
            os.close(handle)
            self.env = {**(env or {}), REQUEST_LOG_ENV: self.request_log}
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
        if self.warmup:  # the warm-up's own idle-time work ends before any play
            await self.replayer.settle()

    async def play(self, play: Play | Session) -> None:
        if self.replayer is None:
            raise CodespecError("ReplayServer.play before start()")
        play = play if isinstance(play, Play) else Play(play)
        self.result.sessions.append(play.session.name)
        started, settled = time.perf_counter(), self.result.settle_s
        await self.replayer.play(play, self.speed)
        # this server's plays only, without the wait for its own work to end after each
        self.result.wall_s += time.perf_counter() - started - (self.result.settle_s - settled)

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
        if self.request_log is not None:
            attach_server_records(self.result.records, self.request_log, self.result.generations)
            with contextlib.suppress(OSError):
                os.unlink(self.request_log)
            self.request_log = None
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
