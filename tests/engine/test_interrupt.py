"""A cancel stops the llama.cpp forward in flight (mainline, and ik_llama.cpp built with build-support's patch):
the worker is free at once, nothing of the stopped forward stays in the cache, and what follows is computed as if
cold. An ik_llama.cpp without the patch is never stopped part-way (its stop races: library_stops_forwards):
there the cancel is seen between forwards, and the same engine-level behaviour holds."""

from __future__ import annotations

import ctypes
import importlib
import random
import threading

import pytest
import torch

from codespec.decode.engine import CancelToken, Engine
from codespec.decode.runtimes import ForwardInterrupted
from codespec.decode.runtimes.llamacpp import _strlen
from codespec.tiny import tiny_tokenizer
from tests.tiny_gguf import write_tiny_gguf

RUNTIMES = [("codespec.decode.runtimes.llamacpp", "LlamaCppRuntime"),
            ("codespec.decode.runtimes.ik_llamacpp", "IkLlamaCppRuntime")]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-0.gguf", 0, merges=True)


@pytest.fixture(params=RUNTIMES, ids=["llamacpp", "ik-llamacpp"])
def runtime(request, tiny_gguf):
    module, cls = request.param
    if "ik" in module:
        pytest.importorskip("ik_llama_cpp")
    runtime = getattr(importlib.import_module(module), cls)(tiny_gguf, threads=1, context=256, slots=2)
    yield runtime
    runtime.close()


class Target:
    def __init__(self, runtime) -> None:
        self.model, self.tokenizer = runtime, tiny_tokenizer()


def test_the_native_abort_callback_reads_the_tokens_flag():
    # The callback llama.cpp calls between graph nodes, called as llama.cpp calls it (a C bool back).
    callback = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p)(_strlen())
    token = CancelToken()
    assert callback(ctypes.addressof(token.flag)) is False
    token.cancel()
    assert callback(ctypes.addressof(token.flag)) is True
    token.cancel()  # twice is once
    assert callback(ctypes.addressof(token.flag)) is True


def test_a_forward_under_a_cancelled_token_stops_and_keeps_nothing(runtime, monkeypatch, capfd):
    ids = list(range(20, 84))
    runtime.forward(ids[:30], logits=1)
    full = runtime.forward(ids[30:], logits=1)[0]  # the same split as below: the same sums, the same logits
    runtime.truncate(30)
    statuses = []
    if runtime.name == "llamacpp":  # mainline says it stopped part-way: llama_decode returns 2 (aborted)
        decode = runtime._lib.llama_decode
        monkeypatch.setattr(runtime._lib, "llama_decode", lambda *a: statuses.append(decode(*a)) or statuses[-1])
    token = CancelToken()
    token.cancel()
    runtime.interrupt_with(token)
    if not runtime.stops_forwards:  # an ik_llama.cpp without the patch: the forward runs whole, its result stands
        torch.testing.assert_close(runtime.forward(ids[30:], logits=1)[0], full)
        return
    with pytest.raises(ForwardInterrupted):
        runtime.forward(ids[30:], logits=1)
    assert runtime.cached == ids[:30]
    assert statuses == ([2] if runtime.name == "llamacpp" else [])
    assert "llama.cpp" not in capfd.readouterr().err  # the stop is no fault: the server's log stays quiet
    runtime.interrupt_with(None)
    again = runtime.forward(ids[30:], logits=1)[0]  # the stopped forward's cells are gone: as if never run
    assert torch.equal(again, full)
    runtime.interrupt_with(CancelToken())  # a token not cancelled stops nothing
    runtime.truncate(30)
    assert torch.equal(runtime.forward(ids[30:], logits=1)[0], full)


def cancel_at_call(runtime, token: CancelToken, call: int) -> list[int]:
    """Cancel `token` just before the runtime's forward number `call` (1-based) starts: that forward is the
    one in flight when the user types on."""
    forward, calls = runtime.forward, []

    def forward_then(tokens, logits):
        calls.append(len(tokens))
        if len(calls) == call:
            token.cancel()
        return forward(tokens, logits)

    runtime.forward = forward_then
    return calls


@pytest.mark.parametrize("drafting", ["none", "lookup"])
def test_a_prefill_chunk_in_flight_finishes_and_stays_cached(runtime, drafting):
    # A prefill chunk is the next keystroke's shared prefix: it is never stopped part-way (stopping it lost every
    # chunk to the next keystroke while the user typed), and the loop sees the cancel after it.
    prompt = list(b"def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef add(a, b):\n")
    engine = Engine(Target(runtime), drafting=drafting, stop_token_ids=[], prefill_chunk=16)
    token = CancelToken()
    calls = cancel_at_call(runtime, token, 2)
    result = engine.generate(prompt, max_new_tokens=12, cancel=token)
    del runtime.forward
    assert calls == [16, 16]
    assert result.finish_reason == "cancelled" and result.stats.interrupted == 0 and result.token_ids == []
    assert runtime.cached == prompt[:32] and result.stats.prefill_tokens == 32
    again = engine.generate(prompt, max_new_tokens=12)
    assert again.stats.reused_tokens == 32
    engine.reset_cache()
    assert again.token_ids == engine.generate(prompt, max_new_tokens=12).token_ids


@pytest.mark.parametrize("drafting", ["none", "lookup"])
def test_a_decode_step_in_flight_is_dropped_and_the_cache_holds_the_tokens_before_it(runtime, drafting):
    prompt = list(b"for i in range(10):\n    print(i)\nfor i in range(10):\n")
    engine = Engine(Target(runtime), drafting=drafting, stop_token_ids=[], prefill_chunk=64)
    cold = engine.generate(prompt, max_new_tokens=12)
    engine.reset_cache()
    token = CancelToken()
    cancel_at_call(runtime, token, 3)  # 1: the prefill chunk, 2: the first step, 3: the second step
    result = engine.generate(prompt, max_new_tokens=12, cancel=token)
    del runtime.forward
    stopped = runtime.stops_forwards  # else the step finishes, and the loop sees the cancel after it
    assert result.finish_reason == "cancelled" and result.stats.interrupted == int(stopped)
    assert result.token_ids == cold.token_ids[: len(result.token_ids)]
    assert result.stats.target_forwards == (1 if stopped else 2)
    assert runtime.cached == [*prompt, *result.token_ids][:-1]
    assert engine.generate(prompt, max_new_tokens=12).token_ids == cold.token_ids


def test_idle_prefill_finishes_its_chunk_under_a_cancel(runtime):
    prompt = list(range(30, 110))
    engine = Engine(Target(runtime), drafting="none", stop_token_ids=[])
    token = CancelToken()
    cancel_at_call(runtime, token, 3)
    assert engine.prefill(prompt, cancel=token, chunk=16) == 48
    del runtime.forward
    assert runtime.cached == prompt[:48]


def test_a_stopped_step_leaves_nothing_set_for_the_next_generation(runtime):
    prompt = list(b"for i in range(10):\n    print(i)\nfor i in range(10):\n")
    engine = Engine(Target(runtime), drafting="none", stop_token_ids=[])
    token = CancelToken()
    cancel_at_call(runtime, token, 2)
    assert engine.generate(prompt, max_new_tokens=8, cancel=token).stats.interrupted == int(runtime.stops_forwards)
    del runtime.forward
    runtime.forward(prompt[-1:], logits=1)  # the old token is cancelled, but no longer watched


@pytest.mark.parametrize("module, cls", RUNTIMES, ids=["llamacpp", "ik-llamacpp"])
def test_forwards_stopped_at_any_moment_by_two_threads_never_hang(module, cls, tiny_gguf):
    # Two compute threads must stop at the same graph node: ik_llama.cpp's stock loop let one leave the graph
    # while the other waited at a barrier forever (an unpatched build hung within ~200 of these on the 1.5B).
    # Cancels land at random moments of many forwards; all of them must come back, stopped or whole.
    if "ik" in module:
        pytest.importorskip("ik_llama_cpp")
    runtime = getattr(importlib.import_module(module), cls)(tiny_gguf, threads=2, context=256, slots=1)
    if not runtime.stops_forwards:
        runtime.close()
        pytest.skip("this build never stops a forward part-way (nothing can race)")
    ids = list(range(20, 84))
    runtime.forward(ids[:16], logits=1)
    full = runtime.forward(ids[16:48], logits=1)[0]
    runtime.truncate(16)
    outcomes: list[str] = []
    rng = random.Random(0)

    def run() -> None:
        for _ in range(1500):
            token = CancelToken()
            runtime.interrupt_with(token)
            timer = threading.Timer(rng.uniform(0, 0.002), token.cancel)
            timer.start()
            try:
                logits = runtime.forward(ids[16:48], logits=1)[0]
                outcomes.append("whole" if torch.equal(logits, full) else "wrong")
            except ForwardInterrupted:
                outcomes.append("stopped" if runtime.cached == ids[:16] else "kept")
            timer.join()
            runtime.truncate(16)
        runtime.interrupt_with(None)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=120)  # the patched build: ~3 s
    assert not worker.is_alive(), f"a forward never came back after {len(outcomes)} (a compute thread left the graph)"
    runtime.close()
    assert len(outcomes) == 1500 and set(outcomes) <= {"whole", "stopped"}
    assert outcomes.count("stopped") > 0  # the cancels did land inside forwards
