"""A test-only launcher that runs `codespec` in-process, optionally with model faults and an audit log.

Usage: `python -m codespec.reliability.launch [--faults] [--audit FILE] -- ARGS`
runs `codespec ARGS` in this process, optionally with injected model faults and an audit log.

Faults are injected from outside the server, at the engine's `stream` (the model path the server
calls), so the server code is the shipped code: a generation whose prompt contains a marker fails
after its first step, like a model that raises or runs out of memory mid-generation.

The audit log uses CPython audit hooks (PEP 578): one JSON line per file open, socket operation
and process start, so tests can prove what the server did not do (read a file named by a URI,
open a network socket, run a command)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

FAULT_MARKERS = {
    "raise": "codespec_fault_raise",  # RuntimeError from the model
    "oom": "codespec_fault_oom",  # torch.OutOfMemoryError (what CUDA raises)
    "memoryerror": "codespec_fault_memoryerror",  # Python MemoryError (host RAM)
}
AUDITED_PREFIXES = ("open", "socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                    "os.fork", "pty.spawn", "os.startfile", "ctypes.dlopen", "urllib.Request", "http.client.")


def install_faults() -> None:
    from codespec.decode.engine import Engine

    original = Engine.stream

    def stream(self: Any, prompt_ids: Any, *args: Any, **kwargs: Any):
        prompt = self.tokenizer_decode(list(prompt_ids))
        fault = next((kind for kind, marker in FAULT_MARKERS.items() if marker in prompt), None)
        steps = 0
        for event in original(self, prompt_ids, *args, **kwargs):
            if fault is not None and steps >= 1:
                raise_fault(fault)
            steps += 1
            yield event
        if fault is not None:
            raise_fault(fault)

    Engine.stream = stream


def raise_fault(kind: str) -> None:
    if kind == "oom":
        import torch

        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected by the test launcher)")
    if kind == "memoryerror":
        raise MemoryError("injected by the test launcher")
    raise RuntimeError("injected model failure (test launcher)")


def install_audit(path: str) -> None:
    log = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    lock = threading.Lock()
    started = time.time()

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if not event.startswith(AUDITED_PREFIXES):
            return
        record = {"t": round(time.time() - started, 4), "event": event, "args": [_plain(a) for a in args]}
        with lock:
            log.write(json.dumps(record) + "\n")

    sys.addaudithook(hook)


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value][:8]
    return type(value).__name__  # sockets and other objects: their kind only


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(prog="python -m codespec.reliability.launch")
    parser.add_argument("--faults", action="store_true", help="fail generations whose prompt has a fault marker")
    parser.add_argument("--audit", metavar="FILE", help="append an audit log (opens, sockets, processes)")
    args = parser.parse_args(argv[:split])
    if args.audit:
        install_audit(args.audit)
    if args.faults:
        install_faults()
    from codespec.cli import main as codespec_main

    return codespec_main(argv[split + 1 :])


if __name__ == "__main__":
    sys.exit(main())
