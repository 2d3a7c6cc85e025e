"""Requantizing the bundled GGUF into a weight format whose every tensor has a batched llama.cpp CPU kernel, so
that verifying k drafted tokens costs far less than k single steps; made once into the model cache.

Why: the bundled Q4_K_M file mixes in Q6_K tensors (the output matrix, half the layers' attn_v/ffn_down), for
which llama.cpp has no batched CPU kernel, so a forward over 8 tokens costs ~5.5x a step there. Q4_0, IQ4_NL and
Q8_0 have batched paths (the repacked 8x8 Q4_0/IQ4_NL kernels, tinyBLAS for k >= 2). The file is made through
llama.cpp's own quantize API (`llama_model_quantize`, as llama-cpp-python exposes it), from the bundled Q4_K_M
weights (dequantized, then requantized: no other weights are downloaded), and installed like every cache entry:
in a temp dir under the conversion lock, marked complete with sizes and sha256, then renamed into place.
Measured in experiments/cheap-verify/log.md.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codespec.errors import CodespecError
from codespec.models.cache import (
    MARKER_NAME,
    ConversionReport,
    _build_cache,
    cache_root,
    check_cache,
)
from codespec.models.convert import GGUF_NAME, _first_line, ensure_bundled_gguf
from codespec.models.spec import BUNDLED

# The quantizer splits rows over threads and each row's blocks are quantized independently, so the bytes do
# not depend on the thread count (checked: 1 and 2 threads gave the same sha256 for the 1.5B). Pinned anyway,
# so a machine with more cores makes the same file as the one the measurements were taken on.
REQUANT_THREADS = 2
# The tokenizer files `ensure_bundled_gguf` saves beside its GGUF: the llama.cpp loader reads them from the
# GGUF's directory, so a requantized file carries them too.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@dataclass(frozen=True)
class WeightFormat:
    """One requantization recipe: llama.cpp's file type for the layers and the types of the two big matrices."""

    name: str
    ftype: str  # llama_cpp.LLAMA_FTYPE_* name
    output_type: str  # llama_cpp.GGML_TYPE_* name for output.weight
    embedding_type: str  # ... for token_embd.weight (the output matrix too where a model ties them)
    what: str


FORMATS: dict[str, WeightFormat] = {
    fmt.name: fmt
    for fmt in (
        WeightFormat("q4_0", "LLAMA_FTYPE_MOSTLY_Q4_0", "GGML_TYPE_Q4_0", "GGML_TYPE_Q4_0",
                     "every matrix Q4_0 (4.5 bits/weight): the repacked 8x8 kernel and tinyBLAS batch it"),
        WeightFormat("q4_0-q8out", "LLAMA_FTYPE_MOSTLY_Q4_0", "GGML_TYPE_Q8_0", "GGML_TYPE_Q8_0",
                     "layers Q4_0, output and token embeddings Q8_0 (tinyBLAS batches Q8_0)"),
        WeightFormat("iq4_nl", "LLAMA_FTYPE_MOSTLY_IQ4_NL", "GGML_TYPE_IQ4_NL", "GGML_TYPE_IQ4_NL",
                     "every matrix IQ4_NL (non-linear 4-bit, Q4_0's size and kernels)"),
        WeightFormat("iq4_nl-q8out", "LLAMA_FTYPE_MOSTLY_IQ4_NL", "GGML_TYPE_Q8_0", "GGML_TYPE_Q8_0",
                     "layers IQ4_NL, output and token embeddings Q8_0"),
    )
}


def _lib():
    from codespec.decode.runtimes.llamacpp import _library

    return _library()  # raises one CodespecError line when llama-cpp-python is missing or broken


def batched_kernels_missing() -> str | None:
    """Why this llama.cpp build would not verify a requantized file cheaply (None when it would): without the
    repacked kernels and without tinyBLAS (llamafile) every format runs token by token, and then the bundled
    Q4_K_M file, the better of the two, should serve."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    if "REPACK = 1" in info or "LLAMAFILE = 1" in info:
        return None
    return "this llama.cpp build has neither the repacked CPU kernels nor tinyBLAS (older CPU or build flags)"


def requantize_gguf(source: Path, dest: Path, fmt: WeightFormat, *, nthread: int = REQUANT_THREADS) -> None:
    """Write `source` requantized to `fmt` at `dest` with llama.cpp's quantizer; CodespecError on failure.

    `pure`: every matrix gets the format's type (llama.cpp's mixing rules would put some back in Q5/Q6 types,
    the ones without a batched kernel); `allow_requantize`: the source is already quantized."""
    lib = _lib()
    params = lib.llama_model_quantize_default_params()
    params.ftype = getattr(lib, fmt.ftype)
    params.output_tensor_type = getattr(lib, fmt.output_type)
    params.token_embedding_type = getattr(lib, fmt.embedding_type)
    params.allow_requantize = True
    params.pure = True
    params.nthread = nthread
    status = lib.llama_model_quantize(str(source).encode(), str(dest).encode(), ctypes.byref(params))
    if status != 0 or not dest.is_file():
        dest.unlink(missing_ok=True)
        raise CodespecError(f"llama.cpp could not requantize {source.name} to {fmt.name} (status {status})")


def requantized_dir(name: str, fmt: str) -> Path:
    return cache_root() / f"{name}-{fmt}"


def _format(fmt: str) -> WeightFormat:
    try:
        return FORMATS[fmt]
    except KeyError:
        raise CodespecError(f"unknown weight format {fmt!r}; choose one of: {', '.join(FORMATS)}") from None


def ensure_requantized(name: str, fmt: str, *, force: bool = False, progress: bool = True) -> ConversionReport:
    """Make `bundled:<name>` in format `fmt` in the cache (once, under the conversion lock); raises CodespecError
    when it cannot (no space, llama.cpp refuses, the result does not load) and leaves nothing behind then."""
    weight_format = _format(fmt)
    bundle = BUNDLED[name]
    final = requantized_dir(name, fmt)
    if not force and requantized_state(name, fmt) is None:
        return ConversionReport(final, converted=False)
    source = ensure_bundled_gguf(name, progress=progress)

    def build(scratch: Path, out_dir: Path) -> None:
        out_dir.mkdir(parents=True)
        if progress:
            print(f"codespec: requantizing bundled:{name} to {fmt} ({weight_format.what}) ...", file=sys.stderr)
        requantize_gguf(source, out_dir / GGUF_NAME, weight_format)
        check_loads(out_dir / GGUF_NAME)
        for tokenizer_file in TOKENIZER_FILES:
            if (source.parent / tokenizer_file).is_file():
                shutil.copyfile(source.parent / tokenizer_file, out_dir / tokenizer_file)

    return _build_cache(
        final,
        bundle.sha256,
        build,
        # the new file is at most ~1.2x the source (Q8_0 output and embeddings), plus headroom
        needed_bytes=source.stat().st_size * 2,
        force=force,
        marker={"spec": f"bundled:{name}@{fmt}", "upstream": bundle.upstream, "dtype": "gguf",
                "weight_format": fmt, "ftype": weight_format.ftype, "output_type": weight_format.output_type,
                "token_embedding_type": weight_format.embedding_type, "requantized_from": source.name,
                "quantizer_threads": REQUANT_THREADS, "llama_cpp_python": _llama_cpp_version()},
    )


def check_loads(path: Path) -> None:
    """Load the file's tensors into llama.cpp (CPU, memory-mapped) and free it again: CodespecError if it cannot."""
    lib = _lib()
    params = lib.llama_model_default_params()
    params.n_gpu_layers = 0
    model = lib.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise CodespecError(f"llama.cpp cannot load the requantized {path.name}")
    lib.llama_model_free(model)


def requantized_state(name: str, fmt: str) -> str | None:
    """None when `bundled:<name>@<fmt>` is complete in the cache, else why not (for the one log line)."""
    final = requantized_dir(name, fmt)
    state = check_cache(final, BUNDLED[name].sha256)
    if state.state == "missing":
        return f"{final} does not exist (run `codespec models fetch`)"
    if state.state != "converted":
        return f"{final} is incomplete ({state.reason}; run `codespec models fetch`)"
    try:
        marker = json.loads((final / MARKER_NAME).read_text())
    except (OSError, ValueError) as exc:
        return f"{final} has an unreadable marker ({exc})"
    if marker.get("weight_format") != fmt or GGUF_NAME not in (marker.get("files") or {}):
        return f"{final} does not hold a {fmt} GGUF (run `codespec models fetch --force`)"
    return None


def serving_gguf(name: str, fmt: str | None) -> tuple[Path | None, str | None]:
    """The requantized GGUF to serve `bundled:<name>@<fmt>` from, or (None, why the bundled file serves)."""
    if fmt is None:
        return None, None
    why = batched_kernels_missing() or requantized_state(name, fmt)
    if why:
        return None, why
    return requantized_dir(name, fmt) / GGUF_NAME, None


def bundled_llamacpp_runtime(name: str, fmt: str | None, *, threads: int | None,
                             progress: bool = True, runtime_class: Any = None) -> tuple[Any, Path]:
    """A LlamaCppRuntime on `bundled:<name>@<fmt>`'s requantized GGUF, or on the bundled GGUF (with one line on
    stderr, the server's log, saying why) when that file is not complete here or llama.cpp cannot load it."""
    from codespec.decode.runtimes.llamacpp import LlamaCppRuntime

    runtime_class = runtime_class or LlamaCppRuntime  # or the ik_llama.cpp one
    path, why = serving_gguf(name, fmt)
    if path is not None:
        try:
            return runtime_class(path, threads=threads), path
        except CodespecError as exc:
            why = f"llama.cpp cannot load {path} ({exc})"
    if fmt is not None:
        print(fallback_line(name, fmt, why or "unknown"), file=sys.stderr, flush=True)
    bundled = ensure_bundled_gguf(name, progress=progress)
    return runtime_class(bundled, threads=threads), bundled


def fallback_line(name: str, fmt: str, why: str) -> str:
    """The one line said when the bundled file serves in place of the requantized one."""
    return f"codespec: bundled:{name}@{fmt} is not used, the bundled GGUF serves: {why}"


def _llama_cpp_version() -> str:
    try:
        import llama_cpp

        return str(llama_cpp.__version__)
    except Exception as exc:  # noqa: BLE001 - only for the marker
        return f"unknown ({_first_line(exc)})"


# The CPU default's weight format (codespec.models.device.default_profile names bundled:NAME@FORMAT), made by
# `codespec models fetch`; None: the bundled GGUF itself (experiments/cheap-verify/log.md says why).
CPU_DEFAULT_FORMAT: str | None = None
REQUANTIZE_ON_FETCH: dict[str, str] = {"qwen2.5-coder-1.5b": CPU_DEFAULT_FORMAT} if CPU_DEFAULT_FORMAT else {}
