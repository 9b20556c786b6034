"""A ledger that cannot be opened is one line naming the fix, never a traceback or a password."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "url,code,expected",
    [
        ("garbage", 2, "Could not parse SQLAlchemy URL"),
        ("foo://x", 2, "Can't load plugin"),
        ("mysql://alice:S3cretPW@h/db", 2, "driver 'MySQLdb'"),
        ("postgresql+psycopg://alice:S3cretPW@127.0.0.1:1/books", 1, "Connection refused"),
    ],
)
@pytest.mark.parametrize("args", [["ps"], ["ledger", "month"], ["down", "--all"]])
def test_bad_ledger_url_is_one_line(url, code, expected, args, gpuops_home, cli):
    # Seen: GPUOPS_LEDGER_URL=garbage (or a Postgres that is down) printed an 80-line traceback.
    out = cli(*args, env={"GPUOPS_LEDGER_URL": url})
    assert out.returncode == code, out.stderr[-800:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], out.stderr[-800:]
    assert "GPUOPS_LEDGER_URL" in lines[0] and "S3cretPW" not in out.stderr


def test_up_with_a_bad_ledger_url_rents_nothing(gpuops_home, cli, tmp_path):
    job = tmp_path / "ok.sh"
    job.write_text("true\n")
    out = cli("up", "--job", str(job), env={"GPUOPS_LEDGER_URL": "garbage"})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert not (gpuops_home / "boxes").exists()


def test_a_file_that_is_not_a_ledger_is_one_line(gpuops_home, cli):
    gpuops_home.mkdir(parents=True, exist_ok=True)
    (gpuops_home / "ledger.db").write_text("not a database " * 40)
    for args in (["ps"], ["ledger", "month"]):
        out = cli(*args)
        assert out.returncode == 1, out.stderr[-800:]
        assert out.stderr.strip().splitlines() == [out.stderr.strip()] and "file is not a database" in out.stderr
