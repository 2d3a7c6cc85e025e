#!/usr/bin/env bash
# README run A on the native ik_llama.cpp build: plain vs speculative vs llama.vim's llama-server, interleaved
# session by session, one hold of the shared CPU lock. Usage: flock /work/bench.lock experiments/ik-native/run_replay.sh
set -u
cd "$(dirname "$0")/../.."
OUT=experiments/ik-native/replay
mkdir -p $OUT
git rev-parse --short HEAD > $OUT/commit.txt
.venv/bin/codespec bench replay tests/sessions/nav --count 10 --threads 2 --llama-vim --no-cold --out $OUT \
  --markdown $OUT/report.md > $OUT/log.txt 2>&1
