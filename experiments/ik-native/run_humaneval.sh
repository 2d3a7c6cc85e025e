#!/usr/bin/env bash
# HumanEval infilling (single- and multi-line, 30 tasks each, seed 0, plain greedy) on both llama.cpp runtimes,
# same file, same layout (the default), one after the other in one hold of the shared CPU lock.
# Usage: flock /work/bench.lock experiments/ik-native/run_humaneval.sh
set -u
cd "$(dirname "$0")/../.."
OUT=experiments/ik-native/humaneval
mkdir -p $OUT
git rev-parse --short HEAD > $OUT/commit.txt
for runtime in ik-llamacpp llamacpp; do
  .venv/bin/codespec bench humaneval --model bundled:qwen2.5-coder-1.5b --runtime $runtime --threads 2 \
    --kinds single,multi --n 30 --drafting none --no-docs --out $OUT/$runtime --jsonl $OUT/$runtime.jsonl \
    > $OUT/$runtime.log 2>&1
  echo "$runtime exit $?" >> $OUT/exit.txt
done
