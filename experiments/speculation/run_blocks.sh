#!/usr/bin/env bash
# (queued under this name; the plan is run_runtimes.sh)
exec "$(dirname "$0")/run_runtimes.sh"
