#!/usr/bin/env bash
# Run A with a control column: plain, speculative and a second plain server, interleaved session by session,
# one hold of the shared CPU lock. Usage: flock /work/bench.lock experiments/replay-control/run.sh NAME
set -u
cd "$(dirname "$0")/../.."
OUT=experiments/replay-control/${1:?run name}
mkdir -p "$OUT"
git rev-parse --short HEAD > "$OUT/commit.txt"
.venv/bin/codespec bench replay tests/sessions/nav --count 10 --threads 2 --control --no-cold --out "$OUT" \
  --markdown "$OUT/report.md" > "$OUT/log.txt" 2>&1
echo $? > "$OUT/exit.txt"
