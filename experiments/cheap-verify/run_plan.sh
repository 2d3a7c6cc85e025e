#!/usr/bin/env bash
# The order the measurements ran in (the lock was shared with other engineers' benchmarks, so the quality runs
# were ordered to give complete rows per format first): run_quality.sh step by step.
set -u
cd "$(dirname "$0")/../.."
Q=experiments/cheap-verify/run_quality.sh
while kill -0 "${WAIT_PID:-0}" 2>/dev/null; do sleep 5; done   # the HumanEval run already under way
STEPS=firstline,generate $Q bundled q4_0
STEPS=humaneval,firstline,generate $Q iq4_nl
STEPS=humaneval,firstline,generate $Q q4_0-q8out
