"""LSP base-protocol framing, the project's one copy: writing frames and splitting byte streams into bodies.

`frame` writes a frame (every client here sends with
it), `FrameParser` splits a byte stream into bodies the way the server reads its stdin (the recorder and
the replayer read with it too), `read_strict_frames` checks a stream that must be strictly framed (the
server's stdout, read by the reliability drivers).

The server's stdin: LSP base-protocol frames read in chunks, resynchronising after bad headers.

pygls 2.1.1 reads stdin a line at a time, each line a hand-off to a worker thread and back; under
load those GIL hand-offs, not the model, capped the intake at ~70 requests/s. Its parser also takes
a header only when it fills a whole line, so after a lying `Content-Length` it reads no frame until
the client happens to send a line break. Here one thread reads stdin in large chunks and the event
loop splits them with `FrameParser`, whose rules are:

- Header lines end with `\\n` (`\\r\\n` per the spec; a bare `\\n` is accepted). A line that ends
  with `Content-Length: N` (any case, optional blanks, ASCII digits) sets the length; text before
  it on the line is junk left by an earlier bad frame and is ignored. Other header lines are ignored.
- A blank line while a length is set starts a body of N bytes.
- A body that contains `Content-Length: N` (blanks: at most 16) followed by a line break cannot be JSON (JSON has no
  bare words and no raw line breaks inside strings): the length was a lie, the next frame has
  begun, so parsing restarts at that header instead of waiting for bytes that may never come.
- A header line longer than `MAX_HEADER_LINE` without a line break is dropped but for its tail.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import threading
from collections.abc import Iterator
from typing import Any, BinaryIO

from lsp.protocol import reading_stopped, start_reading

logger = logging.getLogger(__name__)

CONTENT_LENGTH_AT_END = re.compile(rb"content-length:[ \t]*(\d{1,20})[ \t]*\r?$", re.IGNORECASE)
HEADER_INSIDE_BODY = re.compile(rb"content-length:[ \t]{0,16}\d{1,20}[ \t]{0,16}\r?\n", re.IGNORECASE)
BODY_SCAN_OVERLAP = 96  # longer than any HEADER_INSIDE_BODY match: one split across two chunks is found
MAX_HEADER_LINE = 64 * 1024
HEADER_TAIL_KEPT = 256
MAX_BODY = 512 * 1024 * 1024  # an absurd length is ignored rather than buffered towards
READ_CHUNK = 1 << 16
CHUNKS_IN_FLIGHT = 64  # back-pressure: the reader thread waits when the loop is this far behind


class FrameParser:
    """Incremental: `feed(bytes)` returns the bodies completed by those bytes."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.length: int | None = None
        self.in_body = False
        self.scanned = 0  # body bytes already searched for a header
        self.resyncs = 0

    def feed(self, data: bytes) -> list[bytes]:
        self.buffer += data
        bodies: list[bytes] = []
        while self._step(bodies):
            pass
        return bodies

    @property
    def idle(self) -> bool:
        """At a frame boundary: nothing buffered, no header half read."""
        return not self.buffer and self.length is None and not self.in_body

    def _step(self, bodies: list[bytes]) -> bool:
        if self.in_body:
            return self._body_step(bodies)
        end = self.buffer.find(b"\n")
        if end < 0:
            if len(self.buffer) > MAX_HEADER_LINE:
                del self.buffer[:-HEADER_TAIL_KEPT]
            return False
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        if line in (b"", b"\r"):
            if self.length is not None:
                self.in_body, self.scanned = True, 0
            return True
        if (match := CONTENT_LENGTH_AT_END.search(line)) is not None:
            length = int(match.group(1))
            if length <= MAX_BODY:
                self.length = length
            else:
                logger.warning("ignored Content-Length %d (over %d bytes)", length, MAX_BODY)
        return True

    def _body_step(self, bodies: list[bytes]) -> bool:
        assert self.length is not None
        scan_from = max(0, self.scanned - BODY_SCAN_OVERLAP)
        if (match := HEADER_INSIDE_BODY.search(self.buffer, scan_from, self.length)) is not None:
            logger.warning("a header inside a %d-byte body: its Content-Length was wrong; resynchronised",
                           self.length)
            del self.buffer[: match.start()]
            self.resyncs += 1
            self.in_body, self.length = False, None
            return True
        if len(self.buffer) < self.length:
            self.scanned = len(self.buffer)
            return False
        bodies.append(bytes(self.buffer[: self.length]))
        del self.buffer[: self.length]
        self.in_body, self.length = False, None
        return True


def frame(body: bytes) -> bytes:
    """One frame: the Content-Length header, the blank line, `body`."""
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def read_strict_frames(stream: Any, violations: list[str]) -> Iterator[bytes]:
    """The bodies of a blocking stream that must be strictly framed: header lines ending in `\r\n`, a
    blank line, exactly Content-Length bytes. Each departure is appended to `violations`: a stray line is
    skipped, a frame without a valid length dropped, and a truncated one ends the stream."""
    while True:
        headers: dict[str, str] = {}
        while True:
            line = stream.readline()
            if not line:
                return
            if line == b"\r\n":
                break
            if not line.endswith(b"\r\n") or b":" not in line:
                violations.append(f"stray bytes on stdout: {line[:120]!r}")
                continue
            name, _, value = line.decode("ascii", "replace").partition(":")
            headers[name.strip().lower()] = value.strip()
        try:
            length = int(headers["content-length"])
        except (KeyError, ValueError):
            violations.append(f"frame without a valid Content-Length: {headers}")
            continue
        body = stream.read(length)
        if len(body) < length:
            violations.append("truncated frame on stdout")
            return
        yield body


def serve_stdio(server: Any, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """What pygls's `start_io` does, with the chunked reader (see the module docstring)."""
    from pygls.io_ import StdoutWriter

    start_reading(server)
    server.protocol.set_writer(StdoutWriter(stdout))
    try:
        asyncio.run(_read_loop(server, stdin))
    except BrokenPipeError:
        logger.error("the client's pipe is closed; shutting down")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()


async def _read_loop(server: Any, stdin: BinaryIO) -> None:
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
    in_flight = threading.BoundedSemaphore(CHUNKS_IN_FLIGHT)
    threading.Thread(target=_pump, args=(stdin, loop, chunks, in_flight), daemon=True,
                     name="codespec-stdin").start()
    try:  # SIGTERM: stop reading and end as at EOF (model work is cancelled, nothing half-written)
        loop.add_signal_handler(signal.SIGTERM, _terminated, server, chunks)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
        pass
    parser = FrameParser()
    protocol = server.protocol
    while not reading_stopped(server):
        data = await chunks.get()
        if data is None:  # SIGTERM
            return
        in_flight.release()
        if not data:
            return
        for body in parser.feed(data):
            _dispatch(protocol, body)
            await asyncio.sleep(0)  # let handlers and cancellations run between frames of a chunk


def _terminated(server: Any, chunks: asyncio.Queue[bytes | None]) -> None:
    logger.warning("SIGTERM: exiting")
    server.terminated = True
    chunks.put_nowait(None)


def _pump(stdin: BinaryIO, loop: asyncio.AbstractEventLoop, chunks: asyncio.Queue[bytes | None],
          in_flight: threading.BoundedSemaphore) -> None:
    """The reader thread: blocking reads of whatever is available, handed to the loop whole."""
    try:
        fd = stdin.fileno()
        read = lambda: os.read(fd, READ_CHUNK)  # noqa: E731 - returns what is there, not a full chunk
    except (AttributeError, OSError, ValueError):
        read = lambda: stdin.read1(READ_CHUNK)  # type: ignore[attr-defined]  # noqa: E731
    while True:
        try:
            data = read()
        except (OSError, ValueError):
            data = b""
        in_flight.acquire()
        try:
            loop.call_soon_threadsafe(chunks.put_nowait, data)
        except RuntimeError:  # the loop is closed: the server is going away
            return
        if not data:
            return


def _dispatch(protocol: Any, body: bytes) -> None:
    try:
        message = json.loads(body, object_hook=protocol.structure_message)
    except Exception as exc:  # noqa: BLE001 - bad JSON is the client's problem: log, never stop reading
        logger.warning("unreadable message (%d bytes): %s", len(body), exc)
        return
    try:
        protocol.handle_message(message)
    except Exception:  # noqa: BLE001 - as pygls: a failing handler must not end the read loop
        logger.exception("unable to handle message")
