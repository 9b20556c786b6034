#!/usr/bin/env bash
# The suite's determinism proof: run the whole suite (scripts/test.sh, both lanes) N times in a row
# (default 3) with two CPU-burning processes beside it; stop at the first failing run.
# Usage: bash scripts/test-under-load.sh [N] [pytest args...]   (GPUOPS_TEST_NO_INSTALL=1 skips installs)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
shift || true
burners=()
for _ in 1 2; do
  python3 -c "while True: pass" &
  burners+=($!)
done
trap 'kill "${burners[@]}" 2>/dev/null || true' EXIT
for i in $(seq 1 "$runs"); do
  echo "== run $i of $runs (two CPU burners beside it)"
  bash scripts/test.sh "$@"
done
echo "== $runs runs in a row passed under load"
