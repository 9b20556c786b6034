"""The bootstrap `weights` step against the stand-in hub on 127.0.0.1 (HF_ENDPOINT): the real
huggingface_hub client fetches a small model cold, skips it warm (the pinned revision already in the
cache on the volume), resumes an interrupted download, and fails clearly for a wrong revision or a
gated repo without a token."""

from __future__ import annotations

import hashlib
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
FILES = {
    "config.json": {"model_type": "llama", "hidden_size": 64},
    "model.safetensors": WEIGHTS,
    "tokenizer.json": {"v": 1},
    "README.md": "not fetched: outside allow_patterns",
}
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
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "onbox/bootstrap.py"),
            "--config",
            str(cfg),
            "--state-dir",
            str(tmp_path / state),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
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
    assert (
        len(gets) == 2
        and gets[1][2] is not None
        and gets[1][2].startswith("bytes=")
        and int(gets[1][2][6:].split("-")[0]) >= 10 * MIB
    )
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
    proc = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "onbox/bootstrap.py"),
            "--config",
            str(cfg),
            "--state-dir",
            str(tmp_path / "s0"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
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
    assert (
        line["detail"]
        == f"revision {'0' * 40!r} of gpuops-test/tiny is not on the hub: fix the @revision in [bootstrap] weights (a commit sha pins it)"
    )


def test_gated_repo_needs_the_token(tmp_path, hub):
    sha = hub.add_repo("gpuops-test/tiny", FILES, gated=True)
    line, _ = bootstrap(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}")
    assert line["status"] == "failed"
    assert (
        line["detail"].startswith("gpuops-test/tiny is gated: add HF_TOKEN to [bootstrap] secrets")
        and "no HF_TOKEN was given" in line["detail"]
    )
    line, p = bootstrap(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}", token="hf_test_token_123")
    assert line["status"] == "done", p.stderr


def ranged(tmp_path, hub, source, state="r1", workers=4, **extra):
    """The weights step with the standard library's parallel ranges (what a fresh box uses while
    its deps venv is still being built)."""
    step = {
        "name": "weights",
        "kind": "weights",
        "source": source,
        "allow_patterns": PATTERNS,
        "downloader": "ranged",
        "workers": workers,
        **extra,
    }
    cfg = tmp_path / f"{state}.json"
    cfg.write_text(json.dumps({"cache_dir": str(tmp_path / "volume/.cache/gpuops"), "steps": [step]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub.endpoint, HOME=str(tmp_path / "home"), PYTHONPATH="")
    return [
        sys.executable,
        str(REPO / "onbox/bootstrap.py"),
        "--config",
        str(cfg),
        "--state-dir",
        str(tmp_path / state),
    ], env


def run_ranged(tmp_path, hub, source, **kw):
    argv, env = ranged(tmp_path, hub, source, **kw)
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    return next(ln for ln in lines if ln.get("step") == "weights"), p


def weight_gets(hub):
    return [r for r in hub.requests if r[0] == "GET" and r[1].endswith("model.safetensors")]


def test_ranged_download_fills_the_cache_that_huggingface_hub_reads_offline(tmp_path, hub):
    from huggingface_hub import hf_hub_download, snapshot_download

    sha = hub.add_repo("gpuops-test/tiny", FILES)
    line, p = run_ranged(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}")
    assert line["status"] == "done", p.stderr
    d = line["detail"]
    assert (d["downloader"], d["bytes"], d["downloaded_bytes"], d["files"], d["revision"]) == (
        "ranged",
        FETCHED,
        FETCHED,
        3,
        sha,
    )
    ranges = sorted(int(r[2][6:].split("-")[0]) for r in weight_gets(hub) if r[2] and r[2] != "bytes=0-0")
    assert ranges == [i * MIB for i in range(16)]  # 16 ranges of 1 MiB, spread over the 4 workers
    cache = tmp_path / "volume/.cache/gpuops/huggingface/hub"
    blob = cache / "models--gpuops-test--tiny/blobs" / hashlib.sha256(WEIGHTS).hexdigest()
    assert blob.read_bytes() == WEIGHTS and (snapshot(tmp_path, sha) / "model.safetensors").resolve() == blob
    # The job's own huggingface_hub finds every file offline, at the blob names it would have used.
    got = hf_hub_download(
        "gpuops-test/tiny", "model.safetensors", revision=sha, cache_dir=str(cache), local_files_only=True
    )
    assert Path(got).read_bytes() == WEIGHTS
    assert snapshot_download(
        "gpuops-test/tiny", revision=sha, cache_dir=str(cache), local_files_only=True, allow_patterns=PATTERNS
    ) == str(snapshot(tmp_path, sha))
    assert not list(cache.rglob("*.gpuops-part*"))
    before = len(hub.requests)  # a fresh box on the same volume: the marker says complete, no request
    line, _ = run_ranged(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}", state="r2")
    assert line["status"] == "skipped" and len(hub.requests) == before
    line, _ = run_ranged(
        tmp_path, hub, "hf://gpuops-test/tiny", state="r3"
    )  # unpinned: the ref is written as the hub's client does
    assert line["status"] == "done" and line["detail"]["downloaded_bytes"] == 0  # every blob was already there
    assert (cache / "models--gpuops-test--tiny/refs/main").read_text() == sha


def test_ranged_download_resumes_a_dropped_range_and_refuses_a_wrong_one(tmp_path, hub):
    sha = hub.add_repo("gpuops-test/tiny", FILES)
    hub.drop_path, hub.drop_after, hub.drop_times = "model.safetensors", 300_000, 2
    line, p = run_ranged(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}")
    assert line["status"] == "done", p.stderr
    assert (snapshot(tmp_path, sha) / "model.safetensors").read_bytes() == WEIGHTS
    retried = [
        r[2] for r in weight_gets(hub) if r[2] and not r[2].endswith(f"-{int(r[2][6:].split('-')[0]) + MIB - 1}")
    ]
    assert any(
        int(r[6:].split("-")[0]) % MIB == 300_000 for r in retried
    )  # picked up inside the range, not from its start
    # A hub whose bytes do not match the sha256 it listed: the file never reaches the cache.
    hub.add_repo("gpuops-test/bad", FILES)
    good, send = hashlib.sha256(WEIGHTS).hexdigest(), hub._send
    hub._send = lambda req, status, body, headers, head: send(
        req, status, body.replace(good.encode(), b"0" * 64), headers, head
    )
    line, _ = run_ranged(tmp_path, hub, "hf://gpuops-test/bad", state="bad")
    assert line["status"] == "failed" and line["detail"].startswith("sha256 mismatch for ")
    assert line["detail"].endswith(f"expected {'0' * 64}, got {good}")
    assert not list(
        (tmp_path / "volume/.cache/gpuops/huggingface/hub/models--gpuops-test--bad/blobs").glob("0" * 64 + "*")
    )


def test_a_killed_ranged_download_resumes_its_written_ranges(tmp_path, hub):
    import signal
    import time

    sha = hub.add_repo("gpuops-test/tiny", FILES)
    hub.link_bytes_s = 2 * MIB  # 8 s for the file: the box is lost mid-download
    argv, env = ranged(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}", state="k0")
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    side = (
        tmp_path
        / "volume/.cache/gpuops/huggingface/hub/models--gpuops-test--tiny/blobs"
        / (hashlib.sha256(WEIGHTS).hexdigest() + ".gpuops-part.json")
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if len(json.loads(side.read_text())["done"]) >= 4:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        else:
            pytest.fail("the download never wrote 4 ranges")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    kept = {a for a, _ in json.loads(side.read_text())["done"]}
    hub.link_bytes_s = None
    n0 = len(hub.requests)
    line, p = run_ranged(tmp_path, hub, f"hf://gpuops-test/tiny@{sha}", state="k1")
    assert line["status"] == "done", p.stderr
    # From the new run's file list on: the killed run's last requests, sent before the kill, may reach the hub after n0.
    n1 = next(i for i in range(n0, len(hub.requests)) if hub.requests[i][1].startswith("/api/models/"))
    asked = [
        int(r[2][6:].split("-")[0])
        for r in hub.requests[n1:]
        if r[0] == "GET" and r[1].endswith("model.safetensors") and r[2] and r[2] != "bytes=0-0"
    ]
    # only the ranges the killed run had not finished; as a set: under load a request the killed run
    # sent before the kill may still be logged by the hub after the new run began (each range once
    # for the new run is what downloaded_bytes below asserts)
    assert set(asked) == set(range(0, len(WEIGHTS), MIB)) - kept
    left = len(WEIGHTS) - len(kept) * MIB
    assert (
        left <= line["detail"]["downloaded_bytes"] <= left + FETCHED - len(WEIGHTS)
    )  # (+ the small files the killed run had not got to)
    assert (snapshot(tmp_path, sha) / "model.safetensors").read_bytes() == WEIGHTS


def test_a_fresh_box_downloads_beside_its_deps_with_ranges(tmp_path, hub):
    """The hf step names the deps venv's python (as `up` writes it): that venv is being built
    beside the download, so the weights come by the standard library's ranges at once."""
    from tests.support.wheels import make_wheel

    sha = hub.add_repo("gpuops-test/tiny", FILES)
    wh = tmp_path / "wheelhouse"
    make_wheel(wh, "gpuops_probe", "1.0")
    steps = [
        {
            "name": "deps",
            "kind": "deps",
            "installer": "pip",
            "packages": ["gpuops_probe"],
            "wheelhouse": str(wh),
            "venv": "venv",
        },
        {
            "name": "weights",
            "kind": "weights",
            "source": f"hf://gpuops-test/tiny@{sha}",
            "allow_patterns": PATTERNS,
            "python": "venv/bin/python",
        },
    ]
    box = tmp_path / "box"
    box.mkdir()
    (box / "b.json").write_text(json.dumps({"cache_dir": str(tmp_path / "volume/.cache/gpuops"), "steps": steps}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub.endpoint, HOME=str(tmp_path / "home"), PYTHONPATH="")
    p = subprocess.run(
        [sys.executable, str(REPO / "onbox/bootstrap.py"), "--config", "b.json", "--state-dir", "state"],
        cwd=box,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    by = {ln["step"]: ln for ln in map(json.loads, p.stdout.splitlines()) if "step" in ln}
    assert by["weights"]["detail"]["downloader"] == "ranged" and by["deps"]["status"] == "done"
    assert (snapshot(tmp_path, sha) / "model.safetensors").read_bytes() == WEIGHTS
