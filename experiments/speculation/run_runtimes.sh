#!/usr/bin/env bash
# Issue 42's decode figures, one hold of the shared CPU lock, bundled 1.5B Q4_K_M, 2 threads:
# 1. the CPU default (ik_llama.cpp, weights repacked at load): codespec plain and speculative (lookup, cost-aware,
#    gated) against llama-server plain and n-gram on the same GGUF, every prompt set (real, edit, fresh, block);
# 2. mainline llama.cpp under the same loop, plain and speculative, same prompts (the runtime comparison);
# 3. quality of the default runtime: HumanEval infilling (n = 60 per kind) and first-line exact (n = 60), the same
#    commands as experiments/cheap-verify ran on mainline (humaneval-bundled, firstline-bundled).
set -u
cd "$(dirname "$0")/../.."
OUT=experiments/speculation
git rev-parse --short HEAD > $OUT/generate-commit.txt
.venv/bin/codespec bench generate --model bundled:qwen2.5-coder-1.5b --runtime ik-llamacpp --threads 2 \
  --set real,edit,fresh,block --modes plain,lookup,llama-server,llama-server-ngram --n 6 --max-tokens 48 \
  --no-docs --out $OUT/generate-ik > $OUT/generate-ik.out 2>&1
.venv/bin/codespec bench generate --model bundled:qwen2.5-coder-1.5b --runtime llamacpp --threads 2 \
  --set real,edit,fresh,block --modes plain,lookup --n 6 --max-tokens 48 --no-docs --out $OUT/generate-mainline \
  > $OUT/generate-mainline.out 2>&1
.venv/bin/codespec bench humaneval --model bundled:qwen2.5-coder-1.5b --runtime ik-llamacpp --threads 2 \
  --drafting none --kinds single,multi --n 60 --no-docs --jsonl $OUT/humaneval-ik.jsonl > $OUT/humaneval-ik.out 2>&1
.venv/bin/codespec bench layout --part first-line --layouts anchored --model bundled:qwen2.5-coder-1.5b \
  --runtime ik-llamacpp --threads 2 --drafting none --n 60 --budget 256 --max-tokens 32 \
  --jsonl $OUT/firstline-ik.jsonl --json-out $OUT/firstline-ik.json > $OUT/firstline-ik.out 2>&1
