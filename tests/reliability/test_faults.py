"""Faults: the model raises or runs out of memory, CUDA is asked for but absent, the model cache is
corrupt or read-only, the client closes stdin or dies, SIGTERM, a frame too big to allocate (ignored). The
server either answers the affected request with a clear error and goes on serving, or ends (no
hang), with no process left in its group and nothing written to the cache."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from codespec.reliability import procinfo
from codespec.reliability.launch import FAULT_MARKERS
from codespec.reliability.rpc import (
    WAIT_S,
    StdioServer,
    did_open,
    document_text,
    inline_params,
    server_env,
    warm_up,
)

pytestmark = pytest.mark.skipif(not procinfo.available(), reason="needs Linux /proc for process checks")


def completion(server: StdioServer, uri: str, text: str, timeout: float = WAIT_S) -> dict:
    did_open(server, uri, text)
    line = text.count("\n")
    return server.call("textDocument/inlineCompletion", inline_params(uri, line, len(text.split("\n")[-1])), timeout)


def assert_serving(server: StdioServer, uri: str) -> None:
    response = completion(server, uri, "def total(items):\n    return ")
    assert "result" in response and response["result"]["items"], response


@pytest.mark.parametrize(
    ("fault", "kind", "words"),
    [
        ("raise", "model", "injected model failure"),
        ("oom", "out-of-memory", "CUDA out of memory"),
        ("memoryerror", "out-of-memory", "MemoryError"),
    ],
)
def test_a_failing_model_fails_that_request_only(shared, fault, kind, words):
    before = shared.result("codespec/stats", {})["errors"]
    response = completion(shared, f"file:///faults/{fault}.py", f"# {FAULT_MARKERS[fault]}\ndef f(x):\n    return ")
    error = response.get("error")
    assert error and error["code"] == -32603 and error["data"]["kind"] == kind, response
    assert words in error["message"], error
    assert shared.result("codespec/stats", {})["errors"] == before + 1
    assert_serving(shared, f"file:///faults/after-{fault}.py")  # the engine recovered (KV cache dropped)


def test_a_frame_too_big_to_allocate_is_ignored_and_the_server_goes_on():
    with StdioServer("--load", "lazy") as server:
        server.initialize()
        server.send_bytes(b"Content-Length: 1000000000000\r\n\r\n{}")
        server.send({"jsonrpc": "2.0", "id": "after-absurd", "method": "codespec/stats", "params": {}})
        assert "result" in server.wait_response("after-absurd")
        assert "ignored Content-Length 1000000000000" in server.stderr_text()  # said, not silently skipped
        # A length that could be allocated but is a lie: the next frame's header ends the wait at once.
        server.send_bytes(b"Content-Length: 300000000\r\n\r\n{")
        server.send({"jsonrpc": "2.0", "id": "after-lie", "method": "codespec/stats", "params": {}})
        assert "result" in server.wait_response("after-lie")
        assert server.shutdown_and_exit() == 0 and procinfo.group_members(server.pid) == []


def test_stdin_closed_ends_the_server_with_nothing_left():
    with StdioServer("--load", "lazy") as server:
        server.initialize()
        did_open(server, "file:///faults/eof.py", "x = 1\n")
        assert document_text(server, "file:///faults/eof.py")["text"] == "x = 1\n"  # settled
        started = time.perf_counter()
        server.proc.stdin.close()
        assert server.wait_exit(WAIT_S) == 1  # no shutdown came first
        print(f"stdin EOF -> exit: {time.perf_counter() - started:.3f}s")
        assert procinfo.group_members(server.pid) == []


def test_sigterm_during_a_generation_ends_the_process_group():
    with StdioServer("--step-delay", "0.2") as server:
        server.initialize({"maxTokens": 64, "earlyAnswer": False})
        warm_up(server)
        did_open(server, "file:///faults/term.py", "def add(a, b):\n    return ")
        msg_id = server.request("textDocument/inlineCompletion", inline_params("file:///faults/term.py", 1, 11))
        wait_for_pending(server)
        assert server.responses_for(msg_id) == []
        started = time.perf_counter()
        os.kill(server.pid, signal.SIGTERM)
        code = server.wait_exit(WAIT_S)
        print(f"SIGTERM -> exit: {time.perf_counter() - started:.3f}s (code {code})")
        assert code == 0 and "SIGTERM: exiting" in server.stderr_text(), server.stderr_tail()
        assert procinfo.group_members(server.pid) == []
        assert server.received.violations == []


def wait_for_pending(server: StdioServer) -> None:
    """Until the server reports a pending request (its generation runs on the model thread)."""
    deadline = time.monotonic() + WAIT_S
    while not server.result("codespec/stats", {})["pending"]:
        assert time.monotonic() < deadline, "the request never became pending"
        time.sleep(0.02)


CLIENT = """
import sys, time
from codespec.reliability.rpc import StdioServer, did_open, inline_params, warm_up
server = StdioServer("--step-delay", "0.2")
server.initialize({"maxTokens": 64, "earlyAnswer": False, "streaming": True})
warm_up(server)
did_open(server, "file:///faults/dead-client.py", "def add(a, b):\\n    return ")
server.request("textDocument/inlineCompletion", inline_params("file:///faults/dead-client.py", 1, 11))
while not server.result("codespec/stats", {})["pending"]:
    time.sleep(0.05)
print(server.pid, flush=True)
time.sleep(600)
"""


def test_a_dead_client_mid_generation_leaves_no_server_behind():
    client = subprocess.Popen([sys.executable, "-c", CLIENT], stdout=subprocess.PIPE, env=server_env(),
                              start_new_session=True)
    try:
        line = client.stdout.readline()
        assert line.strip().isdigit(), "the client did not start its server"
        server_pid = int(line)
        assert procinfo.alive(server_pid)
        started = time.perf_counter()
        os.killpg(client.pid, signal.SIGKILL)  # the client dies; the server has its own group
        client.wait(WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while procinfo.alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        print(f"client killed -> server gone: {time.perf_counter() - started:.3f}s")
        assert not procinfo.alive(server_pid)
        assert procinfo.group_members(server_pid) == []
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
            client.wait(WAIT_S)


# ----- device and cache -----------------------------------------------------------------------


def _corrupt_cache(root: Path) -> None:
    """qwen2.5-coder-0.5b: a complete-looking entry (valid marker, right sizes) with garbage
    files; qwen2.5-coder-1.5b: a half-written entry (no marker), which asks for a rebuild."""
    from codespec.models import BUNDLED, CACHE_FORMAT, MARKER_NAME

    corrupt = root / "qwen2.5-coder-0.5b"
    corrupt.mkdir(parents=True)
    files = {"config.json": b"{not json", "tokenizer.json": b"\x00" * 64, "model.safetensors": b"\xff" * 128}
    for name, data in files.items():
        (corrupt / name).write_bytes(data)
    marker = {"format": CACHE_FORMAT, "source_sha256": BUNDLED["qwen2.5-coder-0.5b"].sha256,
              "files": {name: {"size": len(data), "sha256": "0" * 64} for name, data in files.items()}}
    (corrupt / MARKER_NAME).write_text(json.dumps(marker))
    half = root / "qwen2.5-coder-1.5b"
    half.mkdir()
    (half / "config.json").write_text("{}")


def _read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    if os.geteuid() == 0 and shutil.which("chattr"):  # root ignores file modes, not the immutable flag
        subprocess.run(["chattr", "-R", "+i", str(root)], capture_output=True, timeout=WAIT_S)


def _writable_again(root: Path) -> None:
    if os.geteuid() == 0 and shutil.which("chattr"):
        subprocess.run(["chattr", "-R", "-i", str(root)], capture_output=True, timeout=WAIT_S)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755)


def _snapshot(root: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*"))


def _can_write(directory: Path) -> bool:
    try:
        (directory / "probe").write_text("x")
    except OSError:
        return False
    (directory / "probe").unlink()
    return True


@pytest.fixture
def read_only_cache():
    root = Path(tempfile.mkdtemp(prefix="codespec-cache-"))
    cache = root / "cache"
    _corrupt_cache(cache)
    _read_only(cache)
    yield cache
    _writable_again(cache)
    shutil.rmtree(root, ignore_errors=True)


def test_cuda_absent_and_a_corrupt_or_read_only_cache_are_clear_errors(read_only_cache):
    import torch

    cache = read_only_cache
    if _can_write(cache):
        pytest.skip("cannot make a read-only cache here (a write succeeded); a rebuild would convert 3 GB")
    before = _snapshot(cache)
    with StdioServer("--device", "cuda", "--load", "lazy", env={"CODESPEC_CACHE": str(cache)}) as server:
        server.initialize()
        if not torch.cuda.is_available():
            error = completion(server, "file:///faults/cuda.py", "x = ")["error"]
            print("cuda:", error["message"])
            assert error["code"] == -32603 and "CUDA is not available" in error["message"], error
            assert error["data"]["kind"] == "load", error
        configure(server, device="cpu", model="bundled:qwen2.5-coder-0.5b")
        error = completion(server, "file:///faults/corrupt.py", "y = ")["error"]
        assert error["code"] == -32603, error
        print("corrupt cache:", error["message"])
        assert "cannot load model" in error["message"] and "fetch --force" in error["message"], error
        configure(server, model="bundled:qwen2.5-coder-1.5b")
        error = completion(server, "file:///faults/read-only.py", "z = ")["error"]
        print("read-only cache:", error["message"])
        assert error["code"] == -32603 and error["data"]["kind"] == "load", error
        assert "is not writable" in error["message"] and "CODESPEC_CACHE" in error["message"], error
        configure(server, model="tiny")
        assert_serving(server, "file:///faults/recovered.py")
        assert server.shutdown_and_exit() == 0
    assert _snapshot(cache) == before  # nothing written, no temp directory left


def configure(server: StdioServer, **settings) -> None:
    server.notify("workspace/didChangeConfiguration", {"settings": {"codespec": settings}})
