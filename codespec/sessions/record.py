"""Recording client messages as a codespec-session v1 file.

`SessionRecorder` is what `codespec serve --stdio --record FILE` calls with each message the client
sends; `proxy` is `codespec record --out FILE -- CMD...`, a stdio proxy that records an editor's
session with any LSP server. Lifecycle messages, cancellations and the client's responses are left out:
the replayer produces those itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from codespec.errors import CodespecError
from codespec.framing import READ_CHUNK, FrameParser
from codespec.sessions.format import (
    DID_OPEN,
    INLINE_COMPLETION,
    LIFECYCLE_METHODS,
    PROBE_METHOD,
    Event,
    Session,
    dump_line,
    first_lines,
    make_header,
    utf16_len,
)


class SessionRecorder:
    """Writes client messages to `path` as they come, one line each, flushed at once (so a crash
    loses nothing). Times count from the first recorded message. The header is written with the first
    didOpen (which gives the language); messages before it wait in memory. Thread-safe. With
    `annotate`, `close()` rewrites the file once with each inline request's `expect` (what the user
    typed next, see `annotate_expect`)."""

    def __init__(
        self,
        path: str | Path,
        *,
        source: str = "recorded",
        clock: Callable[[], float] = time.monotonic,
        annotate: bool = True,
    ):
        self.path = Path(path)
        self.source, self.clock, self.annotate = source, clock, annotate
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] | None = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            raise CodespecError(f"cannot write the session file {self.path}: {exc.strerror}") from None
        self._lock = threading.Lock()
        self._t0: float | None = None
        self._waiting: list[Event] | None = []  # until the header is out
        self.recorded = 0

    def record(self, message: dict[str, Any]) -> bool:
        """Record one JSON-RPC message from the client; returns whether it was kept."""
        method = message.get("method") if isinstance(message, dict) else None
        if not isinstance(method, str) or method in LIFECYCLE_METHODS or method == PROBE_METHOD:
            return False  # responses to the server, lifecycle, cancellation, the replayer's probes
        with self._lock:
            if self._file is None:
                return False
            now = self.clock()
            self._t0 = now if self._t0 is None else self._t0
            event = Event(now - self._t0, method, message.get("params"))
            if self._waiting is not None:
                self._waiting.append(event)
                if method == DID_OPEN:
                    language = ((event.params or {}).get("textDocument") or {}).get("languageId", "unknown")
                    self._flush_waiting(str(language))
            else:
                self._write(event)
            self.recorded += 1
        return True

    def record_bytes(self, body: bytes) -> bool:
        """Record one JSON-RPC message body (as framed on the wire); undecodable bodies are skipped."""
        try:
            message = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return False
        return self.record(message) if isinstance(message, dict) else False

    def _flush_waiting(self, language: str) -> None:
        assert self._file is not None and self._waiting is not None
        self._file.write(dump_line(make_header(self.source, language)) + "\n")
        waiting, self._waiting = self._waiting, None
        for event in waiting:
            self._write(event)

    def _write(self, event: Event) -> None:
        assert self._file is not None
        self._file.write(dump_line(event.to_json()) + "\n")
        self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is None:
                return
            if self._waiting is not None:  # nothing was ever opened: still a readable file
                self._flush_waiting("unknown")
            self._file.close()
            self._file = None
        if self.annotate and self.recorded:
            annotate_file(self.path)

    def __enter__(self) -> SessionRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _chunks(source: IO[bytes]) -> Iterator[bytes]:
    """What `source` has, as it arrives (never waiting for a full buffer), until its end."""
    while chunk := source.read1(READ_CHUNK) if hasattr(source, "read1") else source.read(READ_CHUNK):
        yield chunk


def _copy(source: IO[bytes], sink: IO[bytes]) -> None:
    for chunk in _chunks(source):
        sink.write(chunk)
        sink.flush()


def proxy(
    command: list[str],
    out: str | Path,
    *,
    source: str = "recorded",
    client_in: IO[bytes] | None = None,
    client_out: IO[bytes] | None = None,
) -> int:
    """Run `command` as the LSP server, pass the client's stdio through to it byte for byte, and
    record the client's messages to `out`. Returns the server's exit code."""
    if not command:
        raise CodespecError(
            "give the server command after --, e.g. codespec record --out s.jsonl -- codespec serve --stdio"
        )
    client_in = client_in or sys.stdin.buffer
    client_out = client_out or sys.stdout.buffer
    try:
        server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except OSError as exc:
        raise CodespecError(f"cannot start {command[0]}: {exc.strerror}") from None
    assert server.stdin is not None and server.stdout is not None
    recorder = SessionRecorder(out, source=source)
    to_client = threading.Thread(target=_copy, args=(server.stdout, client_out), daemon=True)
    # The client side is read on a daemon thread: when the server exits first, the proxy exits too
    # instead of waiting for the editor's next message.
    to_server = threading.Thread(target=_forward, args=(client_in, server.stdin, recorder), daemon=True)
    to_client.start()
    to_server.start()
    try:
        code = server.wait()
        to_client.join(timeout=5)
    finally:
        recorder.close()
    return code


def _forward(client_in: IO[bytes], server_in: IO[bytes], recorder: SessionRecorder) -> None:
    parser = FrameParser()  # the client's frames as the server splits them
    try:
        for chunk in _chunks(client_in):
            for body in parser.feed(chunk):
                recorder.record_bytes(body)
            server_in.write(chunk)
            server_in.flush()
    except (BrokenPipeError, ConnectionResetError, ValueError, OSError):
        pass  # the server went away first
    finally:
        try:
            server_in.close()
        except OSError:
            pass


# ----------------------------------------------------------------------------------------------
# Ground truth for recorded sessions


def _advance(line: int, character: int, text: str) -> tuple[int, int]:
    """The cursor after inserting `text` at (line, character), in UTF-16 units."""
    if "\n" not in text:
        return line, character + utf16_len(text)
    return line + text.count("\n"), utf16_len(text.rsplit("\n", 1)[1])


def typed_after(events: list[Event], start: int, uri: str, line: int, character: int) -> str | None:
    """What the user typed at the cursor after events[start]: the run of insertions at the cursor (and
    backspaces over them) in `uri`'s later changes. None when the user first erased text from before
    the cursor (no ground truth: e.g. a typo being fixed)."""
    typed = ""
    for event in events[start + 1 :]:
        if event.uri != uri:
            continue
        if event.method == "textDocument/didClose":
            break
        if event.method != "textDocument/didChange":
            continue
        for change in event.params.get("contentChanges", []):
            rng = change.get("range")
            if rng is None:
                return typed
            start_pos = (rng["start"]["line"], rng["start"]["character"])
            end_pos = (rng["end"]["line"], rng["end"]["character"])
            if start_pos == end_pos == (line, character) and change["text"]:
                typed += change["text"]
                line, character = _advance(line, character, change["text"])
            elif end_pos == (line, character) and start_pos[0] == line and not change["text"]:
                units = character - start_pos[1]
                if units > utf16_len(typed[typed.rfind("\n") + 1 :]):
                    return typed or None  # erasing text from before the cursor ends the run
                while units > 0:
                    units -= utf16_len(typed[-1])
                    typed = typed[:-1]
                character = start_pos[1]
            else:
                return typed
    return typed


def annotate_expect(session: Session, next_lines_kept: int = 3) -> int:
    """Give every inline request without an `expect` the one its session implies (what was typed
    next at the cursor, see `typed_after`); returns how many were annotated. This turns a recording
    into ground truth for acceptance. Typing that stops short of the line end gives a shorter
    `line_rest` than the user may have meant."""
    count = 0
    for index, event in enumerate(session.events):
        if event.method != INLINE_COMPLETION or event.expect is not None or event.uri is None:
            continue
        pos = event.params.get("position") or {}
        typed = typed_after(session.events, index, event.uri, pos.get("line", -1), pos.get("character", -1))
        if typed is None:
            continue
        line_rest, _, rest = typed.partition("\n")
        event.expect = {"line_rest": line_rest, "next_lines": first_lines(rest, next_lines_kept)}
        count += 1
    return count


def annotate_file(path: str | Path) -> int:
    from codespec.sessions.format import read_session, write_session

    session = read_session(path)
    count = annotate_expect(session)
    if count:
        write_session(session, path)
    return count
