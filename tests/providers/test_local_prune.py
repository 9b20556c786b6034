"""Destroyed local boxes keep their logs and lose the rest after [providers.local] keep_box_days,
pruned at destroy time in a bounded sweep, never following a link out of the box."""

from __future__ import annotations

import json
import os
import time

from gpuops.providers.local.boxes import DAY_S, prune_box, sweep
from gpuops.providers.local.compute import LocalProvider

NOW = time.time()


def _box(boxes, name, destroyed_days_ago=None, outside=None):
    d = boxes / name
    (d / ".gpuops" / "onbox").mkdir(parents=True)
    (d / ".gpuops" / "run").mkdir()
    (d / "instance.json").write_text(
        json.dumps({"id": name, "label": name, "usd_per_hour": 1.0, "created_at": NOW - 9 * DAY_S})
    )
    (d / ".gpuops" / "onbox" / "agent.py").write_bytes(b"x" * 50_000)
    (d / ".gpuops" / "agent.log").write_text("agent log\n")
    (d / ".gpuops" / "agent-status.json").write_text("{}")
    (d / ".gpuops" / "run" / "job.log").write_text("job output\n")
    (d / ".gpuops" / "run" / "exit_code").write_text("0")
    (d / "venv" / "lib").mkdir(parents=True)
    (d / "venv" / "lib" / "big.bin").write_bytes(b"y" * 100_000)
    if outside is not None:
        os.symlink(outside, d / "link-out")
    if destroyed_days_ago is not None:
        (d / "destroyed.json").write_text(json.dumps({"destroyed_at": NOW - destroyed_days_ago * DAY_S, "by": "test"}))
    return d


def _files(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file() or p.is_symlink())


def test_prune_keeps_logs_and_state_and_never_follows_links(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    d = _box(tmp_path / "boxes", "gpuops-20261101-0900-aaaa", 10, outside=outside)
    freed = prune_box(d, NOW)
    assert freed >= 150_000
    assert _files(d) == [
        ".gpuops/agent-status.json",
        ".gpuops/agent.log",
        ".gpuops/run/exit_code",
        ".gpuops/run/job.log",
        "destroyed.json",
        "instance.json",
        "pruned.json",
    ]
    assert (outside / "precious.txt").read_text() == "keep me"
    assert json.loads((d / "pruned.json").read_text())["freed_bytes"] == freed


def test_sweep_prunes_only_boxes_past_retention_and_is_bounded(tmp_path):
    boxes = tmp_path / "boxes"
    old = [_box(boxes, f"gpuops-202610{i:02d}-0900-aaaa", 8 + i) for i in range(1, 6)]
    recent = _box(boxes, "gpuops-20261120-0900-bbbb", 2)
    alive = _box(boxes, "gpuops-20261121-0900-cccc", None)
    assert sweep(boxes, 7, NOW, limit=3) == [b.name for b in old[:3]]  # oldest first, at most 3
    assert sweep(boxes, 7, NOW, limit=3) == [b.name for b in old[3:]]  # already pruned ones skipped
    assert sweep(boxes, 7, NOW) == []
    assert (recent / "venv" / "lib" / "big.bin").exists() and (alive / "venv" / "lib" / "big.bin").exists()
    assert sweep(boxes, 1, NOW) == [recent.name]  # a shorter retention reaches it; the live box never
    assert (alive / ".gpuops" / "onbox" / "agent.py").exists()


def test_destroy_sweeps_and_zero_days_prunes_the_box_itself(tmp_path):
    boxes = tmp_path / "boxes"
    old = _box(boxes, "gpuops-20261001-0900-aaaa", 30)
    live = _box(boxes, "gpuops-20261130-0900-dddd", None)
    LocalProvider(boxes, keep_box_days=7).destroy(live.name)
    assert (old / "pruned.json").exists()
    assert (live / "destroyed.json").exists() and not (live / "pruned.json").exists()  # its 7 days start now
    assert (live / ".gpuops" / "run" / "job.log").exists()
    LocalProvider(boxes, keep_box_days=7).destroy(live.name)  # idempotent
    LocalProvider(boxes, keep_box_days=0).destroy(live.name)
    assert (live / "pruned.json").exists() and not (live / "venv").exists()
    assert (live / ".gpuops" / "run" / "job.log").read_text() == "job output\n"
    assert LocalProvider(boxes).get(live.name).status.value == "gone"
