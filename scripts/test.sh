#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine, run the type checker (mypy, its own
# step: an error fails the run), then run the whole suite in two lanes: the unit lane (pure logic,
# in-process CLI runs) on 2 workers, then the end-to-end lane (sshd, PostgreSQL, emulators,
# subprocesses) in parallel with pytest-xdist; prints the checker's and each lane's time, and the e2e
# lane's 25 slowest tests (setup, call and teardown each: where the lane's time goes).
# Arguments go to both pytest runs (e.g. `bash scripts/test.sh tests/teardown -x`); mypy always checks
# the whole of gpuops/, ledger/ and onbox/ (GPUOPS_TEST_NO_MYPY=1 skips it, for a quick rerun).
# GPUOPS_TEST_NO_INSTALL=1 skips the installs; GPUOPS_TEST_WORKERS sets the e2e lane's workers
# (default 6: on 2 cores its tests mostly wait on processes, windows and I/O, so more workers still
# gain: beside two CPU burners the lane took 592 s with 4 workers and 537 s with 6, 2026-12-03).
# System packages: OpenSSH server (tests SSH into a real sshd on 127.0.0.1), PostgreSQL (ledger
# tests run on SQLite and on a real PostgreSQL server the tests start themselves) and git (the
# bootstrap `code` step clones a local repository), chromium (the dashboard is tested in a real
# headless browser, tests/support/browser.py) and systemd (its `systemd-analyze verify` checks the
# unit `gpuops watchdog --install` writes; no service is started).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${GPUOPS_TEST_NO_INSTALL:-}" ]; then  # set it to run the lanes on what is installed
need=()
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v git >/dev/null || need+=(git)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null || need+=(chromium fonts-liberation)
command -v systemd-analyze >/dev/null || need+=(systemd)  # `systemd-analyze verify` checks the watchdog's user unit
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "error: install ${need[*]} (apt-get install ${need[*]}) and run again" >&2; exit 2; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv  # an existing (or linked) venv is reused
# uv installs the lock about 5x faster than pip on an empty cache (README, "Two commands"); it is a
# pip package itself, and prints its progress.
.venv/bin/python -m pip install -q uv
.venv/bin/uv pip install --python .venv/bin/python -r requirements.lock
.venv/bin/uv pip install --python .venv/bin/python --no-deps -e .
fi

workers="${GPUOPS_TEST_WORKERS:-6}"
status=0
ran=0
lane() {  # lane NAME PYTEST-ARGS...: run one lane, print its wall time; remember a failure
  local name="$1"; shift
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  .venv/bin/python -m pytest -q -p no:cacheprovider "$@" || rc=$?
  t1=$(date +%s.%N)
  awk -v n="$name" -v a="$t0" -v b="$t1" -v rc="$rc" 'BEGIN { printf "== lane %s: %.1f s (pytest exit %d)\n", n, b - a, rc }'
  case "$rc" in
    0) ran=1 ;;
    5) ;;  # this lane has no test among the given paths
    *) ran=1; status=$rc ;;
  esac
}
typecheck() {  # the type checker over gpuops/, ledger/ and onbox/ ([tool.mypy]); prints its time
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  .venv/bin/python -m mypy || rc=$?
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" -v rc="$rc" 'BEGIN { printf "== mypy: %.1f s (exit %d)\n", b - a, rc }'
  [ "$rc" = 0 ] || status=$rc
}
[ -n "${GPUOPS_TEST_NO_MYPY:-}" ] || typecheck
lane unit -m unit -n 2 "$@"  # 2 workers: 26.5 s vs 32 s serial idle, 52 s vs 63 s beside two burners (2026-12-03)
lane e2e -m e2e -n "$workers" --durations=25 "$@"
if [ "$status" = 0 ] && [ "$ran" = 0 ]; then status=5; fi  # no test ran at all
exit "$status"
