"""A cold prefill of N tokens (the prompt after a jump), ik_llama.cpp (installed build) against mainline llama.cpp,
fastest of 3, alternating. Run under the shared lock:
flock /work/bench.lock .venv/bin/python experiments/ik-native/prefill.py > experiments/ik-native/prefill.jsonl"""

import json
import time
from pathlib import Path

from codespec.decode.runtimes.ik_llamacpp import IkLlamaCppRuntime, kernel_features
from codespec.decode.runtimes.llamacpp import LlamaCppRuntime

GGUF = Path.home() / ".cache/codespec/qwen2.5-coder-1.5b-gguf/model.gguf"
SIZES = (64, 256, 512)  # a forward takes at most 512 (MAX_BATCH); longer prompts go in chunks


def prefill_ms(runtime, n: int) -> float:
    ids = [(17 + 31 * i) % 150000 + 1 for i in range(n)]
    best = float("inf")
    for _ in range(3):
        runtime.reset()
        started = time.perf_counter()
        runtime.forward(ids, logits=1)
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 1)


if __name__ == "__main__":
    runtimes = {"ik-llamacpp": IkLlamaCppRuntime(GGUF, threads=2), "llamacpp": LlamaCppRuntime(GGUF, threads=2)}
    for n in SIZES:
        for name, runtime in runtimes.items():
            ms = prefill_ms(runtime, n)
            print(json.dumps({"runtime": name, "tokens": n, "ms": ms, "tokens_per_s": round(n / ms * 1000, 1),
                              **({"kernels": kernel_features()} if name == "ik-llamacpp" else {})}), flush=True)
