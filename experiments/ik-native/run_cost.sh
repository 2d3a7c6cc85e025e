#!/usr/bin/env bash
# The installed build (make venv: native) and PyPI's AVX2 wheel's library, alternating, one lock hold:
#   WHEEL=path/to/wheel/ik_llama_cpp/lib/libllama.so flock /work/bench.lock experiments/ik-native/run_cost.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
for round in 1 2; do
  .venv/bin/python experiments/ik-native/cost.py
  IK_LLAMA_CPP_LIB_PATH=$WHEEL .venv/bin/python experiments/ik-native/cost.py
done
