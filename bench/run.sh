#!/usr/bin/env bash
# Run every benchmark (never a pass/fail test: each prints its figures and the targets or ratios
# to compare against). Needs the dev install (bash scripts/test.sh makes it).
#   bash bench/run.sh            all four, default sizes (~6 min on 2 cores)
#   bash bench/run.sh plan cli   only those
#   bash bench/run.sh scale      the scale ratios on a 1M-session ledger (bench_scale.py; minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
which=("$@")
[ ${#which[@]} -gt 0 ] || which=(plan cli bootstrap fresh_box teardown job_exit agent up)
for b in "${which[@]}"; do
  echo "=== bench/bench_$b.py"
  "$PY" "bench/bench_$b.py"
done
