"""ik_llama.cpp as the server configures it (several slot / context settings) beside mainline llama.cpp: the cost
of a forward over k tokens after 256 cached, median of 3, one process. Run under the shared lock:
flock /work/bench.lock .venv/bin/python experiments/speculation/ik_settings.py > experiments/speculation/ik_settings.log"""

import statistics
import time
from pathlib import Path

from codespec.decode.runtimes.ik_llamacpp import IkLlamaCppRuntime
from codespec.decode.runtimes.llamacpp import LlamaCppRuntime

GGUF = Path.home() / ".cache/codespec/qwen2.5-coder-1.5b-gguf/model.gguf"


def measure(runtime, ks=(1, 4, 8, 15, 16, 32, 64)) -> dict[int, float]:
    filler = [(17 + 31 * i) % 150000 + 1 for i in range(400)]
    runtime.reset()
    runtime.forward(filler[:256], logits=1)
    out = {}
    for k in ks:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            runtime.forward(filler[256 : 256 + k], logits=k)
            times.append(time.perf_counter() - started)
            runtime.truncate(256)
        out[k] = round(statistics.median(times) * 1000, 1)
    return out


VARIANTS = [
    ("ik slots8 ctx4096", lambda: IkLlamaCppRuntime(GGUF, threads=2)),
    ("ik slots1 ctx4096", lambda: IkLlamaCppRuntime(GGUF, threads=2, slots=1)),
    ("ik slots1 ctx1024", lambda: IkLlamaCppRuntime(GGUF, threads=2, slots=1, context=1024)),
    ("mainline slots8", lambda: LlamaCppRuntime(GGUF, threads=2)),
]

if __name__ == "__main__":
    for name, make in VARIANTS:
        runtime = make()
        print(name, measure(runtime), flush=True)
        runtime.close()
