"""[bootstrap] settings -> plan -> run on a box over real SSH -> detached job -> results -> logs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpuops.agent.bootstrap_config import CONFIG_PATH, build_bootstrap_plan, run_bootstrap_plan
from gpuops.agent.jobio import copy_results, follow_log, start_job
from gpuops.catalog import resolve_cards
from gpuops.config import Settings, load_settings, settings_from
from gpuops.errors import BadInput
from tests.support.servers import HttpFiles, make_repo
from tests.support.wheels import make_wheel

SECRET = "hf_flowSecret_9f8e7d6c5b4a"


def settings_with(tmp_path, **bootstrap) -> Settings:
    return settings_from({"data_dir": str(tmp_path / "data"), "bootstrap": bootstrap})


def test_plan_from_settings_orders_steps_and_carries_catalog_figures(tmp_path):
    (tmp_path / "req.txt").write_text("x\n")
    s = settings_with(
        tmp_path,
        requirements="req.txt",
        packages=["y==1"],
        repo="https://example.invalid/r.git",
        ref="v1",
        secrets=["HF_TOKEN"],
        weights=["hf://org/model@abc", {"source": "https://h.invalid/w.bin", "sha256": "A" * 64}],
        commands=["nvidia-smi", "echo hi"],
        steps=[{"name": "extra", "kind": "run", "command": "true"}],
    )
    card = resolve_cards("h100")[0]
    plan = build_bootstrap_plan(s, card=card, volume_path="/workspace", environ={"HF_TOKEN": SECRET}, base_dir=tmp_path)
    steps = plan.config["steps"]
    assert [x["name"] for x in steps] == [
        "system",
        "secrets",
        "deps",
        "code",
        "weights:org/model",
        "weights:w.bin",
        "verify",
        "command 1",
        "command 2",
        "extra",
    ]
    assert plan.config["cache_dir"] == "/workspace/.cache/gpuops"
    assert steps[2] == {
        "name": "deps",
        "kind": "deps",
        "installer": "auto",
        "requirements": ".gpuops/requirements.txt",
        "packages": ["y==1"],
    }
    assert steps[5]["sha256"] == "a" * 64
    assert steps[6]["expect"] == {
        "card": card.name,
        "bandwidth_gb_s": card.bandwidth_bytes_s / 1e9,
        "bf16_tflops": card.bf16_flops / 1e12,
    }
    assert plan.env == {"HF_TOKEN": SECRET}
    assert SECRET not in json.dumps(plan.config)  # the config names secrets, never holds them
    assert (tmp_path / "req.txt", ".gpuops/requirements.txt") in plan.files
    assert plan.command() == (
        "echo $$ > .gpuops/bootstrap.pid && exec python3 .gpuops/onbox/bootstrap.py "
        "--config .gpuops/bootstrap.json --state-dir .gpuops/bootstrap-state"
    )  # the agent sees it run


def test_plan_refuses_bad_input_before_anything_is_rented(tmp_path):
    with pytest.raises(BadInput, match="HF_TOKEN is not set"):
        build_bootstrap_plan(settings_with(tmp_path, secrets=["HF_TOKEN"]), environ={})
    with pytest.raises(BadInput, match="requirements file nope.txt not found"):
        build_bootstrap_plan(settings_with(tmp_path, requirements="nope.txt"), environ={}, base_dir=tmp_path)
    with pytest.raises(BadInput, match="ref is set but repo is not"):
        build_bootstrap_plan(settings_with(tmp_path, ref="main"), environ={})
    bad = tmp_path / "infra.toml"
    for text, where in (
        ('[bootstrap]\nweights = ["s3://b/m"]\n', "bootstrap.weights.0.source"),
        ('[job]\nresults = "../up"\n', "job.results"),
        ('[bootstrap]\nsecrets = ["HF TOKEN"]\n', "bootstrap.secrets"),
        ('[bootstrap]\nrepoo = "x"\n', "bootstrap.repoo"),
    ):
        bad.write_text(text)
        with pytest.raises(BadInput) as e:
            load_settings(str(bad), env={})
        assert "infra.toml" in str(e.value) and f": {where}: " in str(e.value)


def test_bootstrap_then_detached_job_over_real_ssh(sshd, make_box, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    sha = make_repo(
        repo,
        {
            "job.py": "import gpuops_probe, os\nos.makedirs('out', exist_ok=True)\n"
            "open('out/result.json', 'w').write('{\"v\": \"%s\"}' % gpuops_probe.VERSION)\n"
            "print('job ran', gpuops_probe.VERSION)\n"
        },
    )
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "gpuops_probe", "1.0")
    served = tmp_path / "served"
    served.mkdir()
    (served / "w.bin").write_bytes(b"\x01" * 4096)
    http = HttpFiles(served)
    (tmp_path / "requirements.txt").write_text("gpuops_probe\n")
    try:
        s = settings_with(
            tmp_path,
            requirements="requirements.txt",
            wheelhouse=str(wheels),
            venv=".venv",
            repo=str(repo),
            ref="main",
            secrets=["HF_TOKEN"],
            weights=[http.url + "/w.bin"],
            commands=["test -s ~/.cache/huggingface/token"],
        )
        plan = build_bootstrap_plan(s, card=resolve_cards("h100")[0], environ={"HF_TOKEN": SECRET}, base_dir=tmp_path)
        box = make_box(sshd)
        seen: list[dict] = []
        logs: list[str] = []
        res = run_bootstrap_plan(box, plan, on_step=seen.append, on_line=logs.append)
        assert res.rc == 0, logs
        # One line per step as it ends: deps, code and weights run at once, so they end in any order.
        assert sorted(x["step"] for x in seen) == sorted(x["name"] for x in plan.config["steps"])
        assert [x["step"] for x in seen][:2] == ["system", "secrets"]
        assert {x["status"] for x in seen} == {"done"}
        assert res.summary["slowest"] in {x["step"] for x in seen} and res.failed is None
        code = [x for x in seen if x["step"] == "code"][0]
        assert code["detail"]["commit"] == sha
        assert SECRET not in "\n".join(logs) + json.dumps(seen)
        assert json.loads(box.read_file(CONFIG_PATH))["steps"][0]["kind"] == "system"
        t0 = time.monotonic()
        again = run_bootstrap_plan(box, plan)
        assert again.rc == 0 and time.monotonic() - t0 < 3
        assert {x["step"]: x["status"] for x in again.steps} == {
            **{x["name"]: "skipped" for x in plan.config["steps"]},
            "system": "done",
        }

        start_job(box, "cd code && ../.venv/bin/python job.py && mv out ..", env={"HF_TOKEN": SECRET})
        got = bytearray()
        _, ended = follow_log(box, got.extend, follow=True, deadline=time.monotonic() + 30)
        assert ended is not None and ended.code == 0
        assert bytes(got) == b"job ran 1.0\n"
        dest = copy_results(box, s.job.results, tmp_path / "results" / "s1")
        assert dest is not None and json.loads((dest / "result.json").read_text()) == {"v": "1.0"}
        assert copy_results(box, "nothing/", tmp_path / "results" / "none") is None
    finally:
        http.close()


def test_logs_show_a_running_local_job_then_the_kept_copy(tmp_path, monkeypatch):
    from gpuops.agent.bootstrap_config import RUNNER_DIR, RUNNER_SOURCE
    from gpuops.box.local import LocalBox
    from gpuops.providers.base import CreateSpec, OfferQuery
    from gpuops.providers.local.compute import LocalProvider
    from gpuops.rental.logs import show_logs
    from ledger.store import Ledger

    s = settings_from({"data_dir": str(tmp_path / "data")})
    prov = LocalProvider(s.data_path() / "boxes")
    offer = prov.offers(OfferQuery())[0]
    inst = prov.create(offer, CreateSpec(label="gpuops-20261129-1700-abcd"))
    ledger = Ledger(s.ledger_url())
    ledger.add_session(
        dict(
            id="20261129-1700-abcd",
            provider="local",
            label=inst.label,
            instance_id=inst.id,
            status="running",
            created_at=time.time(),
        )
    )
    box = LocalBox(Path(inst.extra["local_root"]))
    box.put(RUNNER_SOURCE, RUNNER_DIR)
    start_job(box, "echo first; sleep 1; echo second; exit 2")
    out = bytearray()
    assert show_logs(s, "20261129-1700", follow=True, write=out.extend) == 2
    assert bytes(out) == b"first\nsecond\n"
    with pytest.raises(BadInput, match="no session"):
        show_logs(s, "1999", follow=False, write=out.extend)
    prov.destroy(inst.id)
    kept = tmp_path / "kept.log"
    kept.write_bytes(b"first\nsecond\n")
    ledger.close("20261129-1700-abcd", time.time(), "job_end", exit_code=2, log_path=str(kept))
    out2 = bytearray()
    assert show_logs(s, "20261129", follow=False, write=out2.extend) == 2 and bytes(out2) == b"first\nsecond\n"
