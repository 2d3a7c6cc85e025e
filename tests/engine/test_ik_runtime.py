"""The ik_llama.cpp runtime (the same loop over the fork's C API): logits equal torch's on the same weights,
rollback equals recompute, slots share a copied prefix, and speculative output equals its plain greedy."""

from __future__ import annotations

import pytest
import torch

from codespec.decode.engine import Engine
from codespec.tiny import tiny_model, tiny_tokenizer
from tests.engine.conftest import reference_greedy
from tests.tiny_gguf import write_tiny_gguf

ik = pytest.importorskip("codespec.decode.runtimes.ik_llamacpp")
if not ik.ik_available():
    pytest.skip("ik-llama-cpp-python is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-0.gguf", 0, merges=True)


@pytest.fixture
def runtime(tiny_gguf):
    runtime = ik.IkLlamaCppRuntime(tiny_gguf, threads=1, context=256, slots=4)
    yield runtime
    runtime.close()


def test_logits_match_torch_on_the_same_weights(runtime):
    ids = list(range(10, 60))
    logits = runtime.forward(ids, logits=6)
    with torch.inference_mode():
        reference = tiny_model(0)(input_ids=torch.tensor([ids])).logits[0, -6:]
    assert logits.shape == (6, runtime.vocab_size)
    torch.testing.assert_close(logits, reference, atol=2e-2, rtol=1e-3)


def test_rollback_equals_recompute(runtime):
    ids = list(range(20, 70))
    full = runtime.forward(ids, logits=1)[0]
    runtime.truncate(30)
    assert runtime.cached == ids[:30]
    torch.testing.assert_close(runtime.forward(ids[30:], logits=1)[0], full, atol=1e-4, rtol=1e-4)


def test_a_slot_copied_from_another_gives_the_cold_logits(runtime):
    shared = list(range(30, 90))
    a, b = shared + [5, 6, 7] * 10, shared + [9, 8] * 15
    runtime.sync(a)
    runtime.forward(a, logits=1)
    assert runtime.sync(b) == len(shared)  # a different place: the shared prefix is copied into a spare slot
    warm = runtime.forward(b[len(shared):], logits=1)[0]
    runtime.reset()
    cold = runtime.forward(b, logits=1)[0]
    torch.testing.assert_close(warm, cold, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("drafting", ["none", "lookup"])
def test_output_is_torch_greedy_on_a_repetitive_prompt(runtime, drafting):
    prompt = tiny_tokenizer().encode("x = [1, 2, 3]\ny = [1, 2, 3]\nz = [1, 2, 3]\n")
    engine = Engine(runtime, None, drafting=drafting, stop_token_ids=[])
    result = engine.generate(prompt, max_new_tokens=24)
    assert result.token_ids == reference_greedy(tiny_model(0), prompt, 24, set())
