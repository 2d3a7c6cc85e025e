#!/usr/bin/env bash
# Decode speed of plain vs speculative (lookup, cost-aware) on the bundled 1.5B Q4_K_M, mainline llama.cpp vs
# ik_llama.cpp, same prompts, one hold of the shared CPU lock. Usage: flock /work/bench.lock experiments/speculation/run_runtimes.sh
set -u
cd "$(dirname "$0")/../.."
OUT=experiments/speculation
for runtime in llamacpp ik-llamacpp; do
  .venv/bin/codespec bench generate --model bundled:qwen2.5-coder-1.5b --runtime $runtime --threads 2 \
    --set real,edit,block --modes plain,lookup --n 6 --max-tokens 48 --no-docs --out $OUT/generate-$runtime \
    > $OUT/generate-$runtime.out 2>&1
done
