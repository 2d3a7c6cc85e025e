"""Several cached prompts (slots): a jump keeps the place it left, going back costs nothing, and every
reused KV state gives the tokens the same prompt gives computed cold, on both runtimes."""

from __future__ import annotations

import pytest
import torch

from codespec.decode.engine import CancelToken, Engine
from codespec.decode.runtimes import Runtime, distinct_tokens
from codespec.decode.runtimes.llamacpp import LlamaCppRuntime
from codespec.decode.runtimes.torch_runtime import TorchRuntime
from codespec.tiny import tiny_model, tiny_tokenizer
from tests.engine.conftest import reference_greedy
from tests.tiny_gguf import write_tiny_gguf

SHARED = list(range(10, 130))  # the pinned block: 120 tokens every place shares
PLACE_A = SHARED + [20 + (7 * i) % 200 for i in range(80)]  # two cursor windows of 80 tokens: more than
PLACE_B = SHARED + [21 + (11 * i) % 200 for i in range(80)]  # fork_min_tokens


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-0.gguf", 0, merges=True)


def runtimes(gguf, slots: int = 4) -> list[Runtime]:
    return [TorchRuntime(tiny_model(0), slots=slots), LlamaCppRuntime(gguf, threads=1, context=512, slots=slots)]


def fill(runtime: Runtime, tokens: list[int]) -> torch.Tensor:
    """sync + forward the rest, as the engine's prefill does; the last position's logits."""
    keep = runtime.sync(tokens[:-1])
    logits = None
    for start in range(keep, len(tokens), 32):
        logits = runtime.forward(tokens[start : start + 32], logits=1)
    if logits is None:
        logits = runtime.forward(tokens[-1:], logits=1)
    return logits[0]


def cold_logits(runtime_factory, tokens: list[int]) -> torch.Tensor:
    runtime = runtime_factory()
    return fill(runtime, tokens)


@pytest.mark.parametrize("kind", ["torch", "llamacpp"])
def test_a_jump_keeps_the_place_it_left_and_going_back_costs_nothing(kind, tiny_gguf):
    runtime = runtimes(tiny_gguf)[0 if kind == "torch" else 1]
    fill(runtime, PLACE_A)
    assert runtime.sync(PLACE_B[:-1]) == len(SHARED)  # only the window is computed at the new place
    fill(runtime, PLACE_B)
    assert len(runtime.slots) == 2 and sorted(len(s.tokens) for s in runtime.slots) == [len(PLACE_A), len(PLACE_B)]
    assert runtime.sync(PLACE_A[:-1]) == len(PLACE_A) - 1  # back: nothing to compute
    assert runtime.cached == PLACE_A[:-1]
    # Both places' KV give what the same prompt gives computed cold.
    factory = (lambda: TorchRuntime(tiny_model(0), slots=1)) if kind == "torch" else (
        lambda: LlamaCppRuntime(tiny_gguf, threads=1, context=512, slots=1))
    for place in (PLACE_A, PLACE_B):
        reused = fill(runtime, place)
        torch.testing.assert_close(reused, cold_logits(factory, place), atol=1e-3 if kind == "torch" else 2e-2,
                                   rtol=1e-3)
    # Shared prefixes count once in what the stats report.
    described = runtime.describe_slots()
    assert described["distinctTokens"] == len(PLACE_A) + len(PLACE_B) - len(SHARED)
    if kind == "llamacpp":
        assert described["bytes"] == described["distinctTokens"] * runtime.kv_bytes_per_token() > 0
        runtime.close()


@pytest.mark.parametrize("kind", ["torch", "llamacpp"])
def test_typing_in_place_continues_the_slot_and_the_oldest_place_goes_first(kind, tiny_gguf):
    runtime = runtimes(tiny_gguf, slots=2)[0 if kind == "torch" else 1]
    fill(runtime, PLACE_A)
    typed = PLACE_A[:-3] + [7, 8, 9, 10]  # the cursor line changed: a short divergent tail, same slot
    assert runtime.sync(typed) == len(PLACE_A) - 3 and len(runtime.slots) == 1
    fill(runtime, PLACE_B)
    place_c = SHARED + [22 + (13 * i) % 200 for i in range(80)]
    fill(runtime, place_c)  # a third place with two slots: the least recently used (A) is dropped
    assert len(runtime.slots) == 2
    assert runtime.cached_prefix(PLACE_A) == len(SHARED)
    assert runtime.cached_prefix(PLACE_B) == len(PLACE_B)
    runtime.reset()
    assert all(not slot.tokens for slot in runtime.slots) and runtime.cached_prefix(PLACE_B) == 0
    if kind == "llamacpp":
        runtime.close()


def test_a_full_kv_memory_drops_other_places_instead_of_failing(tiny_gguf):
    # 256 tokens of context, 2 x 256 cells: three places of ~200 distinct tokens do not fit together.
    runtime = LlamaCppRuntime(tiny_gguf, threads=1, context=256, slots=4)
    try:
        places = [[start + (k * i) % 200 for i in range(200)] for start, k in ((10, 3), (11, 7), (12, 9))]
        expected = []
        for place in places:
            expected.append(fill(runtime, place))
        assert runtime.cached == places[-1][:-1] + places[-1][-1:]
        assert sum(len(s.tokens) for s in runtime.slots) <= runtime.memory_tokens
        cold = LlamaCppRuntime(tiny_gguf, threads=1, context=256, slots=1)
        torch.testing.assert_close(expected[-1], fill(cold, places[-1]), atol=2e-2, rtol=1e-3)
        cold.close()
    finally:
        runtime.close()


def testdistinct_tokens_counts_shared_prefixes_once():
    assert distinct_tokens([[1, 2, 3], [1, 2, 4, 5], [9]]) == 3 + 2 + 1
    assert distinct_tokens([[], [1]]) == 1


def test_engine_output_after_jumps_equals_plain_greedy_cold(target):
    """Generations at two places, back and forth, with a prefill ahead of time: every output equals plain
    greedy by full recomputation (fp32 torch: exact)."""
    engine = Engine(target, drafting="lookup", stop_token_ids=[])
    tokenizer = tiny_tokenizer()
    block = tokenizer.encode("def area(r):\n    return 3.14 * r * r\n\n" * 6)
    place_a = block + tokenizer.encode("def perimeter(r):\n    return 2 * 3.14 * r\n\ndef volume(r):\n    ")
    place_b = block + tokenizer.encode("class Circle:\n    def __init__(self, r):\n        self.r = r\n    ")
    for prompt, reused_at_least in ((place_a, 0), (place_b, len(block)), (place_a, len(place_a) - 1)):
        result = engine.generate(prompt, max_new_tokens=12)
        assert result.stats.reused_tokens >= reused_at_least
        assert result.token_ids == reference_greedy(target.model, prompt, 12, set())
    # Prefilled in idle time, then asked: nothing left to compute, the same tokens.
    place_c = block + tokenizer.encode("def diameter(r):\n    return")
    before = engine.cached_prefix(place_c)
    assert before >= len(block)
    assert engine.prefill(place_c, chunk=8) == len(place_c) - 1 - before
    assert engine.cached_prefix(place_c) == len(place_c) - 1
    result = engine.generate(place_c, max_new_tokens=12)
    assert result.stats.reused_tokens == len(place_c) - 1  # only the last token, fed with the first step
    assert result.token_ids == reference_greedy(target.model, place_c, 12, set())


def test_a_cancelled_prefill_keeps_the_chunks_done(target):
    engine = Engine(target, drafting="none", stop_token_ids=[])
    prompt = list(range(5, 200))
    token = CancelToken()
    calls = []
    forward = engine.runtime.forward

    def counting(tokens, logits):
        calls.append(len(tokens))
        if len(calls) == 3:
            token.cancel()  # a request arrived during the third chunk
        return forward(tokens, logits)

    engine.runtime.forward = counting
    assert engine.prefill(prompt, cancel=token, chunk=16) == 48  # the chunk running when cancelled finishes
    assert calls == [16, 16, 16] and engine.cached_prefix(prompt) == 48
    engine.runtime.forward = forward
    result = engine.generate(prompt, max_new_tokens=8)
    assert result.stats.reused_tokens == 48
    assert result.token_ids == reference_greedy(target.model, prompt, 8, set())


def test_work_ahead_of_time_continues_its_own_slot_and_keeps_the_places():
    runtime = TorchRuntime(tiny_model(0), slots=4)
    fill(runtime, PLACE_A)  # a request's place
    for window in ([23 + (3 * i) % 200 for i in range(80)], [24 + (17 * i) % 200 for i in range(80)]):
        ahead = SHARED + window  # a new block's prompt, prefilled in idle time, then another one
        keep = runtime.sync(ahead, place=False)
        runtime.forward(ahead[keep:], logits=1)
    # The second prefill ahead continued the first one's slot: one slot for the place, one for the work.
    assert len(runtime.slots) == 2
    assert runtime.cached_prefix(PLACE_A) == len(PLACE_A)
    assert [slot.place for slot in runtime.slots] == [True, False]
    # A request there makes it a place, kept when the next prompt goes elsewhere.
    fill(runtime, ahead + [5])
    fill(runtime, PLACE_B)
    assert runtime.cached_prefix(ahead) == len(ahead) and runtime.cached_prefix(PLACE_A) == len(PLACE_A)
