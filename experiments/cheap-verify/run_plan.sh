#!/usr/bin/env bash
# The order the quality runs went in. The lock was shared with other engineers' long benchmarks, so after
# HumanEval on the bundled file and q4_0 (run_quality.sh bundled q4_0, one step each), the remaining runs were
# grouped into two holds of the lock, HumanEval first (the measure the formats are most likely to miss).
set -u
cd "$(dirname "$0")/../.."
Q=experiments/cheap-verify/run_quality.sh
echo "== $(date -u +%T) hold 1" >> experiments/cheap-verify/run_quality.log
flock /work/bench.lock env HELD=1 STEPS=humaneval $Q iq4_nl q4_0-q8out
echo "== $(date -u +%T) hold 2" >> experiments/cheap-verify/run_quality.log
# the candidates still in the running after HumanEval, read when the second hold starts
flock /work/bench.lock bash -c "HELD=1 STEPS=firstline,generate $Q bundled \$(cat /tmp/rq/candidates 2>/dev/null || echo q4_0 iq4_nl q4_0-q8out)"
