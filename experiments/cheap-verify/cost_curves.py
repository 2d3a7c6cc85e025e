"""Time a llama.cpp forward over k new tokens (after 256 cached ones) for several GGUFs, interleaved in one run."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from codespec.decode.runtimes.llamacpp import LlamaCppRuntime

KS = (*range(1, 17), 64)
CONTEXT = 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("ggufs", nargs="+", metavar="NAME=PATH")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    runtimes = {}
    for item in args.ggufs:
        name, _, path = item.partition("=")
        runtimes[name] = LlamaCppRuntime(path, threads=args.threads, slots=1)
    filler = [(17 + 31 * i) % 150000 + 1 for i in range(CONTEXT + max(KS))]
    for runtime in runtimes.values():
        runtime.reset()
        for start in range(0, CONTEXT, 64):
            runtime.forward(filler[start : start + 64], logits=1)
    runs: dict[str, dict[int, list[float]]] = {name: {k: [] for k in KS} for name in runtimes}
    # Rounds interleave the files (and k within a file), so that a slower minute on a shared machine
    # lands on every format alike instead of on whichever was measured then.
    for _ in range(args.rounds):
        for name, runtime in runtimes.items():
            for k in KS:
                started = time.perf_counter()
                runtime.forward(filler[CONTEXT : CONTEXT + k], logits=k)
                runs[name][k].append(time.perf_counter() - started)
                runtime.truncate(CONTEXT)
    result = {name: {str(k): statistics.median(v) * 1000 for k, v in per_k.items()} for name, per_k in runs.items()}
    args.out.write_text(json.dumps({"threads": args.threads, "context": CONTEXT, "rounds": args.rounds,
                                    "median_ms": result, "runs_s": runs}, indent=1))
    names = list(result)
    print("k    " + "".join(f"{n:>22}" for n in names))
    for k in KS:
        print(f"{k:<5}" + "".join(f"{result[n][str(k)]:>10.1f} ms {result[n][str(k)] / result[n]['1']:>5.2f}x "
                                  for n in names))


if __name__ == "__main__":
    main()
