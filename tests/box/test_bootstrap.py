"""onbox/bootstrap.py, run as the box runs it: a python3 subprocess, JSON lines on stdout."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuops.emulators import nvidia_smi as fake_nvidia_smi
from tests.support.servers import HttpFiles, commit, make_repo
from tests.support.wheels import make_wheel

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "onbox" / "bootstrap.py"
SECRET = "hf_TopSecret0123456789abcdef"


@pytest.fixture
def world(tmp_path, smi_bin):
    """A box directory, a git repo, an HTTP server with a weights file, a wheelhouse."""
    box = tmp_path / "box"
    box.mkdir()
    home = tmp_path / "home"
    repo = tmp_path / "origin repo"
    sha1 = make_repo(repo, {"train.py": "print('v1')\n"})
    files = tmp_path / "served"
    files.mkdir()
    weights = os.urandom(3 << 20)
    (files / "model.safetensors").write_bytes(weights)
    http = HttpFiles(files)
    wheels = tmp_path / "wheelhouse"
    make_wheel(wheels, "gpuops_probe", "1.0", requires=["gpuops_dep>=1"])
    make_wheel(wheels, "gpuops_dep", "1.2")
    (box / "requirements.txt").write_text("gpuops_probe==1.0\n")
    (box / "data.txt").write_text("a\n")
    env = {
        "PATH": f"{smi_bin}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "HF_TOKEN": SECRET,
        "LANG": "C.UTF-8",
    }
    w = {
        "box": box,
        "home": home,
        "repo": repo,
        "sha1": sha1,
        "http": http,
        "weights": weights,
        "wheels": wheels,
        "env": env,
        "smi_bin": smi_bin,
        "tmp": tmp_path,
    }
    yield w
    http.close()


def full_config(w, installer="uv"):
    return {
        "cache_dir": str(w["tmp"] / "volume" / "cache"),
        "steps": [
            {"name": "system", "kind": "system"},
            {"name": "secrets", "kind": "secrets", "env": ["HF_TOKEN"]},
            {
                "name": "deps",
                "kind": "deps",
                "installer": installer,
                "requirements": "requirements.txt",
                "wheelhouse": str(w["wheels"]),
                "venv": ".venv",
            },
            {"name": "code", "kind": "code", "repo": str(w["repo"]), "ref": "main", "dest": "code"},
            {
                "name": "weights",
                "kind": "weights",
                "source": w["http"].url + "/model.safetensors",
                "sha256": hashlib.sha256(w["weights"]).hexdigest(),
            },
            {"name": "verify", "kind": "verify", "expect": {"bandwidth_gb_s": 3350, "bf16_tflops": 989}},
            {
                "name": "prep",
                "kind": "run",
                "command": "wc -l < data.txt > lines.txt; echo token=$HF_TOKEN",
                "inputs": ["data.txt"],
            },
            {
                "name": "probe",
                "kind": "run",
                "command": ".venv/bin/python -c 'import gpuops_probe, gpuops_dep; print(gpuops_probe.VERSION)'",
            },
        ],
    }


def run_bootstrap(w, config, extra_env=None):
    cfg = w["box"] / "bootstrap.json"
    cfg.write_text(json.dumps(config))
    env = dict(w["env"], **(extra_env or {}))
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, str(RUNNER), "--config", str(cfg), "--state-dir", str(w["box"] / "state")],
        cwd=w["box"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    return p, lines, time.monotonic() - t0


def statuses(lines):
    return {x["step"]: x["status"] for x in lines if "step" in x}


def test_first_run_does_everything_and_second_run_skips_every_step(world):
    """How fast the unchanged re-run is lives in bench/bench_bootstrap.py (its floor: under 2 s),
    measured there interleaved; here only what it does."""
    w = world
    p, lines, _ = run_bootstrap(w, full_config(w))
    assert p.returncode == 0, p.stdout + p.stderr
    assert statuses(lines) == {
        k: "done" for k in ("system", "secrets", "deps", "code", "weights", "verify", "prep", "probe")
    }
    by = {x["step"]: x for x in lines if "step" in x}
    assert set(by["deps"]) == {"step", "status", "seconds", "detail"}
    assert by["system"]["detail"]["gpus"] == [
        {"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "memory_used_mib": 0, "utilization_gpu_percent": 0}
    ]
    assert by["system"]["detail"]["driver"] == "550.54.15" and by["system"]["detail"]["cuda"] == "12.4"
    assert by["deps"]["detail"]["installer"] == "uv"
    assert by["code"]["detail"]["commit"] == w["sha1"]
    assert (w["box"] / "code" / "train.py").read_text() == "print('v1')\n"
    cached = w["tmp"] / "volume" / "cache" / "weights" / "weights" / "model.safetensors"
    assert cached.read_bytes() == w["weights"]
    assert by["weights"]["detail"]["bytes"] == 3 << 20 and by["weights"]["detail"]["warm_read_gb_s"] > 0
    assert by["verify"]["detail"]["measured"] is False  # no torch here: says so, does not fail
    assert "1.0" in p.stderr and "  | 1.0" in p.stderr  # tool output goes to stderr, prefixed
    summary = lines[-1]
    assert set(summary) == {"total_seconds", "slowest"}
    assert summary["slowest"] == max((x for x in lines if "step" in x), key=lambda x: x["seconds"])["step"]

    hits = w["http"].hits
    p2, lines2, _ = run_bootstrap(w, full_config(w))
    assert p2.returncode == 0
    assert statuses(lines2) == {
        "system": "done",
        **{k: "skipped" for k in ("secrets", "deps", "code", "weights", "verify", "prep", "probe")},
    }
    assert w["http"].hits == hits  # nothing downloaded again


def test_a_changed_input_reruns_only_its_step(world):
    w = world
    assert run_bootstrap(w, full_config(w))[0].returncode == 0
    # a file the `prep` command reads changes
    (w["box"] / "data.txt").write_text("a\nb\nc\n")
    p, lines, _ = run_bootstrap(w, full_config(w))
    assert [k for k, v in statuses(lines).items() if v == "done"] == ["system", "prep"]
    assert (w["box"] / "lines.txt").read_text().strip() == "3"
    # the branch moves on the remote
    sha2 = commit(w["repo"], {"train.py": "print('v2')\n"}, "second")
    p, lines, _ = run_bootstrap(w, full_config(w))
    assert [k for k, v in statuses(lines).items() if v == "done"] == ["system", "code"]
    assert (w["box"] / "code" / "train.py").read_text() == "print('v2')\n"
    assert [x for x in lines if x.get("step") == "code"][0]["detail"]["commit"] == sha2
    # the requirements change (a new wheel in the wheelhouse)
    make_wheel(w["wheels"], "gpuops_probe", "2.0", requires=["gpuops_dep>=1"])
    (w["box"] / "requirements.txt").write_text("gpuops_probe==2.0\n")
    cfg = full_config(w)
    p, lines, _ = run_bootstrap(w, cfg)
    assert [k for k, v in statuses(lines).items() if v == "done"] == ["system", "deps"]
    # a deleted output is noticed even though the config did not change
    (w["tmp"] / "volume" / "cache" / "weights" / "weights" / "model.safetensors").unlink()
    p, lines, _ = run_bootstrap(w, cfg)
    assert [k for k, v in statuses(lines).items() if v == "done"] == ["system", "weights"]
    # a changed secret value re-writes the token, nothing else
    p, lines, _ = run_bootstrap(w, cfg, {"HF_TOKEN": SECRET + "x"})
    assert [k for k, v in statuses(lines).items() if v == "done"] == ["system", "secrets"]


def test_a_failed_step_stops_the_run_names_it_and_runs_again_next_time(world):
    w = world
    cfg = {
        "steps": [
            {"name": "first", "kind": "run", "command": "echo 1 >> first.txt"},
            {"name": "broken", "kind": "run", "command": "test -e fixed || { echo 'no fix yet' >&2; exit 4; }"},
            {"name": "after", "kind": "run", "command": "echo after > after.txt"},
        ]
    }
    p, lines, _ = run_bootstrap(w, cfg)
    assert p.returncode == 1
    assert statuses(lines) == {"first": "done", "broken": "failed"}
    broken = [x for x in lines if x.get("step") == "broken"][0]
    assert broken["detail"] == "exited 4: no fix yet"
    assert lines[-1]["failed"] == "broken"
    assert "bootstrap: step broken failed: exited 4" in p.stderr
    assert not (w["box"] / "after.txt").exists()
    (w["box"] / "fixed").touch()
    p, lines, _ = run_bootstrap(w, cfg)
    assert p.returncode == 0
    assert statuses(lines) == {"first": "skipped", "broken": "done", "after": "done"}
    assert (w["box"] / "first.txt").read_text() == "1\n"


def test_secrets_are_written_0600_and_never_printed(world):
    w = world
    cfg = {
        "steps": [
            {"name": "secrets", "kind": "secrets", "env": ["HF_TOKEN", "WANDB_API_KEY"]},
            {
                "name": "leaky",
                "kind": "run",
                "command": "echo $HF_TOKEN; cat ~/.cache/huggingface/token; env | grep WANDB",
            },
            {"name": "fails", "kind": "run", "command": 'echo "bad token $HF_TOKEN"; exit 1'},
        ]
    }
    wandb = "wandb_key_abcdefghijklmnop"
    p, lines, _ = run_bootstrap(w, cfg, {"WANDB_API_KEY": wandb})
    assert p.returncode == 1
    for secret in (SECRET, wandb):
        assert secret not in p.stdout and secret not in p.stderr
    assert "bad token ***" in p.stdout  # the failing step's detail, scrubbed
    hf = w["home"] / ".cache" / "huggingface" / "token"
    assert hf.read_text() == SECRET and stat.S_IMODE(hf.stat().st_mode) == 0o600
    netrc = w["home"] / ".netrc"
    assert f"password {wandb}" in netrc.read_text() and stat.S_IMODE(netrc.stat().st_mode) == 0o600
    env = w["home"] / ".config" / "gpuops" / "secrets.env"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    assert f"export HF_TOKEN='{SECRET}'" in env.read_text()
    # state holds no secret either
    state = "".join(f.read_text() for f in (w["box"] / "state").iterdir() if f.name != "salt")
    assert SECRET not in state and wandb not in state
    # a secret that is not set is a named failure
    p, lines, _ = run_bootstrap(w, {"steps": [{"name": "s", "kind": "secrets", "env": ["NOPE_TOKEN"]}]})
    assert p.returncode == 1 and "NOPE_TOKEN is not set" in lines[0]["detail"]


@pytest.mark.parametrize(
    "state, expect",
    [
        (
            {
                "mode": "ok",
                "driver_version": "535.129.03",
                "cuda_version": "12.2",
                "gpus": [dict(fake_nvidia_smi.H100, name="NVIDIA A100-SXM4-80GB", memory_total_mib=81920)] * 2,
            },
            {
                "driver": "535.129.03",
                "cuda": "12.2",
                "gpus": [
                    {
                        "name": "NVIDIA A100-SXM4-80GB",
                        "memory_total_mib": 81920,
                        "memory_used_mib": 0,
                        "utilization_gpu_percent": 0,
                    }
                ]
                * 2,
            },
        ),
        (
            {
                "mode": "ok",
                "driver_version": "550.54.15",
                "cuda_version": "[N/A]",
                "gpus": [dict(fake_nvidia_smi.H100, memory_used_mib="[N/A]", utilization_gpu="[N/A]")],
            },
            {
                "driver": "550.54.15",
                "cuda": None,
                "gpus": [
                    {
                        "name": "NVIDIA H100 80GB HBM3",
                        "memory_total_mib": 81559,
                        "memory_used_mib": None,
                        "utilization_gpu_percent": None,
                    }
                ],
            },
        ),
    ],
)
def test_system_step_reads_nvidia_smi_including_na(world, state, expect):
    fake_nvidia_smi.set_state(world["smi_bin"], state)
    p, lines, _ = run_bootstrap(world, {"steps": [{"name": "system", "kind": "system"}]})
    assert p.returncode == 0
    detail = lines[0]["detail"]
    assert {k: detail[k] for k in expect} == expect


def test_system_step_fails_when_the_driver_is_gone(world):
    fake_nvidia_smi.set_state(world["smi_bin"], {"mode": "driver_failure"})
    p, lines, _ = run_bootstrap(
        world, {"steps": [{"name": "system", "kind": "system"}, {"name": "x", "kind": "run", "command": "true"}]}
    )
    assert p.returncode == 1
    assert lines[0]["status"] == "failed"
    assert lines[0]["detail"].startswith(
        "nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
    )
    assert lines[-1]["failed"] == "system"


def test_weights_sha256_mismatch_and_file_source(world):
    w = world
    src = w["tmp"] / "local weights.bin"
    src.write_bytes(b"w" * 1000)
    bad = {
        "steps": [
            {
                "name": "w",
                "kind": "weights",
                "source": w["http"].url + "/model.safetensors",
                "sha256": "0" * 64,
                "dest": "wdir",
            }
        ]
    }
    p, lines, _ = run_bootstrap(w, bad)
    assert p.returncode == 1 and lines[0]["detail"].startswith("sha256 mismatch")
    assert not (w["box"] / "wdir" / "model.safetensors").exists()
    good = {
        "steps": [
            {
                "name": "w",
                "kind": "weights",
                "source": "file://" + str(src),
                "dest": "wdir",
                "sha256": hashlib.sha256(b"w" * 1000).hexdigest(),
            }
        ]
    }
    assert run_bootstrap(w, good)[0].returncode == 0
    assert (w["box"] / "wdir" / "local weights.bin").read_bytes() == b"w" * 1000
    assert statuses(run_bootstrap(w, good)[1]) == {"w": "skipped"}
    src.write_bytes(b"v" * 1001)  # the source file changed: fetch again (and the pinned sha now fails)
    p, lines, _ = run_bootstrap(w, good)
    assert statuses(lines) == {"w": "failed"}


def test_deps_with_pip_from_the_wheelhouse(world):
    w = world
    cfg = {
        "steps": [
            {
                "name": "deps",
                "kind": "deps",
                "installer": "pip",
                "packages": ["gpuops_probe"],
                "wheelhouse": str(w["wheels"]),
                "venv": "pipvenv",
            },
            {"name": "probe", "kind": "run", "command": "pipvenv/bin/python -c 'import gpuops_dep; print(1)'"},
        ]
    }
    p, lines, _ = run_bootstrap(w, cfg)
    assert p.returncode == 0, p.stderr
    assert lines[0]["detail"]["installer"] == "pip"


def test_bad_config_is_named(world):
    p, lines, _ = run_bootstrap(
        world, {"steps": [{"name": "a", "kind": "run", "command": "true"}, {"name": "a", "kind": "system"}]}
    )
    assert p.returncode == 2 and "unique name" in lines[0]["detail"]
    p, lines, _ = run_bootstrap(world, {"steps": [{"name": "x", "kind": "teleport"}]})
    assert p.returncode == 1 and lines[0]["detail"].startswith("unknown step kind 'teleport'")


def test_code_that_runs_on_the_box_parses_as_python_3_8():
    import ast

    box_code = sorted(p.name for p in (REPO / "onbox").glob("*.py"))
    assert {"agent.py", "bootstrap.py", "jobwrap.py", "localbox.py", "policy.py"} <= set(box_code)
    refused = {}
    for name in box_code:
        try:
            ast.parse((REPO / "onbox" / name).read_text(), feature_version=(3, 8))
        except SyntaxError as e:
            refused[name] = f"line {e.lineno}: {e.msg}"
    assert refused == {}


def test_system_step_keeps_the_rows_when_nvidia_smi_only_warns(world):
    fake_nvidia_smi.set_state(world["smi_bin"], dict(fake_nvidia_smi.DEFAULT_STATE, **fake_nvidia_smi.INFOROM))
    p, lines, _ = run_bootstrap(world, {"steps": [{"name": "system", "kind": "system"}]})
    assert p.returncode == 0, p.stderr
    by = {x["step"]: x for x in lines if "step" in x}
    assert by["system"]["status"] == "done"
    d = by["system"]["detail"]
    assert d["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3" and d["gpus"][0]["memory_total_mib"] == 81559
    assert d["warning"] == "nvidia-smi exited 14: WARNING: infoROM is corrupted at gpu 0000:18:00.0"
    assert d["driver"] == "550.54.15" and d["cuda"] == "12.4"
    fake_nvidia_smi.set_state(world["smi_bin"], dict(fake_nvidia_smi.DEFAULT_STATE, mode="driver_failure"))
    p, lines, _ = run_bootstrap(world, {"steps": [{"name": "system", "kind": "system"}]})
    assert {x["step"]: x["status"] for x in lines if "step" in x}["system"] == "failed"  # no rows: still a failure


def test_the_standard_steps_wait_only_for_what_they_need():
    from onbox import bootstrap as runner

    kinds = ["system", "secrets", "deps", "code", "weights", "weights", "verify", "run"]
    names = ["system", "secrets", "deps", "code", "w1", "w2", "verify", "command 1"]
    steps = [{"name": n, "kind": k} for n, k in zip(names, kinds)]
    waits = dict(zip(names, runner._waits(steps, names)))
    assert waits["deps"] == waits["code"] == waits["w1"] == waits["w2"] == ["system", "secrets"]
    assert waits["verify"] == names[:6] and waits["command 1"] == names[:7]
    steps[3]["after"] = ["deps"]  # a step's own waits, and a kind of its own made concurrent
    steps.append({"name": "resume", "kind": "run", "concurrent": True})
    waits = dict(zip(names + ["resume"], runner._waits(steps, names + ["resume"])))
    assert waits["code"] == ["system", "secrets", "deps"]
    assert waits["resume"] == [
        "system",
        "secrets",
        "verify",
        "command 1",
    ]  # the barriers before it (they waited for the rest)


def test_independent_steps_run_at_once_and_a_failure_stops_the_others(world):
    w = world
    mark = "python3 -c 'import time; print(time.time())' >"
    cfg = {
        "steps": [
            {"name": "a", "kind": "run", "concurrent": True, "command": f"{mark} a.start; sleep 1; {mark} a.end"},
            {"name": "b", "kind": "run", "concurrent": True, "command": f"{mark} b.start; sleep 1; {mark} b.end"},
            {"name": "after", "kind": "run", "command": f"{mark} after.start"},
        ]
    }
    p, lines, _ = run_bootstrap(w, cfg)
    assert p.returncode == 0, p.stderr
    t = {f.name: float(f.read_text()) for f in w["box"].glob("*.start")} | {
        f.name: float(f.read_text()) for f in w["box"].glob("*.end")
    }
    assert t["a.start"] < t["b.end"] and t["b.start"] < t["a.end"]  # they overlapped
    assert t["after.start"] >= max(t["a.end"], t["b.end"])  # the barrier waited for both
    by = {x["step"]: x for x in lines if "step" in x}
    assert (
        by["a"]["seconds"] >= 1.0
        and by["b"]["seconds"] >= 1.0
        and lines[-1]["total_seconds"] < by["a"]["seconds"] + by["b"]["seconds"]
    )

    cfg = {
        "steps": [
            {"name": "slow", "kind": "run", "concurrent": True, "command": "echo $$ > slow.pid; exec sleep 120"},
            {
                "name": "broken",
                "kind": "run",
                "concurrent": True,
                "command": "while [ ! -s slow.pid ]; do sleep 0.05; done; exit 3",
            },
            {"name": "later", "kind": "run", "command": "touch later.txt"},
        ]
    }
    p, lines, secs = run_bootstrap(w, cfg)
    assert p.returncode == 1
    by = {x["step"]: x for x in lines if "step" in x}
    assert (by["broken"]["status"], by["broken"]["detail"]) == ("failed", "exited 3")
    assert (by["slow"]["status"], by["slow"]["detail"]) == ("stopped", "stopped: another step failed")
    assert (
        lines[-1]["failed"] == "broken" and lines[-1]["stopped"] == ["slow"] and lines[-1]["not_started"] == ["later"]
    )
    assert secs < 60  # the sleep 120 was ended, not waited for
    slow_pid = int((w["box"] / "slow.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(slow_pid, 0)
    assert not (w["box"] / "later.txt").exists()
    p, lines, _ = run_bootstrap(w, dict(cfg, steps=[cfg["steps"][0] | {"command": "true"}, cfg["steps"][2]]))
    assert p.returncode == 0 and statuses(lines) == {
        "slow": "done",
        "later": "done",
    }  # the stopped step was not booked done


def test_a_venv_reuses_what_the_image_already_has(world):
    """The deps venv sees the image's site-packages, and uv is told not to install a requirement the
    image meets (here pip, which every CPython image has; the wheelhouse has none, so installing it
    would fail): a GPU image's torch is used as it is, not downloaded again."""
    w = world
    base = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True
    ).stdout.strip()
    have = subprocess.run(
        [os.path.join(base, "bin", "python3"), "-c", "import pip; print(pip.__version__)"],
        capture_output=True,
        text=True,
    )
    assert have.returncode == 0, "the test needs pip in the base interpreter"
    cfg = {
        "steps": [
            {
                "name": "deps",
                "kind": "deps",
                "installer": "uv",
                "packages": ["pip>=1", "gpuops_probe==1.0"],
                "wheelhouse": str(w["wheels"]),
                "venv": ".venv",
            }
        ]
    }
    p, lines, _ = run_bootstrap(w, cfg)
    assert p.returncode == 0, p.stdout + p.stderr
    d = lines[0]["detail"]
    assert d["reused"] == [f"pip=={have.stdout.strip()}"]
    site = list((w["box"] / ".venv" / "lib").glob("python3*/site-packages"))[0]
    assert (site / "gpuops_probe").exists() and not (site / "pip").exists()
    out = subprocess.run(
        [str(w["box"] / ".venv/bin/python"), "-c", "import pip, gpuops_probe; print(pip.__file__)"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and out.stdout.startswith(base), out.stderr
