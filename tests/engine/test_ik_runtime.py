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


def test_the_server_falls_back_to_mainline_llamacpp_when_ik_cannot_load(tiny_gguf, tmp_path, monkeypatch, capsys):
    import codespec.models.convert
    from codespec.engine_options import load_engine
    from codespec.errors import CodespecError

    def broken():
        raise CodespecError(ik.INSTALL_HINT)

    monkeypatch.setenv("CODESPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(codespec.models.convert, "_save_gguf_tokenizer",
                        lambda gguf_path, out_dir: tiny_tokenizer().save_pretrained(str(out_dir)))
    monkeypatch.setattr(ik, "_library", broken)
    with pytest.raises(CodespecError, match="ik-llama-cpp-python is not installed"):
        load_engine(str(tiny_gguf), drafting="lookup", runtime="ik-llamacpp", progress=False, calibrate=False)
    engine = load_engine(str(tiny_gguf), drafting="lookup", runtime="ik-llamacpp", progress=False, degrade=True,
                         calibrate=False)
    assert engine.runtime.name == "llamacpp" and engine.served["runtime"] == "llamacpp"
    assert "ik-llamacpp runtime unavailable" in engine.served["runtimeFallback"]
    assert "ik-llamacpp runtime unavailable" in capsys.readouterr().err  # one line in the log


def test_auto_picks_ik_for_a_gguf_on_the_cpu(tiny_gguf):
    from codespec.models.load import resolve_runtime

    assert resolve_runtime("auto", str(tiny_gguf), "cpu") == "ik-llamacpp"
    assert resolve_runtime("auto", "tiny", "cpu") == "torch"


def test_the_cost_curve_key_names_the_kernels_the_library_was_built_for(runtime):
    # PyPI's wheel (AVX2) and `make venv`'s native build (AVX-512 here) cost differently: a curve measured
    # with one must not be reused for the other, so the kernels are part of the runtime's settings.
    import platform

    kernels = ik.kernel_features().split()
    if platform.machine() in ("x86_64", "AMD64"):
        assert "AVX2" in kernels, kernels
    assert all(k.isupper() or "_" in k for k in kernels) and "=" not in " ".join(kernels)
    assert runtime.describe_settings()["kernels"] == " ".join(kernels)
    assert runtime.describe()["kernels"] == " ".join(kernels)
