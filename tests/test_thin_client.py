"""The thin client: `codespec serve --engine URL` completes without importing torch or transformers, and its
tokenizer (the `tokenizers` library, the bundled tokenizer shipped in the package) gives transformers' ids."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import pytest

from codespec import fim
from codespec.framing import FrameParser, frame
from tests.engine.test_remote import FakeEngine, sse_chunks

HEAVY = ("torch", "transformers")
URI = "file:///thin/add.py"
TEXT = "def add(a, b):\n    return \n"


def _message(method: str, params: dict, msg_id: int | None = None) -> bytes:
    body = {"jsonrpc": "2.0", "method": method, "params": params}
    if msg_id is not None:
        body["id"] = msg_id
    return frame(json.dumps(body).encode())


def _imported(importtime_log: str) -> set[str]:
    """Top-level module names from `python -X importtime`'s stderr lines ('import time: self | cum | name')."""
    names = set()
    for line in importtime_log.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def _read_until(process: subprocess.Popen, parser: FrameParser, msg_id: int, timeout_s: float = 60.0) -> dict:
    """Messages from the server's stdout until the response to `msg_id` (a bounded wait)."""
    deadline = time.monotonic() + timeout_s
    fd = process.stdout.fileno()  # type: ignore[union-attr]
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        assert chunk, "the server closed its stdout before answering"
        for body in parser.feed(chunk):
            message = json.loads(body)
            if message.get("id") == msg_id and "method" not in message:
                return message
    raise AssertionError(f"no response to request {msg_id} within {timeout_s} s")


def test_serve_engine_completes_without_torch_or_transformers(tmp_path):
    fake = FakeEngine()
    fake.script = sse_chunks(["a + b"])
    log = tmp_path / "stderr.log"  # a file, not a pipe: -X importtime writes more than a pipe holds unread
    process = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "codespec.cli", "serve", "--stdio", "--engine", fake.url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("wb"),
        env={**os.environ, "CODESPEC_CACHE": str(tmp_path)},
    )
    parser = FrameParser()
    try:
        send = process.stdin.write  # type: ignore[union-attr]
        send(_message("initialize", {"processId": None, "rootUri": None, "capabilities": {}}, 1))
        send(_message("initialized", {}))
        send(_message("textDocument/didOpen", {"textDocument": {"uri": URI, "languageId": "python", "version": 1,
                                                                "text": TEXT}}))
        send(_message("textDocument/inlineCompletion", {
            "textDocument": {"uri": URI}, "position": {"line": 1, "character": 11}, "context": {"triggerKind": 1}}, 2))
        process.stdin.flush()  # type: ignore[union-attr]
        answer = _read_until(process, parser, 2)
        send(_message("shutdown", None, 3))
        send(_message("exit", None))
        process.stdin.close()  # type: ignore[union-attr]
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        fake.close()
    stderr = log.read_text(errors="replace")
    assert process.returncode == 0, stderr[-2000:]
    assert [item["insertText"] for item in answer["result"]["items"]] == ["a + b"], answer
    assert fake.requests and fim.FIM_MIDDLE in fake.requests[0]["prompt"]  # the prompt was built here
    imported = _imported(stderr)
    assert "codespec" in imported and "lsp" in imported  # the log is what it should be: the server ran
    assert not imported & set(HEAVY), f"the thin client imported {sorted(imported & set(HEAVY))}"


def test_packaged_tokenizer_gives_the_bundled_gguf_tokenizers_ids(bundled_05b):
    from codespec.models.tokenizer import packaged_tokenizer

    ours, theirs = packaged_tokenizer(), bundled_05b.tokenizer
    assert ours.get_vocab() == theirs.get_vocab() and ours.eos_token_id == theirs.eos_token_id
    texts = [
        f"{fim.FIM_PREFIX}def f(x):\n    return x  # é ünïcode 中文{fim.FIM_SUFFIX}\n{fim.FIM_MIDDLE}",
        "    for i in range(10):\n\t\tprint(i)\r\n" + fim.ENDOFTEXT,
        open(__file__).read(),
    ]
    for text in texts:
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False)
        split = ours(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert split == theirs(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        ids = ours.encode(text)
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


@pytest.mark.parametrize("spec", ["tiny", "bundled:qwen2.5-coder-0.5b"])
def test_text_tokenizer_loads_without_torch(spec):
    code = ("import sys; from codespec.models.tokenizer import load_text_tokenizer; "
            f"t = load_text_tokenizer({spec!r}); assert t.encode('def f(): pass'); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
