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


def test_volumes_without_a_key_exit_2_like_up(gpuops_home, cli):
    # Seen: `gpuops volumes list --provider runpod` without a key exited 1 (a provider failure)
    # while `gpuops up --provider runpod` exits 2 (bad input: set the key); nothing was created.
    env = {"RUNPOD_API_KEY": "", "VAST_API_KEY": ""}
    for args in (
        ("volumes", "list", "--provider", "runpod"),
        ("volumes", "create", "--provider", "runpod", "--name", "w", "--size-gb", "10", "--region", "EU-RO-1"),
        ("volumes", "delete", "vast:w", "--yes"),
    ):
        r = cli(*args, env=env)
        assert r.returncode == 2, (args, r)
        assert (
            r.stderr.startswith("error: no ")
            and "API key found" in r.stderr
            and len(r.stderr.strip().splitlines()) == 1
        )
