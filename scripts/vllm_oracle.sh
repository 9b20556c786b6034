#!/usr/bin/env bash
# vLLM as the oracle for `gpuops plan`: install the release named by VLLM_RELEASE
# (gpuops/planning/vllm_kv.py) into a scratch venv outside the repository, then write
# tests/data/vllm_golden.json from vLLM's own planning functions. Run by hand when vLLM changes,
# never in CI. Needs ~12 GB free disk and the network for the install; the golden step is offline.
#   scripts/vllm_oracle.sh [VENV]     (default /tmp/vllm-oracle-<release>)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
release="$(python3 "$here/scripts/vllm_oracle.py" release)"
venv="${1:-/tmp/vllm-oracle-$release}"
python3 "$here/scripts/vllm_oracle.py" install "$venv"
VLLM_TARGET_DEVICE=cpu "$venv/bin/python" "$here/scripts/vllm_oracle.py" golden
