#!/usr/bin/env bash
# README run A with the replay's settle (eighth session): plain, speculative and llama-server driven as llama.vim
# (the anchor, same GGUF), interleaved session by session, one hold of the shared CPU lock.
# Usage: flock /work/bench.lock experiments/replay-control/run_anchor.sh NAME   (needs `make llama-server`)
set -u
cd "$(dirname "$0")/../.."
OUT=experiments/replay-control/${1:?run name}
mkdir -p "$OUT"
git rev-parse --short HEAD > "$OUT/commit.txt"
.venv/bin/codespec bench replay tests/sessions/nav --count 10 --threads 2 --llama-vim --no-cold --out "$OUT" \
  --markdown "$OUT/report.md" > "$OUT/log.txt" 2>&1
echo $? > "$OUT/exit.txt"
