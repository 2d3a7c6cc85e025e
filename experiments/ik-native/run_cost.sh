#!/usr/bin/env bash
# The wheel's AVX2 build, the native build, the wheel again, one lock hold (no other measurement between).
set -euo pipefail
cd "$(dirname "$0")/../.."
NATIVE=${NATIVE:-build/ik-llama/cmake/src/libllama.so}
for lib in ${ORDER:-wheel "$NATIVE" wheel}; do
  if [ "$lib" = wheel ]; then .venv/bin/python experiments/ik-native/cost.py
  else IK_LLAMA_CPP_LIB_PATH=$lib .venv/bin/python experiments/ik-native/cost.py; fi
done
