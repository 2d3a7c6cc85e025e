"""The serving-engine client (`codespec serve --engine URL`): against llama.cpp's real llama-server (equality
with the local runtime, a cancel that frees the engine's slot, an outage and its recovery) and against a
scripted fake engine for the faults a real one will not produce on demand (garbage, a cut stream, a slow
engine, one that ignores cancellation, a model it does not serve)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from codespec.decode.engine import CancelToken, Engine
from codespec.decode.remote import UNAVAILABLE, EngineTimeouts, RemoteEngine
from codespec.engine_options import remote_engine
from codespec.errors import CodespecError
from codespec.llama_server import LlamaServer, free_port
from codespec.tiny import tiny_tokenizer
from tests.lsp.helpers import needs_llama_server
from tests.tiny_gguf import write_tiny_gguf

PROMPT = "<|fim_prefix|>def add(a, b):\n    return<|fim_suffix|>\n<|fim_middle|>"


def run(engine: RemoteEngine, prompt: str = PROMPT, **kwargs):
    """(the final result, the streamed text) of one request."""
    ids = engine.tokenizer.encode(prompt, add_special_tokens=False)
    events = list(engine.stream(ids, **kwargs))
    assert events[-1].done and all(not e.done for e in events[:-1])
    return events[-1].result, "".join(e.text for e in events)


# ----- a scripted fake engine ---------------------------------------------------------------------------


class FakeEngine:
    """An OpenAI-shaped engine whose `/v1/completions` behaviour a test scripts: `script(handler)` writes
    the response. `/v1/models` serves `models` (or `models_body` verbatim)."""

    def __init__(self) -> None:
        self.models = [{"id": "fake-coder", "owned_by": "vllm"}]
        self.models_body: bytes | None = None
        self.script: Callable[[BaseHTTPRequestHandler], None] = sse_chunks(["ok", " done"])
        self.requests: list[dict] = []
        self.aborted = threading.Event()  # a write to a closed client connection failed
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                body = fake.models_body or json.dumps({"object": "list", "data": fake.models}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                fake.requests.append(json.loads(self.rfile.read(length) or b"{}"))
                try:
                    fake.script(self)
                except (BrokenPipeError, ConnectionResetError):
                    fake.aborted.set()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_stream(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.close_connection = True


def event(text: str, finish: str | None = None) -> bytes:
    data = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    return f"data: {json.dumps(data)}\n\n".encode()


def sse_chunks(texts: list[str], *, finish: str = "stop", delay_s: float = 0.0, done: bool = True):
    def script(handler: BaseHTTPRequestHandler) -> None:
        start_stream(handler)
        for i, text in enumerate(texts):
            handler.wfile.write(event(text, finish if i == len(texts) - 1 else None))
            handler.wfile.flush()
            time.sleep(delay_s)
        if done:
            handler.wfile.write(b"data: [DONE]\n\n")
    return script


@pytest.fixture
def fake():
    engine = FakeEngine()
    yield engine
    engine.close()


def client_of(fake: FakeEngine, **kwargs) -> RemoteEngine:
    return RemoteEngine(fake.url, tokenizer=tiny_tokenizer(), stop_strings=["<|endoftext|>"], **kwargs)


def test_openai_stream_is_sent_as_a_fim_prompt_and_streamed(fake):
    engine = client_of(fake)
    result, streamed = run(engine, max_new_tokens=7)
    assert (result.text, streamed, result.finish_reason) == ("ok done", "ok done", "eos")
    (body,) = fake.requests
    assert body["prompt"] == PROMPT  # the markers travel in the prompt text: vLLM refuses a `suffix` field
    assert (body["model"], body["max_tokens"], body["temperature"], body["stream"]) == ("fake-coder", 7, 0.0, True)
    assert body["stop"] == ["<|endoftext|>"] and "suffix" not in body
    assert engine.kind == "openai" and not engine.send_token_ids


def test_stop_rule_and_max_tokens_finish(fake):
    engine = client_of(fake)
    fake.script = sse_chunks(["a\n", "b\n", "c\n"], finish="length")
    result, streamed = run(engine, stop=lambda text: text.find("b") if "b" in text else None)
    assert (result.text, result.finish_reason) == ("a\n", "stop")
    result, _ = run(engine)
    assert (result.text, result.finish_reason) == ("a\nb\nc\n", "max_tokens")


def test_api_key_from_the_environment(fake, monkeypatch):
    seen = []
    monkeypatch.setenv("CODESPEC_ENGINE_API_KEY", "sk-test")

    def script(handler):
        seen.append(handler.headers.get("Authorization"))
        sse_chunks(["x"])(handler)

    fake.script = script
    run(client_of(fake))
    assert seen == ["Bearer sk-test"]


FAULTS = {
    "not JSON": (lambda h: (start_stream(h), h.wfile.write(b"data: <html>oops</html>\n\n")), "garbage"),
    "cut mid-stream": (sse_chunks(["par", "tial"], done=False, finish=None), "mid-stream"),
    "error status": (lambda h: (h.send_response(500), h.send_header("Content-Length", "4"), h.end_headers(),
                                h.wfile.write(b"boom")), "http-500"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_faults_answer_nothing_log_once_and_recover(fake, fault, caplog, monkeypatch):
    monkeypatch.setattr("codespec.decode.remote._BACKOFF_S", (0.0,))
    script, condition = FAULTS[fault]
    engine = client_of(fake)
    fake.script = script
    caplog.set_level(logging.WARNING, logger="codespec.decode.remote")
    for _ in range(3):
        result, _ = run(engine)
        assert result.finish_reason == UNAVAILABLE
    assert condition in engine._conditions
    trouble = [r for r in caplog.records if "until it recovers" in r.getMessage()]
    assert len(trouble) == 1, [r.getMessage() for r in caplog.records]  # one line per condition, not per request
    fake.script = sse_chunks(["fine"])
    result, _ = run(engine)
    assert (result.text, result.finish_reason) == ("fine", "eos")
    assert engine.health()["trouble"] == []
    assert [r.getMessage() for r in caplog.records][-1].endswith("answers again")


def test_slow_engine_times_out_without_hanging(fake):
    fake.script = sse_chunks(["late"], delay_s=0.0)
    slow = fake.script

    def script(handler):
        time.sleep(1.0)
        slow(handler)

    fake.script = script
    engine = client_of(fake, timeouts=EngineTimeouts(connect_s=1.0, read_s=0.2))
    started = time.perf_counter()
    result, _ = run(engine)
    assert result.finish_reason == UNAVAILABLE and time.perf_counter() - started < 0.9
    assert "slow" in engine._conditions


def test_engine_that_ignores_cancellation_is_cut_off(fake):
    """The engine keeps streaming whatever happens; a cancel closes our side at once."""
    fake.script = sse_chunks(["x"] * 400, delay_s=0.01, finish="length")
    engine = client_of(fake)
    cancel = CancelToken()
    ids = engine.tokenizer.encode(PROMPT, add_special_tokens=False)
    events = engine.stream(ids, cancel=cancel)
    next(events)
    cancel.cancel()
    started = time.perf_counter()
    rest = list(events)
    assert rest[-1].result.finish_reason == "cancelled" and time.perf_counter() - started < 0.5
    assert fake.aborted.wait(2.0)  # the engine's next write found the connection closed


def test_model_the_engine_does_not_serve_and_a_non_openai_engine(fake):
    result, _ = run(client_of(fake, model="other-model"))
    assert result.finish_reason == UNAVAILABLE
    fake.models_body = b"<html>not an engine</html>"
    engine = client_of(fake)
    assert not engine.probe() and "garbage" in engine._conditions
    assert "not OpenAI-compatible" in engine.health()["trouble"][0]


def test_unreachable_engine_answers_at_once():
    engine = RemoteEngine(f"http://127.0.0.1:{free_port()}", tokenizer=tiny_tokenizer())
    started = time.perf_counter()
    result, _ = run(engine)
    assert result.finish_reason == UNAVAILABLE and "unreachable" in engine._conditions
    result, _ = run(engine)  # backing off: no new connection attempt
    assert result.finish_reason == UNAVAILABLE and time.perf_counter() - started < 2.0
    with pytest.raises(CodespecError, match="http"):
        RemoteEngine("gpu-box:8000", tokenizer=tiny_tokenizer())


# ----- the real llama-server ----------------------------------------------------------------------------


def busy_slots(url: str) -> int:
    return sum(bool(slot["is_processing"]) for slot in httpx.get(f"{url}/slots").json())


COUNTING = "<|fim_prefix|>numbers = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,<|fim_suffix|>\n<|fim_middle|>"


@pytest.fixture(scope="module")
def qwen_engine_server(bundled_05b):
    """llama-server serving the bundled 0.5B GGUF (the tiny model ends its answers too soon to cancel one)."""
    needs_llama_server()
    from codespec.models import ensure_bundled_gguf

    with LlamaServer(ensure_bundled_gguf("qwen2.5-coder-0.5b", progress=False), threads=2) as server:
        yield server


def test_llama_server_cancel_frees_its_slot(qwen_engine_server):
    url = qwen_engine_server.url
    engine = remote_engine(url, "bundled:qwen2.5-coder-0.5b")
    assert engine.kind == "llama-server"
    cancel = CancelToken()
    ids = engine.tokenizer.encode(COUNTING, add_special_tokens=False)
    events = engine.stream(ids, max_new_tokens=1000, cancel=cancel)
    assert next(events).text
    assert busy_slots(url) == 1
    cancel.cancel()
    assert list(events)[-1].result.finish_reason == "cancelled"
    deadline = time.monotonic() + 2.0
    while busy_slots(url) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert busy_slots(url) == 0
    result, _ = run(engine, COUNTING, max_new_tokens=5)  # the engine serves the next request normally
    assert result.finish_reason == "max_tokens" and result.text.startswith(" 13")


def test_llama_server_outage_and_recovery(tmp_path, caplog, monkeypatch):
    needs_llama_server()
    monkeypatch.setattr("codespec.decode.remote._BACKOFF_S", (0.0,))
    caplog.set_level(logging.WARNING, logger="codespec.decode.remote")
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", merges=True)
    first = LlamaServer(gguf, threads=1)
    with first:
        engine = remote_engine(first.url, "tiny")
        assert run(engine, max_new_tokens=4)[0].finish_reason in ("max_tokens", "eos")
    for _ in range(3):  # down: nothing, at once, and one log line
        assert run(engine, max_new_tokens=4)[0].finish_reason == UNAVAILABLE
    assert len([r for r in caplog.records if "until it recovers" in r.getMessage()]) == 1
    again = LlamaServer(gguf, threads=1)
    again.port, again.url = first.port, first.url  # back at the same address
    with again:
        assert run(engine, max_new_tokens=4)[0].finish_reason in ("max_tokens", "eos")
    assert caplog.records[-1].getMessage().endswith("answers again")


def test_llama_server_output_equals_the_local_runtime(qwen_engine_server):
    """The same GGUF on the same llama.cpp source, greedy, no drafting: the same tokens, sent and received
    as token ids (our tokenizer and the engine's agree on the Qwen vocabulary)."""
    from codespec.models import load_model

    local = Engine(load_model("bundled:qwen2.5-coder-0.5b", runtime="llamacpp", threads=2), drafting="none")
    prompts = [PROMPT, "<|fim_prefix|>import os\n\n\ndef list_python_files(root):\n    <|fim_suffix|>\n<|fim_middle|>"]
    engine = remote_engine(qwen_engine_server.url, "bundled:qwen2.5-coder-0.5b")
    assert engine.kind == "llama-server" and engine.send_token_ids
    for prompt in prompts:
        ids = engine.tokenizer.encode(prompt, add_special_tokens=False)
        expected = local.generate(ids, max_new_tokens=24)
        result, streamed = run(engine, prompt, max_new_tokens=24)
        assert result.token_ids == expected.token_ids and result.text == expected.text == streamed
