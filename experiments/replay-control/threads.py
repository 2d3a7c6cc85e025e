"""Sample every `codespec serve` process's per-thread CPU time once a second into a JSONL file (eighth session).

Run beside a replay: `python experiments/replay-control/threads.py OUT.jsonl &`, stop it after. Each line:
{"t": unix time, "servers": {pid: {"cmd", "threads": {tid: [name, utime+stime ticks, last CPU]}, VmRSS, ...}}}.
busy.py reads it: which servers computed in each second."""

import json
import os
import sys
import time


def servers():
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"serve" in cmd and any(b"codespec" in c for c in cmd):
            yield int(pid), b" ".join(cmd).decode(errors="replace")


def snapshot(pid: int) -> dict:
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        threads[tid] = [name, int(fields[11]) + int(fields[12]), int(fields[36])]
    status = open(f"/proc/{pid}/status").read().splitlines()
    extra = {line.split(":")[0]: line.split(":")[1].strip() for line in status
             if line.startswith(("VmRSS", "voluntary", "nonvoluntary"))}
    return {"threads": threads, **extra}


def main() -> None:
    with open(sys.argv[1], "a") as out:
        while True:
            snap = {}
            for pid, cmd in servers():
                try:
                    snap[pid] = {"cmd": cmd, **snapshot(pid)}
                except OSError:  # the process ended between the listing and the read
                    continue
            out.write(json.dumps({"t": time.time(), "servers": snap}) + "\n")
            out.flush()
            time.sleep(1)


if __name__ == "__main__":
    main()
