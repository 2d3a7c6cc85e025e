"""Which servers computed in each second of a threads.py sample: one letter per server (in start order: P, S, C
for run.sh's plain, speculative, plain control) when it used > 0.2 CPU-s in that second, '.' when not, as runs
("PS.x22" = 22 s with the first two computing at once). Usage: python busy.py SAMPLE.jsonl[.gz] [LETTERS]"""

import gzip
import json
import sys


def main() -> None:
    path = sys.argv[1]
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        rows = [json.loads(line) for line in f]
    letters = sys.argv[2] if len(sys.argv) > 2 else "PSC"
    pids = sorted({pid for row in rows for pid in row["servers"]}, key=int)
    name = dict(zip(pids, letters, strict=False))
    runs: list[list] = []
    both = 0
    previous = None
    for row in rows:
        ticks = {pid: sum(t[1] for t in s["threads"].values()) for pid, s in row["servers"].items()}
        if previous is not None and set(ticks) == set(previous) == set(pids):
            busy = [pid for pid in pids if ticks[pid] - previous[pid] > 20]  # ticks are 1/100 s
            both += len(busy) > 1
            state = "".join(name[pid] if pid in busy else "." for pid in pids)
            if runs and runs[-1][0] == state:
                runs[-1][1] += 1
            else:
                runs.append([state, 1])
        previous = ticks
    print(" ".join(f"{state}x{n}" for state, n in runs))
    print(f"seconds with two or more servers computing: {both} of {sum(n for _, n in runs)}")


if __name__ == "__main__":
    main()
