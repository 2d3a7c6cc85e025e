"""The llama.vim column of `bench replay`: the /infill bodies built from a document state, llama.vim's
cache and render decisions, one FIM in flight at a time with stale answers kept off screen, and records
that give the pause figures, on a fake llama-server (stdlib http.server on 127.0.0.1)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from codespec.benchmarks.replay import ANCHOR, bench_replay_async
from codespec.sessions.format import (
    DID_CHANGE,
    DID_CLOSE,
    DID_OPEN,
    INLINE_COMPLETION,
    Event,
    Session,
    make_header,
)
from codespec.sessions.llama_vim import (
    RESPONSE_FIELDS,
    LlamaVimConfig,
    LlamaVimReplay,
    ResponseCache,
    RingBuffer,
    cached_completion,
    context_keys,
    infill_request,
    local_context,
    render,
    vim_lines,
)
from codespec.sessions.metrics import summarize
from codespec.sessions.replay import ReplayResult
from tests.sessions.conftest import fake_server

URI = "file:///work/demo.py"
TARGET = "return x + 1"


class FakeLlamaServer:
    """/health and /infill on 127.0.0.1: `answer(body)` is the content, after `delay` seconds. Notes every
    body and the most /infill requests it held at once. Stops on exit (daemon threads, a bounded wait)."""

    def __init__(self, answer: Callable[[dict[str, Any]], str], delay: float = 0.0) -> None:
        self.answer, self.delay = answer, delay
        self.bodies: list[dict[str, Any]] = []
        self.active = self.most_active = 0
        self.busy_polls, self.slot_polls = 0, 0  # /slots says busy for busy_polls polls after the last /infill
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10  # a stuck client cannot hold a handler thread for longer

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, data: dict[str, Any]) -> None:
                payload = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                if self.path == "/slots":  # busy for `busy_polls` polls after each /infill (the play's settle)
                    with owner.lock:
                        owner.slot_polls += 1
                        busy = owner.active > 0 or owner.slot_polls <= owner.busy_polls
                    payload = json.dumps([{"id": 0, "is_processing": busy}]).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self._send(200 if self.path == "/health" else 404, {"status": "ok"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with owner.lock:
                    owner.slot_polls = 0
                    owner.bodies.append(body)
                    owner.active += 1
                    owner.most_active = max(owner.most_active, owner.active)
                try:
                    time.sleep(owner.delay if body.get("n_predict") else 0.0)
                    content = owner.answer(body) if body.get("n_predict") else ""
                    self._send(200, {"content": content, "timings/prompt_n": 7, "tokens_cached": 3})
                finally:
                    with owner.lock:
                        owner.active -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeLlamaServer:
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def fims(self) -> list[dict[str, Any]]:
        return [b for b in self.bodies if b.get("n_predict")]


def rest_of_target(body: dict[str, Any]) -> str:
    """A model that always means TARGET on the cursor line: the part of it not typed yet."""
    typed = body["prompt"].strip()
    if not TARGET.startswith(typed):
        return ""
    return ("    " if not body["prompt"] else "") + TARGET[len(typed) :]


def typed_session(gaps: list[float], close_after: float = 1.0) -> Session:
    """`def f(x):` then an indented blank line on which TARGET is typed, one character per gap (seconds
    before that keystroke), each keystroke followed by an inline request with its expect."""
    text = "import os\n\ndef f(x):\n    \n\nprint(f(1))\n"
    events = [Event(0.0, DID_OPEN, {"textDocument": {"uri": URI, "languageId": "python", "version": 1,
                                                      "text": text}})]  # fmt: skip
    t = 0.0
    for i, char in enumerate(TARGET[: len(gaps)]):
        t += gaps[i]
        col = 4 + i
        change = {"range": {"start": {"line": 3, "character": col}, "end": {"line": 3, "character": col}},
                  "text": char}  # fmt: skip
        events.append(Event(t, DID_CHANGE, {"textDocument": {"uri": URI, "version": i + 2},
                                            "contentChanges": [change]}))  # fmt: skip
        params = {"textDocument": {"uri": URI}, "position": {"line": 3, "character": col + 1},
                  "context": {"triggerKind": 2}}  # fmt: skip
        events.append(
            Event(t, INLINE_COMPLETION, params, expect={"line_rest": TARGET[i + 1 :], "next_lines": ""})
        )
    events.append(Event(t + close_after, DID_CLOSE, {"textDocument": {"uri": URI}}))
    return Session(make_header("typed", "python"), events)


LINES = ["import os", "", "def f(x):", "    return x", "", "print(f(1))"]


def test_the_infill_body_splits_the_cursor_line_as_llama_vim_does():
    config = LlamaVimConfig()
    ctx = local_context(LINES, 11, 4, config)  # after "    return "
    body = infill_request(ctx, [{"text": "a\n", "time": [1, 0], "filename": "b.py"}], config, 250)
    assert body == {
        "id_slot": 0,
        "input_prefix": "import os\n\ndef f(x):\n",
        "input_suffix": "x\n\nprint(f(1))\n",
        "input_extra": [{"text": "a\n", "time": [1, 0], "filename": "b.py"}],
        "prompt": "    return ",
        "n_predict": 128,
        "stop": [],
        "n_indent": 4,
        "top_k": 40,
        "top_p": 0.90,
        "samplers": ["top_k", "top_p", "infill"],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 250,
        "response_fields": RESPONSE_FIELDS,
    }
    # a whitespace-only line: nothing of it in the prompt, no indent floor; n_prefix/n_suffix bound the lines
    short = LlamaVimConfig(n_prefix=1, n_suffix=1)
    blank = local_context(["a", "b", "    ", "c", "d"], 4, 3, short)
    assert (blank.prefix, blank.middle, blank.suffix, blank.indent) == ("b\n", "", "\nc\n", 0)
    # the first line has no line above: llama.vim still sends one line break
    assert local_context(["x = 1"], 0, 1, config).prefix == "\n"
    # as if a shown completion were accepted (the speculative follow-up)
    spec = local_context(LINES, 11, 4, config, prev=["x + 1"], indent_last=4)
    assert (spec.middle, spec.prefix, spec.indent) == ("    return xx + 1", "import os\n\ndef f(x):\n", 4)
    assert vim_lines("a\nb\n") == ["a", "b"] and vim_lines("") == [""]


def test_the_cache_serves_typing_along_and_render_drops_repeats():
    config = LlamaVimConfig()
    cache = ResponseCache(config.max_cache_keys)
    before = local_context(["def f(x):", "    re"], 6, 2, config)
    for key in context_keys(before):
        cache.insert(key, "turn x\n")
    after = local_context(["def f(x):", "    ret"], 7, 2, config)  # typed the completion's first character
    assert cached_completion(cache, after) == "urn x\n"
    assert cached_completion(cache, local_context(["def f(x):", "    rex"], 7, 2, config)) is None
    hint = render("urn x\n\n", ["def f(x):", "    ret"], 7, 2)
    assert (hint.shown, hint.can_accept, hint.content) == ("urn x", True, ["urn x"])
    # a suggestion that only repeats the rest of the line, or the next line, shows nothing
    assert render(")", ["f(x)"], 3, 1).shown == ""
    assert not render("\n\n", ["f(x)"], 4, 1).can_accept
    assert render("y = 2", ["x = 1", "", "y = 2"], 0, 2).shown == ""
    # a blank line: the suggestion's own indentation stands for the line's
    assert render("    return x", ["def f(x):", "    "], 4, 2).shown == "return x"


def test_the_ring_buffer_queues_chunks_and_evicts_near_copies():
    import random

    ring = RingBuffer(LlamaVimConfig(), random.Random(0))
    ring.pick(["a = 1", "b = 2", "c = 3"], "one.py", 1.5, do_evict=True)
    ring.pick(["a = 1", "b = 2", "c = 3"], "one.py", 2.0, do_evict=True)  # the same chunk again: ignored
    ring.pick(["x"], "two.py", 2.0, do_evict=True)  # too small
    assert len(ring.queued) == 1 and ring.update() and not ring.update()
    assert ring.extra() == [{"text": "a = 1\nb = 2\nc = 3\n", "time": [1, 500000], "filename": "one.py"}]


async def test_one_fim_at_a_time_and_stale_answers_stay_off_screen():
    """Keystrokes every 50 ms against a server that takes 400 ms: llama.vim never sends a second FIM
    while one runs (it retries 100 ms later with the newest text), so most cursor states are superseded;
    the first answer, for a state long gone, is never shown on a later one."""
    answers = {"n": 0}

    def answer(body: dict[str, Any]) -> str:
        answers["n"] += 1
        return "WRONG" if answers["n"] == 1 else rest_of_target(body)

    session = typed_session([0.3] + [0.05] * 7, close_after=0.2)
    with FakeLlamaServer(answer, delay=0.4) as server:
        result = ReplayResult(server=["fake"], speed=1.0)
        async with LlamaVimReplay(server.url, result, speed=1.0) as replay:
            await replay.play(session)
    fims = server.fims()
    assert server.most_active == 1
    assert len(fims) < 8  # fewer requests than keystrokes
    # the retry took the newest line, several keystrokes on
    assert fims[0]["prompt"] == "    r" and len(fims[1]["prompt"].strip()) > 2
    assert not any(r.shown == "WRONG" or (r.shown or "").endswith("WRONG") for r in result.records)
    assert sum(r.outcome == "cancelled" for r in result.records) >= 1
    assert result.keystrokes["llama-vim"] == 8 and len(result.records) == 8


async def test_records_give_the_pause_figures_and_the_bench_column():
    """At max speed every FIM is answered before the next keystroke: the pause after "ret" shows the rest
    of the line, which is what the user typed next."""
    session = typed_session([0.2, 0.2, 0.2, 1.5, 0.2])
    with FakeLlamaServer(rest_of_target) as server:
        server.busy_polls = 4  # work left in llama-server after the play: the play ends only once it is done
        result = ReplayResult(server=["fake"], speed=None)
        async with LlamaVimReplay(server.url, result, speed=None) as replay:
            await replay.play(session)
            assert server.slot_polls >= 5 and result.settle_s >= 0.15  # 4 busy polls 50 ms apart, then idle
        assert server.fims()[0]["prompt"] == "    r" and server.fims()[0]["n_indent"] == 4
        assert all(b["cache_prompt"] and b["id_slot"] == 0 for b in server.bodies)
    summary = summarize(result, "llama-vim")
    pauses = summary["pauses"]
    assert pauses["count"] >= 1 and pauses["covered"] == pauses["count"]
    assert pauses["accepted_at_pause"] == pauses["count"]
    assert summary["items"] >= 1 and summary["chars_saved"] > 0
    assert summary["server_stats"]["fim_requests"] >= 1
    first = result.records[0]
    assert first.shown == TARGET[1:] and first.accepted is True and first.keystroke_s is not None

    # the same session as the anchor column of bench replay, beside a fake LSP server
    made: list[FakeLlamaServer] = []

    def make() -> FakeLlamaServer:  # entered and stopped by the bench, as it does a LlamaServer
        made.append(FakeLlamaServer(rest_of_target))
        return made[-1]

    report = await bench_replay_async([session], fake_server(), None, cold=False, speed=None, llama_vim=make)
    assert len(made) == 1 and made[0].fims()
    assert list(report["variants"]) == ["speculative", ANCHOR]
    assert report["variants"][ANCHOR]["pauses"]["covered"] >= 1
    assert f"speculative/{ANCHOR} coverage" in report["ratios"]
