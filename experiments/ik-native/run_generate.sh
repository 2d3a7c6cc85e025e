#!/usr/bin/env bash
# README run B on the native ik_llama.cpp build (make venv), as `make bench` runs it; updates docs/ (its block).
#   flock /work/bench.lock experiments/ik-native/run_generate.sh > experiments/ik-native/generate-full.log 2>&1
set -euo pipefail
cd "$(dirname "$0")/../.."
git rev-parse HEAD > experiments/ik-native/generate-full-commit.txt
.venv/bin/codespec bench generate --model bundled:qwen2.5-coder-1.5b --runtime ik-llamacpp --threads 2 \
	--set real,edit,fresh,block --n 6 --max-tokens 48 --modes plain,lookup,llama-server,llama-server-ngram --out docs
