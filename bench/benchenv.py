"""The environment a benchmark's ``gpuops`` runs in: the local provider on this machine, nothing of the user's.

One helper for every bench that rents a local box (``bench_up.py``, ``bench_job_exit.py``,
``bench_sweep.py`` through ``bench_up``, ``bench_teardown.py``): a stand-in ``nvidia-smi`` first on
``PATH``, a private data dir and SQLite ledger, the local provider at a set price (2.0 USD/h), no
SSH user the agent would count as a session, compiled bytecode in a private cache, no ``GPUOPS_*``
of this machine. Never a pass/fail test.
"""

from __future__ import annotations

import os
from pathlib import Path

# A GPU at 90 % utilization: the idle layer never fires during a bench's job.
BUSY_SMI = """#!/bin/sh
echo "0, 90, 40000, 81920"
exit 0
"""


def local_env(tmp: Path, repo: Path, smi: str = BUSY_SMI) -> dict[str, str]:
    """The variables of every run, under the folder ``tmp`` (made here), timing the checkout ``repo``.

    ``smi``: the stand-in ``nvidia-smi`` script (``tmp/bin/nvidia-smi``, first on PATH)."""
    bindir = tmp / "bin"
    bindir.mkdir(parents=True)
    (bindir / "nvidia-smi").write_text(smi)
    (bindir / "nvidia-smi").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUOPS_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(
        {
            "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(repo),
            "PYTHONPYCACHEPREFIX": str(tmp / "pycache"),
            "GPUOPS_DATA_DIR": str(tmp / "data"),
            "GPUOPS_LEDGER_URL": f"sqlite:///{tmp / 'data' / 'ledger.db'}",
            "GPUOPS_PROVIDERS_LOCAL_PRICE_PER_HOUR": "2.0",
            "GPUOPS_AGENT_SSH_USERS": "gpuops-bench-nobody",
            "XDG_CONFIG_HOME": str(tmp / "xdg"),
            "XDG_CACHE_HOME": str(tmp / "cache"),
        }
    )
    return env
