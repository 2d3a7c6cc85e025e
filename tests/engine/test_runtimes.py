"""The runtimes under the decode loop: llama.cpp against torch on the same weights, rollback, the near-tie
rule for speculative output, inputs that must not reach native code, fallback, cost-aware draft lengths."""

from __future__ import annotations

import pytest
import torch

from codespec.decode.drafters import CostAwareLength
from codespec.decode.engine import CancelToken, Engine
from codespec.decode.runtimes import (
    CALIBRATION_KS,
    NEAR_TIE_LOGITS,
    CostCurve,
    Runtime,
    cached_cost_curve,
    first_divergence,
    top2_gap,
)
from codespec.decode.runtimes.llamacpp import LlamaCppRuntime
from codespec.errors import CodespecError
from codespec.tiny import tiny_model, tiny_tokenizer
from tests.engine.conftest import reference_greedy
from tests.tiny_gguf import write_tiny_gguf


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-0.gguf", 0, merges=True)


@pytest.fixture
def runtime(tiny_gguf):
    runtime = LlamaCppRuntime(tiny_gguf, threads=1, context=256)
    yield runtime
    runtime.close()


class Target:
    """A LoadedModel-like pair: the llama.cpp runtime and the tiny tokenizer."""

    def __init__(self, runtime: Runtime) -> None:
        self.model, self.tokenizer = runtime, tiny_tokenizer()


def test_llamacpp_logits_match_torch_on_the_same_weights(runtime):
    ids = list(range(10, 60))
    logits = runtime.forward(ids, logits=6)
    with torch.inference_mode():
        reference = tiny_model(0)(input_ids=torch.tensor([ids])).logits[0, -6:]
    assert logits.shape == (6, runtime.vocab_size) and logits.dtype == torch.float32
    torch.testing.assert_close(logits, reference, atol=2e-2, rtol=1e-3)
    assert runtime.cached == ids


def test_llamacpp_rollback_equals_recompute(runtime):
    ids = list(range(20, 70))
    full = runtime.forward(ids, logits=1)[0]
    runtime.truncate(30)
    assert runtime.cached == ids[:30]
    again = runtime.forward(ids[30:], logits=1)[0]
    torch.testing.assert_close(again, full, atol=1e-4, rtol=1e-4)
    runtime.truncate(0)  # rollback to nothing
    assert runtime.cached == []
    torch.testing.assert_close(runtime.forward(ids, logits=1)[0], full, atol=1e-4, rtol=1e-4)
    assert runtime.sync(ids[:40] + [5, 6]) == 40 and runtime.cached == ids[:40]


def test_inputs_that_would_abort_native_code_raise_python_errors(runtime):
    with pytest.raises(CodespecError, match="no tokens"):
        runtime.forward([], logits=1)
    with pytest.raises(CodespecError, match="vocabulary"):
        runtime.forward([runtime.vocab_size + 5], logits=1)
    with pytest.raises(CodespecError, match="logits for"):
        runtime.forward([1, 2], logits=3)
    runtime.forward(list(range(1, 250)), logits=1)
    with pytest.raises(CodespecError, match="exceed the llama.cpp context"):
        runtime.forward(list(range(1, 20)), logits=1)  # past the context of 256
    assert len(runtime.cached) == 249  # a refused forward leaves the cache as it was
    runtime.forward([7] * 7, logits=1)  # up to the last position still works
    assert len(runtime.cached) == 256


def test_engine_refuses_a_prompt_past_the_context_before_native_code(runtime):
    engine = Engine(Target(runtime), drafting="lookup", stop_token_ids=[])
    with pytest.raises(CodespecError, match="context window"):
        engine.generate(list(range(1, 250)), max_new_tokens=16)
    assert engine.generate(list(range(1, 200)), max_new_tokens=16).token_ids  # the engine still works


def test_a_file_llamacpp_cannot_read_is_a_clear_error(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(CodespecError, match="cannot read broken.gguf"):
        LlamaCppRuntime(bad)
    with pytest.raises(CodespecError, match="not found"):
        LlamaCppRuntime(tmp_path / "missing.gguf")


def lossless(runtime: Runtime, prompt: list[int], plain: list[int], other: list[int]) -> tuple[bool, float | None]:
    """The near-tie rule: `other` equals `plain` (plain greedy of the same runtime), or they first differ
    where the target's top two logits are within NEAR_TIE_LOGITS (returned as the gap)."""
    at = first_divergence(plain, other)
    if at is None:
        return True, None
    gap = top2_gap(runtime, prompt + plain[:at])
    return gap < NEAR_TIE_LOGITS, gap


@pytest.mark.parametrize("drafting", ["lookup"])
def test_speculative_output_on_llamacpp_is_plain_greedy_up_to_a_near_tie(runtime, drafting):
    engine = Engine(Target(runtime), drafting=drafting, stop_token_ids=[])
    prompts = [list(b"for i in range(10):\n    print(i)\nfor i in range(10):\n"),
               list(b"def add(a, b):\n    return a + b\n\ndef add(a, b):\n"),
               list(range(30, 90)) + list(range(30, 50))]
    drafted = 0
    for prompt in prompts:
        plain = engine.generate(prompt, max_new_tokens=40, drafting="none").token_ids
        engine.reset_cache()
        spec = engine.generate(prompt, max_new_tokens=40)
        drafted += spec.stats.drafted
        ok, gap = lossless(runtime, prompt, plain, spec.token_ids)
        assert ok, f"diverged at a gap of {gap:.3f} logits (not a near-tie)"
    assert drafted > 0  # drafts were really verified in batches


def test_plain_greedy_on_llamacpp_follows_torch_greedy(runtime):
    prompt = list(range(40, 80))
    plain = Engine(Target(runtime), drafting="none", stop_token_ids=[]).generate(prompt, max_new_tokens=24)
    expected = reference_greedy(tiny_model(0), prompt, 24, set())
    ok, gap = lossless(runtime, prompt, expected, plain.token_ids)
    assert ok, f"llama.cpp left torch's greedy path at a gap of {gap}"


def test_cancel_between_prefill_chunks_keeps_the_llamacpp_cache_consistent(runtime):
    engine = Engine(Target(runtime), drafting="lookup", stop_token_ids=[], prefill_chunk=16)
    token = CancelToken()
    forward = runtime.forward

    def cancel_after_the_first_chunk(tokens, logits):
        token.cancel()
        return forward(tokens, logits)

    runtime.forward = cancel_after_the_first_chunk
    prompt = list(range(5, 105))
    result = engine.generate(prompt, max_new_tokens=10, cancel=token)
    runtime.forward = forward
    assert result.finish_reason == "cancelled" and runtime.cached == prompt[:16]
    again = engine.generate(prompt, max_new_tokens=10)
    assert again.stats.reused_tokens == 16
    fresh = Engine(Target(runtime), drafting="none", stop_token_ids=[])
    fresh.reset_cache()
    assert lossless(runtime, prompt, fresh.generate(prompt, max_new_tokens=10).token_ids, again.token_ids)[0]


# --------------------------------------------------------------------------------------- cost-aware length


def curve(*ms: float) -> CostCurve:
    return CostCurve(tuple((k, m / 1000) for k, m in zip((1, 2, 4, 8, 16), ms, strict=False)))


def test_draft_length_follows_the_cost_curve_and_the_acceptance():
    # llama.cpp Q4_K_M 1.5B on 2 cores: every extra token costs ~25 ms on a 36 ms step.
    quantized = CostAwareLength(curve(36, 58, 100, 205, 280).cost)
    # torch bf16: verifying 8 costs 1.09x a single step.
    bf16 = CostAwareLength(curve(228, 230, 235, 249, 310).cost)
    for policy in (quantized, bf16):
        for _ in range(40):
            policy.update("lookup:8+", 8, 8)  # long matches: always accepted
            policy.update("lookup:4", 4, 4)  # four of five tokens accepted
            policy.update("lookup:4", 4, 0)
            policy.update("lookup:4", 4, 4)
            policy.update("lookup:2", 4, 0)  # short matches: never
    assert bf16.length("lookup:8+", 16) == quantized.length("lookup:8+", 16) == 16  # sure drafts: all
    assert 1 <= quantized.length("lookup:4", 16) < bf16.length("lookup:4", 16)  # dear verification: shorter
    assert quantized.length("lookup:2", 16) == 0  # cannot pay: a plain step
    assert bf16.length("unseen", 16) > quantized.length("unseen", 16)  # the prior alone, cheap vs dear


def test_a_skipped_draft_is_scored_against_what_the_target_produced():
    policy = CostAwareLength(curve(36, 58, 100, 205, 280).cost, prior=0.3)
    assert policy.length("lookup:3", 4) == 0
    for start in range(0, 200, 10):
        policy.begin()
        policy.skipped(start + 5, [1, 2, 3, 4], "lookup:3")
        policy.observe([0] * (start + 5) + [1, 2])  # not enough produced yet: nothing learned
        policy.observe([0] * (start + 5) + [1, 2, 3, 4])
    assert policy.acceptance("lookup:3") > 0.9 and policy.length("lookup:3", 4) > 0


def test_the_cost_curve_is_measured_once_per_machine_and_model(runtime, tmp_path):
    path = tmp_path / "curves.json"
    first = cached_cost_curve(runtime, "tiny-0", path)
    assert [k for k, _ in first.points] == list(CALIBRATION_KS) == [*range(1, 17), 24, 32, 64] and runtime.cached == []
    assert all(a[1] <= b[1] for a, b in zip(first.points, first.points[1:], strict=False))  # never falls
    runtime.calibrate = lambda **kwargs: pytest.fail("measured again")
    assert cached_cost_curve(runtime, "tiny-0", path) == first
    path.write_text("{not json")
    del runtime.calibrate
    assert cached_cost_curve(runtime, "tiny-0", path).points[0][0] == 1  # a broken cache: measured again


# --------------------------------------------------------------------------------------- loading, fallback


def test_a_gguf_spec_loads_on_llamacpp_with_its_own_tokenizer(tiny_gguf, tmp_path, monkeypatch):
    import codespec.models.convert
    from codespec.engine_options import load_engine

    monkeypatch.setenv("CODESPEC_CACHE", str(tmp_path / "cache"))
    # transformers cannot read the tiny file's one-pair merge list (its result is no token): save the tiny
    # tokenizer in its place; the bundled GGUF's own tokenizer is read in tests/engine/test_real_model.py.
    monkeypatch.setattr(codespec.models.convert, "_save_gguf_tokenizer",
                        lambda gguf_path, out_dir: tiny_tokenizer().save_pretrained(str(out_dir)))
    engine = load_engine(str(tiny_gguf), drafting="lookup", runtime="llamacpp", threads=1, progress=False)
    assert isinstance(engine.runtime, LlamaCppRuntime) and engine.served["runtime"] == "llamacpp"
    assert engine.tokenizer.get_vocab() == tiny_tokenizer().get_vocab()
    assert engine.draft_length is not None and engine.runtime.cost_curve is not None  # calibrated at load
    prompt = tiny_tokenizer().encode("def push(self, item):\n")
    assert engine.generate(prompt, max_new_tokens=8).finish_reason in ("eos", "max_tokens")


def test_the_server_falls_back_to_torch_when_llamacpp_cannot_load(tmp_path, monkeypatch, capsys):
    import codespec.decode.runtimes.llamacpp as llamacpp
    from codespec.engine_options import load_engine

    tiny_gguf = write_tiny_gguf(tmp_path / "tiny-0.gguf", 0)  # what the torch path converts

    def broken():
        raise CodespecError(llamacpp.BUILD_HINT)

    monkeypatch.setenv("CODESPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(llamacpp, "_library", broken)
    with pytest.raises(CodespecError, match="llama-cpp-python is not installed"):
        load_engine(str(tiny_gguf), drafting="lookup", runtime="llamacpp", progress=False)
    engine = load_engine(str(tiny_gguf), drafting="lookup", runtime="llamacpp", progress=False, degrade=True,
                         calibrate=False)
    assert engine.runtime.name == "torch" and engine.served["runtime"] == "torch"
    assert "llama-cpp-python is not installed" in engine.served["runtimeFallback"]
    assert "using torch" in capsys.readouterr().err


def test_a_skipped_draft_is_not_replaced_before_it_is_scored():
    policy = CostAwareLength(curve(36, 58, 100, 205, 280).cost, prior=0.3)
    ids = [0] * 10
    policy.skipped(10, [1, 2, 3], "lookup:8+")
    for step, token in enumerate([1, 2, 3]):
        policy.skipped(11 + step, [2, 3, 4][step:], "lookup:8+")  # the same match, one token on
        ids.append(token)
        policy.observe(ids)
    assert policy.acceptance("lookup:8+") > 0.3  # the whole first draft counted as accepted


def test_a_calibration_that_fails_leaves_every_draft_verified(tiny_gguf, tmp_path, monkeypatch, capsys):
    import codespec.models.convert
    from codespec.engine_options import load_engine

    monkeypatch.setenv("CODESPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(codespec.models.convert, "_save_gguf_tokenizer",
                        lambda gguf_path, out_dir: tiny_tokenizer().save_pretrained(str(out_dir)))

    def broken(self, **kwargs):
        raise RuntimeError("timer broke")

    monkeypatch.setattr(LlamaCppRuntime, "calibrate", broken)
    engine = load_engine(str(tiny_gguf), drafting="lookup", runtime="llamacpp", threads=1, progress=False)
    assert engine.draft_length is None and "verifying every draft" in capsys.readouterr().err
    assert not (tmp_path / "cache" / "cost-curves.json").exists()  # nothing half-written
    prompt = list(b"for i in range(10):\n    print(i)\nfor i in range(10):\n")
    assert engine.generate(prompt, max_new_tokens=12).stats.drafted > 0
