"""LSP base-protocol framing, the project's one copy: writing frames and splitting byte streams into bodies.

Below both the server (lsp/) and the tools that drive it (sessions, reliability), so neither imports the
other for it. `frame` writes a frame (every client here sends with it), `FrameParser` splits a byte stream
into bodies the way the server reads its stdin (the recorder and the replayer read with it too),
`read_strict_frames` checks a stream that must be strictly framed (the server's stdout, read by the
reliability drivers).

The server's stdin loop (lsp/stdio.py) reads with `FrameParser`, whose rules are:

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

import logging
import re
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)

CONTENT_LENGTH_AT_END = re.compile(rb"content-length:[ \t]*(\d{1,20})[ \t]*\r?$", re.IGNORECASE)
HEADER_INSIDE_BODY = re.compile(rb"content-length:[ \t]{0,16}\d{1,20}[ \t]{0,16}\r?\n", re.IGNORECASE)
BODY_SCAN_OVERLAP = 96  # longer than any HEADER_INSIDE_BODY match: one split across two chunks is found
MAX_HEADER_LINE = 64 * 1024
HEADER_TAIL_KEPT = 256
MAX_BODY = 512 * 1024 * 1024  # an absurd length is ignored rather than buffered towards
READ_CHUNK = 1 << 16


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
