#!/usr/bin/env bash
# Mainline llama.cpp (the project's llama-cpp-python) and ik_llama.cpp (/work/ikvenv) cost curves in one hold
# of the shared CPU lock: mainline, ik, mainline again, so a change in the machine's speed shows as a
# difference between the two mainline runs. Usage: flock /work/bench.lock experiments/cheap-verify/run_sandwich.sh
set -eu
cd "$(dirname "$0")/../.."
OUT=experiments/cheap-verify
C=~/.cache/codespec
M="q4_k_m=$C/qwen2.5-coder-1.5b-gguf/model.gguf q4_0=$C/qwen2.5-coder-1.5b-q4_0/model.gguf"
.venv/bin/python $OUT/cost_curves.py $M --rounds 5 --out $OUT/sandwich-mainline-1.json > $OUT/sandwich-mainline-1.txt 2>/dev/null
/work/ikvenv/bin/python $OUT/ik_cost_curves.py $M "q4_k_m+rtr=$C/qwen2.5-coder-1.5b-gguf/model.gguf" --rounds 5 \
  --out $OUT/sandwich-ik.json > $OUT/sandwich-ik.txt 2>/dev/null
.venv/bin/python $OUT/cost_curves.py $M --rounds 5 --out $OUT/sandwich-mainline-2.json > $OUT/sandwich-mainline-2.txt 2>/dev/null
