"""The bootstrap `weights` step against the stand-in hub on 127.0.0.1 (HF_ENDPOINT): the real
huggingface_hub client fetches a small model cold, skips it warm (the pinned revision already in the
cache on the volume), resumes an interrupted download, and fails clearly for a wrong revision or a
gated repo without a token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hub_faults import FaultyHub

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20
WEIGHTS = os.urandom(16 * MIB)  # > huggingface_hub's 10 MB write chunk, so a cut download leaves bytes to resume from
FILES = {"config.json": {"model_type": "llama", "hidden_size": 64}, "model.safetensors": WEIGHTS, "tokenizer.json": {"v": 1},
         "README.md": "not fetched: outside allow_patterns"}
PATTERNS = ["*.json", "*.safetensors"]
FETCHED = len(json.dumps(FILES["config.json"])) + len(WEIGHTS) + len(json.dumps(FILES["tokenizer.json"]))


@pytest.fixture
def hub():
    with FaultyHub() as h:
        yield h


def bootstrap(tmp_path, hub, source, state="state1", token=None, timeout=None, patterns=PATTERNS, stale_s=None):
    """Run the real runner (its own process, as on a box) with one weights step; the volume's cache
    is ``tmp_path/volume/.cache/gpuops``. Returns the step line."""
    step = {"name": "weights", "kind": "weights", "source": source, "allow_patterns": patterns}
    if timeout:
        step["timeout"] = timeout
    if stale_s is not None:
        step["stale_incomplete_s"] = stale_s
    cfg = tmp_path / "bootstrap.json"
    cfg.write_text(json.dumps({"cache_dir": str(tmp_path / "volume/.cache/gpuops"), "steps": [step]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub.endpoint, HOME=str(tmp_path / "home"), PYTHONPATH="")
    if token:
        env["HF_TOKEN"] = token
    p = subprocess.run([sys.executable, str(REPO / "bootstrap/bootstrap.py"), "--config", str(cfg), "--state-dir", str(tmp_path / state)],
                       env=env, capture_output=True, text=True, timeout=120)
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    return next(ln for ln in lines if ln.get("step") == "weights"), p


def snapshot(tmp_path, sha):
    return tmp_path / "volume/.cache/gpuops/huggingface/hub/models--gpuops-test--tiny/snapshots" / sha


def test_cold_fetch_then_warm_skip_on_a_fresh_box(tmp_path, hub):
    sha = hub.add_repo("gpuops-test/tiny", FILES)
    line, p = bootstrap(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}")
    assert line["status"] == "done", p.stderr
    d = line["detail"]
    assert (d["cache"], d["bytes"], d["files"], d["revision"]) == ("miss", FETCHED, 3, sha)
    assert d["seconds"] > 0 and d["path"] == str(snapshot(tmp_path, sha))
    assert (snapshot(tmp_path, sha) / "model.safetensors").read_bytes() == WEIGHTS
    assert not (snapshot(tmp_path, sha) / "README.md").exists()
    before = len(hub.requests)
    # A fresh box (new state dir, so the runner's own fingerprint is gone) with the same volume.
    line, p = bootstrap(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}", state="state2")
    assert line["status"] == "skipped", p.stderr
    assert (line["detail"]["cache"], line["detail"]["bytes"], line["detail"]["downloaded_bytes"]) == ("hit", FETCHED, 0)
    assert len(hub.requests) == before  # not one request to the hub
    # Other allow-patterns are another download (README now included).
    line, _ = bootstrap(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}", state="state3", patterns=["*"])
    assert line["status"] == "done" and line["detail"]["files"] == 4


def test_unpinned_revision_fetches_and_says_how_to_pin(tmp_path, hub):
    sha = hub.add_repo("gpuops-test/tiny", FILES)
    line, p = bootstrap(tmp_path, hub, "hf://gpuops-test/tiny")
    assert line["status"] == "done", p.stderr
    assert line["detail"]["revision"] == sha and f"@{sha}" in line["detail"]["warning"]


def test_a_dropped_download_resumes_where_it_stopped(tmp_path, hub):
    sha = hub.add_repo("gpuops-test/tiny", FILES)
    hub.drop_path, hub.drop_after, hub.drop_times = "model.safetensors", 11 * MIB, 1
    line, p = bootstrap(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}")
    assert line["status"] == "done", p.stderr
    gets = [r for r in hub.requests if r[0] == "GET" and r[1].endswith("model.safetensors")]
    assert len(gets) == 2 and gets[1][2] is not None and gets[1][2].startswith("bytes=") and int(gets[1][2][6:].split("-")[0]) >= 10 * MIB
    assert (snapshot(tmp_path, sha) / "model.safetensors").read_bytes() == WEIGHTS


def test_a_killed_download_completes_on_the_next_run_and_frees_its_partial(tmp_path, hub):
    import signal
    import time

    sha = hub.add_repo("gpuops-test/tiny", FILES)
    hub.rate_bytes_s = 2 * MIB  # 8 s for the 16 MiB file: the box is lost mid-download
    cfg = tmp_path / "bootstrap.json"
    step = {"name": "weights", "kind": "weights", "source": f"hf://gpuops-test/tiny@{sha}", "allow_patterns": PATTERNS}
    cfg.write_text(json.dumps({"cache_dir": str(tmp_path / "volume/.cache/gpuops"), "steps": [step]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub.endpoint, HOME=str(tmp_path / "home"), PYTHONPATH="")
    proc = subprocess.Popen([sys.executable, str(REPO / "bootstrap/bootstrap.py"), "--config", str(cfg), "--state-dir", str(tmp_path / "s0")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    blobs = tmp_path / "volume/.cache/gpuops/huggingface/hub/models--gpuops-test--tiny/blobs"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait for 10 MiB on disk (huggingface_hub writes 10 MB chunks)
            part = [f for f in blobs.glob("*.incomplete")] if blobs.exists() else []
            if part and part[0].stat().st_size >= 10 * MIB:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the download never wrote 10 MiB")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the box (runner and its download) is gone at once
        proc.wait(timeout=30)
    kept = part[0].stat().st_size
    hub.rate_bytes_s = None
    # huggingface_hub 2.4.0 downloads to a process-unique temporary file (PR 4228): a new process
    # restarts the file. The next run completes it and frees the dead run's partial blob.
    line, p = bootstrap(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}", stale_s=0)
    assert line["status"] == "done", p.stderr
    assert line["detail"]["stale_incomplete_bytes_removed"] == kept
    assert not list(blobs.glob("*.incomplete"))
    assert (snapshot(tmp_path, sha) / "model.safetensors").read_bytes() == WEIGHTS


def test_wrong_revision_is_a_clear_error(tmp_path, hub):
    hub.add_repo("gpuops-test/tiny", FILES)
    line, _ = bootstrap(tmp_path, hub, "hf://gpuops-test/tiny@" + "0" * 40)
    assert line["status"] == "failed"
    assert line["detail"] == f"revision {'0' * 40!r} of gpuops-test/tiny is not on the hub: fix the @revision in [bootstrap] weights (a commit sha pins it)"


def test_gated_repo_needs_the_token(tmp_path, hub):
    sha = hub.add_repo("gpuops-test/tiny", FILES, gated=True)
    line, _ = bootstrap(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}")
    assert line["status"] == "failed"
    assert line["detail"].startswith("gpuops-test/tiny is gated: add HF_TOKEN to [bootstrap] secrets") and "no HF_TOKEN was given" in line["detail"]
    line, p = bootstrap(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}", token="hf_test_token_123")
    assert line["status"] == "done", p.stderr
