"""`--volume local:NAME`: the local provider has no volumes, and the error says that."""

from __future__ import annotations


def test_a_local_volume_is_named_as_such(gpuops_home, cli, tmp_path):
    # Seen: `up --volume local:x` -> "volume 'local:x' is not <provider>:<id or name>", which it is.
    job = tmp_path / "ok.sh"
    job.write_text("true\n")
    out = cli("up", "--card", "a100", "--job", str(job), "--volume", "local:x")
    assert out.returncode == 2, out.stderr
    err = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "the local provider has no persistent volumes (only runpod, vast do)" in err[0]
    assert not (gpuops_home / "boxes").exists()
