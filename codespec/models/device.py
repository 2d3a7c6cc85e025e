"""Device and dtype: resolving `auto` and names, and the default model profile per device."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from codespec.errors import CodespecError

if TYPE_CHECKING:
    import torch


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


class Profile(NamedTuple):
    target: str
    draft: str | None
    drafting: str  # none | lookup | model | both
    runtime: str = "torch"  # codespec.modes.RUNTIMES
    why: str = ""  # the measurement behind it, for `codespec models`


def default_profile(device: str | torch.device = "auto") -> Profile:
    """The default target/draft/drafting/runtime per device, in one place (measured: docs/benchmarks.md)."""
    if resolve_device(device).type == "cuda":
        return Profile("bundled:qwen2.5-coder-1.5b", "bundled:qwen2.5-coder-0.5b", "both", "torch",
                       "CUDA forwards are cheap: the 1.5B target with 0.5B + lookup drafts (projected, "
                       "docs/benchmarks.md)")
    from codespec.decode.runtimes.ik_llamacpp import ik_available
    from codespec.decode.runtimes.llamacpp import llamacpp_available

    if ik_available() or llamacpp_available():
        from codespec.models.requantize import CPU_DEFAULT_FORMAT

        # bundled:NAME@FORMAT serves the requantized file where `models fetch` made it, else the bundled GGUF
        # with one line saying why (codespec.models.requantize.bundled_llamacpp_runtime)
        target = "bundled:qwen2.5-coder-1.5b" + (f"@{CPU_DEFAULT_FORMAT}" if CPU_DEFAULT_FORMAT else "")
        if ik_available():
            return Profile(target, None, "lookup", "ik-llamacpp", CPU_IK_WHY)
        return Profile(target, None, "lookup", "llamacpp", CPU_LLAMACPP_WHY)
    return Profile("bundled:qwen2.5-coder-0.5b", None, "lookup", "torch",
                   "llama-cpp-python is not installed: the 0.5B in fp32 torch with free lookup drafts is the "
                   "fastest torch target on a CPU (the 1.5B's verify forward costs 2x)")


CPU_LLAMACPP_WHY = ("on llama.cpp the bundled 1.5B (Q4_K_M) decodes faster than the 0.5B did in fp32 torch, "
                    "so the larger model is the CPU default; lookup drafts are verified only where the "
                    "measured cost curve says they pay (docs/benchmarks.md)")
CPU_IK_WHY = ("on ik_llama.cpp with its weights repacked at load, the bundled 1.5B (Q4_K_M, the same file) takes "
              "30 ms a step against 41-44 ms on llama.cpp, and a forward over 8 tokens (a draft's verify) 105 ms "
              "against 246-253 ms (experiments/cheap-verify/log.md); lookup drafts are verified only where the "
              "measured cost curve says they pay")
