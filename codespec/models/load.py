"""Loading a model by spec on the torch or llama.cpp runtime, with its tokenizer and FIM stop ids."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from codespec.errors import CodespecError
from codespec.fim import stop_token_ids
from codespec.models.cache import cache_root
from codespec.models.convert import (
    _first_line,
    ensure_bundled,
    ensure_gguf_file,
    ensure_gguf_tokenizer,
)
from codespec.models.device import resolve_device, resolve_dtype
from codespec.models.requantize import bundled_llamacpp_runtime
from codespec.models.spec import ModelSpec, parse_spec
from codespec.modes import LLAMACPP_RUNTIMES, RUNTIMES

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase




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

    if threads is not None:
        if threads < 1:
            raise CodespecError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    parsed = parse_spec(spec)
    chosen = resolve_runtime(runtime, spec, device)
    if chosen in LLAMACPP_RUNTIMES:
        return _load_llamacpp(spec, parsed, device, dtype, threads, progress, chosen)
    target_device = resolve_device(device)
    target_dtype = resolve_dtype(dtype, target_device)
    if parsed.kind == "tiny":
        return _load_tiny(spec, parsed, target_device, target_dtype)
    if parsed.kind == "bundled":
        if parsed.weight_format:
            raise CodespecError(f"{spec!r} names a llama.cpp weight format: load it with --runtime llamacpp")
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
                   threads: int | None, progress: bool, runtime_name: str = "llamacpp") -> LoadedModel:
    """A GGUF target on llama.cpp (or the ik_llama.cpp fork): the bundled GGUF assembled once into the cache,
    or a user's .gguf file."""
    import torch
    from transformers import AutoTokenizer

    from codespec.decode.runtimes.ik_llamacpp import IkLlamaCppRuntime
    from codespec.decode.runtimes.llamacpp import LlamaCppRuntime

    runtime_class = IkLlamaCppRuntime if runtime_name == "ik-llamacpp" else LlamaCppRuntime

    if resolve_device(device).type != "cpu":
        raise CodespecError("the llamacpp runtime runs on the CPU here: use --runtime torch for a GPU")
    if str(dtype) not in ("auto", "", "None"):
        raise CodespecError(f"--dtype {dtype} is for the torch runtime; llama.cpp computes in the GGUF's own "
                            "weight format")
    if parsed.kind == "bundled":  # requantized (bundled:NAME@FORMAT) where complete, else the bundled GGUF
        runtime, gguf_path = bundled_llamacpp_runtime(parsed.name, parsed.weight_format, threads=threads,
                                                      progress=progress, runtime_class=runtime_class)
        tokenizer_dir, name = gguf_path.parent, parsed.name
    elif parsed.kind == "gguf":
        assert parsed.path is not None
        gguf_path, name = parsed.path, parsed.path.stem
        runtime = runtime_class(gguf_path, threads=threads)  # first: a missing build fails before hashing
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

    from codespec.decode.eagle import is_eagle_dir, load_head

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


def resolve_runtime(runtime: str, spec: str, device: str = "auto") -> str:
    """`auto`, for a GGUF-backed spec on a CPU: ik_llama.cpp where ik-llama-cpp-python loads (its repacked
    kernels are faster here for one token, a draft's verify and a prefill chunk alike: CPU_RUNTIME_WHY), else
    llama.cpp where llama-cpp-python does; otherwise torch."""
    if runtime not in RUNTIMES:
        raise CodespecError(f"unknown runtime {runtime!r}; use one of {', '.join(RUNTIMES)}")
    if runtime != "auto":
        return runtime
    from codespec.decode.runtimes.ik_llamacpp import ik_available
    from codespec.decode.runtimes.llamacpp import llamacpp_available

    gguf_backed = parse_spec(spec).kind in ("bundled", "gguf")
    if gguf_backed and resolve_device(device).type == "cpu":
        if ik_available():
            return "ik-llamacpp"
        if llamacpp_available():
            return "llamacpp"
    return "torch"
