"""Whatever a job writes to $GPUOPS_METRICS, `up` ends with a summary and a booked row."""

from __future__ import annotations

import json
import subprocess

from gpuops.agent.jobio import tokens_from_metrics
from tests.conftest import gpuops_cmd

HOSTILE = "\n".join(
    [
        "not json",
        '{"tokens": "abc"}',
        '{"tokens": -5000}',
        '{"tokens": 1e30}',
        '{"tokens": NaN}',
        '{"tokens": Infinity}',
        '{"tokens": 100}',
        "[1, 2]",
        '{"tokens": true}',
        '{"tokens": 2.7}',
        "\x00\xff",
    ]
)


def test_tokens_ignore_values_that_are_not_finite_counts():
    assert tokens_from_metrics(HOSTILE) == 102
    assert tokens_from_metrics('{"tokens": 1000000000000000}\n' * 10) == 10**16


def test_up_survives_hostile_metrics(gpuops_home, cli_env, tmp_path):
    # Seen: {"tokens": 1e30} ended `up` in "OverflowError: Python int too large to convert to
    # SQLite INTEGER" after teardown, with no summary; {"tokens": Infinity} likewise.
    job = tmp_path / "m.sh"
    job.write_text("cat > \"$GPUOPS_METRICS\" <<'X'\n" + HOSTILE.replace("\x00\xff", "") + "\nX\n")
    out = subprocess.run(
        gpuops_cmd("up", "--job", str(job), "--json"), env=cli_env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-1500:]
    summ = json.loads(out.stdout)
    assert summ["tokens"] == 102 and summ["end_reason"] == "job_end"
