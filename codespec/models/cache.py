"""The model cache: its location, completeness markers, the conversion lock and atomic installs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from codespec.errors import CodespecError

CACHE_ENV = "CODESPEC_CACHE"
MARKER_NAME = "codespec-cache.json"  # written last: its presence means the directory is complete
CACHE_FORMAT = 1
TEMP_PREFIX = ".tmp-"
LOCK_NAME = ".convert.lock"
COST_CURVES = "cost-curves.json"  # measured forward costs per machine, model and runtime settings
CHUNK = 8 << 20


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "codespec").expanduser()


def cost_curves_path() -> Path:
    """The machine's measured cost curves (codespec.decode.runtimes.cached_cost_curve reads and adds to it)."""
    return cache_root() / COST_CURVES


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


@dataclass
class ConversionReport:
    path: Path
    converted: bool  # False when the cache was already complete
    seconds: float = 0.0


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
