#!/usr/bin/env bash
# Quality and decode speed of the bundled Q4_K_M GGUF and its requantized formats, each step under the shared
# CPU lock (flock /work/bench.lock) so no two measurements overlap; results land beside this script.
# Usage: experiments/cheap-verify/run_quality.sh FORMAT...   (bundled = the bundled file itself)
set -u
cd "$(dirname "$0")/../.."
OUT=experiments/cheap-verify
N_HE=${N_HE:-60}       # HumanEval tasks per kind
N_FL=${N_FL:-60}       # first-line prompts
STEPS=${STEPS:-humaneval,firstline,generate}
spec() { if [ "$1" = bundled ]; then echo bundled:qwen2.5-coder-1.5b; else echo "bundled:qwen2.5-coder-1.5b@$1"; fi; }
run() { echo "== $(date -u +%T) $*" >> $OUT/run_quality.log; if [ -n "${HELD:-}" ]; then "$@"; else flock /work/bench.lock "$@"; fi; }
if [[ $STEPS == *humaneval* ]]; then
  for fmt in "$@"; do
    run .venv/bin/codespec bench humaneval --model "$(spec $fmt)" --runtime llamacpp --threads 2 --drafting none \
      --kinds single,multi --n $N_HE --no-docs --jsonl $OUT/humaneval-$fmt.jsonl > $OUT/humaneval-$fmt.out 2>&1
  done
fi
if [[ $STEPS == *firstline* ]]; then
  for fmt in "$@"; do
    run .venv/bin/codespec bench layout --part first-line --layouts anchored --model "$(spec $fmt)" --runtime llamacpp \
      --threads 2 --drafting none --n $N_FL --budget 256 --max-tokens 32 \
      --jsonl $OUT/firstline-$fmt.jsonl --json-out $OUT/firstline-$fmt.json > $OUT/firstline-$fmt.out 2>&1
  done
fi
if [[ $STEPS == *generate* ]]; then
  for fmt in "$@"; do
    run .venv/bin/codespec bench generate --model "$(spec $fmt)" --runtime llamacpp --threads 2 --set real \
      --modes plain,lookup --n 6 --max-tokens 48 --no-docs --out $OUT/generate-$fmt > $OUT/generate-$fmt.out 2>&1
  done
fi
echo "== $(date -u +%T) done" >> $OUT/run_quality.log
