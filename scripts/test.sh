#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine, then run the whole suite.
# System packages: OpenSSH server (tests SSH into a real sshd on 127.0.0.1), PostgreSQL (ledger
# tests run on SQLite and on a real PostgreSQL server the tests start themselves) and git (the
# bootstrap `code` step clones a local repository) and chromium (the dashboard is tested in a real
# headless browser, tests/support/browser.py).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v git >/dev/null || need+=(git)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null || need+=(chromium fonts-liberation)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "error: install ${need[*]} (apt-get install ${need[*]}) and run again" >&2; exit 2; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

python3 -m venv .venv
# uv installs the lock about 5x faster than pip on an empty cache (README, "Two commands"); it is a
# pip package itself, and prints its progress.
.venv/bin/python -m pip install -q uv
.venv/bin/uv pip install --python .venv/bin/python -r requirements.lock
.venv/bin/uv pip install --python .venv/bin/python --no-deps -e .
exec .venv/bin/python -m pytest -q "$@"
