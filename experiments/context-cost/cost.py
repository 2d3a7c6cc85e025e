"""How a forward's cost grows with the KV cells it attends over (ik_llama.cpp, bundled 1.5B, 2 threads): a
forward over k tokens after n cached in the same slot, and after 64 cached in a slot while another slot holds
n (the fork's one KV cache attends over every cell up to the highest in use, whichever sequence holds it).
Fastest of 5. Run under the shared lock: flock /work/bench.lock .venv/bin/python experiments/context-cost/cost.py"""

import json
import sys
import time
from pathlib import Path

from codespec.decode.runtimes.ik_llamacpp import IkLlamaCppRuntime

GGUF = Path.home() / ".cache/codespec/qwen2.5-coder-1.5b-gguf/model.gguf"
KS = (1, 2, 4, 8)
CACHED = (64, 512, 1024, 2048, 4096)


def timed(runtime, tokens, base) -> float:
    times = []
    for _ in range(5):
        started = time.perf_counter()
        runtime.forward(tokens, logits=len(tokens))
        times.append(time.perf_counter() - started)
        runtime.truncate(base)
    return round(min(times) * 1000, 1)


def fill(runtime, tokens) -> None:
    for start in range(0, len(tokens), 256):
        runtime.forward(tokens[start:start + 256], logits=1)


def main() -> None:
    runtime = IkLlamaCppRuntime(GGUF, threads=2)
    filler = [(17 + 31 * i) % 150000 + 1 for i in range(5000)]
    other = [(23 + 37 * i) % 150000 + 1 for i in range(5000)]
    for n in CACHED:
        runtime.reset()
        runtime.sync(filler[:n])
        fill(runtime, filler[:n])
        same = {k: timed(runtime, other[:k], n) for k in KS}
        # Another place: the first slot keeps its n tokens, a second one holds 64 of another prompt.
        runtime.reset()
        runtime.sync(filler[:n])
        fill(runtime, filler[:n])
        runtime.slots[runtime.active].place = True
        runtime.sync(other[:64] + [1], place=True)
        fill(runtime, other[:64])
        beside = {k: timed(runtime, filler[:k], 64) for k in KS}
        print(json.dumps({"cells": n, "same_slot_ms": same, "other_slot_ms": beside,
                          "slots": runtime.describe_slots()["slotTokens"]}), flush=True)
    runtime.close()


if __name__ == "__main__":
    sys.exit(main())
