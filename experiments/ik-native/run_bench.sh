#!/usr/bin/env bash
# On the native ik_llama.cpp build (make venv), one lock hold: decode speculative vs plain on the real and edit
# prompt sets, then first-line exact on real-code cuts, mainline llama.cpp (the old default) vs ik_llama.cpp.
#   flock /work/bench.lock experiments/ik-native/run_bench.sh > experiments/ik-native/bench.log 2>&1
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=experiments/ik-native
.venv/bin/codespec bench generate --model bundled:qwen2.5-coder-1.5b --runtime ik-llamacpp --threads 2 \
	--set real,edit --n 6 --max-tokens 48 --modes plain,lookup --out $OUT/generate
for runtime in llamacpp ik-llamacpp; do
  .venv/bin/codespec bench layout --part first-line --layouts psm --model bundled:qwen2.5-coder-1.5b \
	--runtime $runtime --threads 2 --n 30 --budget 768 --drafting none \
	--jsonl $OUT/first-line-$runtime.jsonl --json-out $OUT/first-line-$runtime.json
done
