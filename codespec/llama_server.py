"""Starts and drives llama.cpp's own `llama-server`, the comparison point of `codespec bench generate`.

A local llama.cpp `llama-server` started and driven for side-by-side comparisons (the comparison point of
`codespec bench generate`): the binary built by `make llama-server` from the llama.cpp source that the
llama-cpp-python sdist carries, serving the same GGUF codespec's llama.cpp runtime loads."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from codespec.errors import CodespecError

SERVER_ENV = "CODESPEC_LLAMA_SERVER"
DEFAULT_BINARY = Path(__file__).resolve().parents[1] / "build" / "llama.cpp" / "bin" / "llama-server"
# llama-server's speculative settings that the benchmark compares (its --spec-type names).
SPEC_TYPES = ("ngram-simple", "ngram-mod", "ngram-map-k")


def find_llama_server() -> Path:
    path = Path(os.environ.get(SERVER_ENV) or DEFAULT_BINARY)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise CodespecError(f"llama-server not found at {path}: build it with `make llama-server` (~12 min on "
                            f"2 cores) or set ${SERVER_ENV}")
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ServerCompletion:
    tokens: list[int]
    prompt_s: float  # llama-server's own timings: prefill and decode, without HTTP
    decode_s: float
    drafted: int = 0
    accepted: int = 0


class LlamaServer:
    """`with LlamaServer(gguf, threads=2) as server: server.complete(ids, 48)`; stopped on exit. `slots`:
    requests it runs at once (`--parallel`; the context is split between them)."""

    def __init__(self, gguf: Path, *, threads: int | None = None, context: int = 4096,
                 extra_args: Sequence[str] = (), startup_s: float = 120.0, slots: int = 1) -> None:
        self.binary = find_llama_server()
        self.gguf, self.threads, self.context = gguf, threads or os.cpu_count() or 1, context
        self.extra_args, self.startup_s, self.slots = list(extra_args), startup_s, slots
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        """The command line `__enter__` starts (reports show it)."""
        return [str(self.binary), "-m", str(self.gguf), "--host", "127.0.0.1", "--port", str(self.port),
                "-t", str(self.threads), "-tb", str(self.threads), "-c", str(self.context), "--parallel", str(self.slots),
                "--no-webui", *self.extra_args]

    def __enter__(self) -> LlamaServer:
        import httpx

        # Its log goes to a file, not a pipe: nobody reads a pipe while it serves, and a full one would stall it.
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=self.log)
        self.client = httpx.Client(base_url=self.url, timeout=httpx.Timeout(600.0, connect=5.0))
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.log.seek(0)
                error = self.log.read().decode(errors="replace")[-2000:]
                raise CodespecError(f"llama-server exited with {self.process.returncode}: {error.strip()}")
            try:
                if self.client.get("/health").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise CodespecError(f"llama-server did not become ready within {self.startup_s:.0f} s")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if getattr(self, "client", None) is not None:
            self.client.close()
        if getattr(self, "log", None) is not None:
            self.log.close()

    def complete(self, prompt_ids: Sequence[int], max_new_tokens: int, stop_ids: Sequence[int] = ()) -> ServerCompletion:
        """Greedy completion of a tokenized prompt, cold (no prompt cache), as plain greedy is measured."""
        body = {"prompt": list(prompt_ids), "n_predict": max_new_tokens, "temperature": 0.0, "top_k": 1,
                "samplers": ["top_k"], "cache_prompt": False, "return_tokens": True, "stream": False}
        response = self.client.post("/completion", json=body)
        if response.status_code != 200:
            raise CodespecError(f"llama-server answered {response.status_code}: {response.text[:300]}")
        data = response.json()
        tokens = [int(t) for t in data.get("tokens") or []]
        stops = set(stop_ids)
        for i, token in enumerate(tokens):  # its end-of-generation set and ours may differ: cut at ours
            if token in stops:
                tokens = tokens[:i]
                break
        timings = data.get("timings") or {}
        return ServerCompletion(tokens=tokens, prompt_s=float(timings.get("prompt_ms", 0.0)) / 1000,
                                decode_s=float(timings.get("predicted_ms", 0.0)) / 1000,
                                drafted=int(timings.get("draft_n", 0) or 0),
                                accepted=int(timings.get("draft_n_accepted", 0) or 0))
