"""GGUF -> cache: converting to a HF directory, the assembled bundled GGUF and GGUF tokenizers, once each."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from codespec.errors import CodespecError
from codespec.models.bundle import assemble_gguf, locate_parts
from codespec.models.cache import (
    ConversionReport,
    _build_cache,
    _sha256_file,
    _space_needed,
    bundled_cache_dir,
    cache_root,
    check_cache,
)
from codespec.models.spec import BUNDLED, parse_spec

GGUF_NAME = "model.gguf"  # the assembled GGUF in a `<name>-gguf` cache directory


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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
