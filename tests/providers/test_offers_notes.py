"""`gpuops offers` with no provider keys: the offers of the local provider, and a note per skipped provider."""

from __future__ import annotations

import json

import pytest


@pytest.mark.e2e  # local offers start the containment probe (a onbox/contain.py process)
def test_offers_without_keys_lists_local_and_notes_the_rest(gpuops_home, cli, monkeypatch):
    # Seen: `gpuops offers` on a fresh machine -> NameError: name 'ui' is not defined (exit 1),
    # raised while printing the "note:" lines for the providers it skipped.
    for var in ("RUNPOD_API_KEY", "VAST_API_KEY", "GPUOPS_RUNPOD_API_KEY", "GPUOPS_VAST_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    out = cli("offers", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "NameError" not in out.stderr
    rows = json.loads(out.stdout)
    assert rows and {r["provider"] for r in rows} == {"local"}
    assert [line for line in out.stderr.splitlines() if line] and all(
        line.startswith("note: ") for line in out.stderr.splitlines() if line
    )
