"""CPU facts measured at run time (native bf16, the bf16 speedup) and giving freed heap memory back."""

from __future__ import annotations

import sys
import time


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
