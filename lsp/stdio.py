"""The server's stdin loop: LSP frames read in large chunks by one thread and dispatched to pygls.

pygls 2.1.1 reads stdin a line at a time, each line a hand-off to a worker thread and back; under
load those GIL hand-offs, not the model, capped the intake at ~70 requests/s. Its parser also takes
a header only when it fills a whole line, so after a lying `Content-Length` it reads no frame until
the client happens to send a line break. Here one thread reads stdin in large chunks and the event
loop splits them with `codespec.framing.FrameParser` (its docstring gives the rules)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
from typing import Any, BinaryIO

from codespec.framing import READ_CHUNK, FrameParser
from lsp.protocol import reading_stopped, start_reading

logger = logging.getLogger(__name__)

CHUNKS_IN_FLIGHT = 64  # back-pressure: the reader thread waits when the loop is this far behind


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
