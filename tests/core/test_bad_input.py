"""Bad input: one line naming the fix, exit 2, no ledger row, nothing started (in-process CLI runs)."""

from __future__ import annotations

import pytest


@pytest.fixture
def job(tmp_path):
    p = tmp_path / "ok.sh"
    p.write_text("true\n")
    return str(p)


CASES = {
    "missing job": (["up", "--job", "nope.sh"], "not found"),
    "job is a directory": (["up", "--job", "."], "is a directory"),
    "unknown card": (["up", "--job", "{job}", "--card", "a10O"], "unknown card 'a10O'"),
    "unknown provider": (["up", "--job", "{job}", "--provider", "aws"], "unknown provider 'aws'"),
    "zero max hours": (["up", "--job", "{job}", "--max-hours", "0"], "--max-hours must be > 0"),
    "negative max hours": (["up", "--job", "{job}", "--max-hours", "-1"], "--max-hours must be > 0"),
    "max hours not a number": (
        ["up", "--job", "{job}", "--max-hours", "two"],
        "--max-hours must be a number of hours, got 'two'",
    ),
    "no job option": (["up"], "no job: pass --job PATH, a task file with run, or --interactive"),
    "price not a number": (["up", "--job", "{job}", "--max-price", "cheap"], "--max-price must be a number"),
    "idle zero": (["up", "--job", "{job}", "--idle-minutes", "0"], "--idle-minutes off to switch the idle layer off"),
    "bad month": (["ledger", "month", "2026-13"], "month must look like"),
    "bad month text": (["ledger", "month", "november"], "month must look like"),
    "malformed toml": (["up", "--job", "{job}", "--config", "bad.toml"], "bad.toml: malformed TOML"),
    "bad value in toml": (["up", "--job", "{job}", "--config", "neg.toml"], "neg.toml:2: teardown.max_hours"),
    # Seen: a UTF-16 (BOM ff fe) infra.toml -> UnicodeDecodeError traceback, exit 1.
    # Seen: "teardown.idle_minutes.float: Input should be a finite number" (pydantic's union branch).
    "idle nan in toml": (
        ["up", "--job", "{job}", "--config", "idle.toml"],
        "idle.toml:2: teardown.idle_minutes: Input should be a finite",
    ),
    "idle nan flag": (
        ["up", "--job", "{job}", "--idle-minutes", "nan"],
        "--idle-minutes must be a finite number of minutes, got 'nan'",
    ),
    "toml not utf-8": (["up", "--job", "{job}", "--config", "utf16.toml"], "utf16.toml: not UTF-8 text"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_exits_2_with_one_line_and_books_nothing(name, job, gpuops_home, cli, tmp_path):
    (tmp_path / "bad.toml").write_text("[teardown\nmax_hours = 1\n")
    (tmp_path / "neg.toml").write_text("[teardown]\nmax_hours = -2\n")
    (tmp_path / "idle.toml").write_text("[teardown]\nidle_minutes = nan\n")
    (tmp_path / "utf16.toml").write_bytes("[teardown]\nmax_hours = 2\n".encode("utf-16"))
    args, expected = CASES[name]
    args = [a.replace("{job}", job) for a in args]
    out = cli(*args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert expected in lines[0]
    assert "(" in lines[0]  # the fix is named
    assert not (gpuops_home / "boxes").exists()
    assert not (gpuops_home / "ledger.db").exists() or name.startswith("bad month")


def test_unknown_card_suggests_close_names(job, gpuops_home, cli):
    out = cli("up", "--job", job, "--card", "h10")
    assert out.returncode == 2 and "did you mean" in out.stderr and "h100" in out.stderr
