"""Results come home: sizes and sha256 verified, resumed after a dropped SSH connection (a real
sshd behind a proxy that cuts every connection mid-copy), kept on the volume, a failed copy is an
event and a clear summary line, and the box is destroyed only after the copy."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from gpuops.box.local import LocalBox
from gpuops.box.ssh import HostKeyPins, SSHBox, ensure_ssh_key
from gpuops.emulators.sshd import TcpProxy
from gpuops.rental import results

BOOTSTRAP = Path(__file__).resolve().parents[2] / "onbox"


def _make_results(root: Path) -> dict[str, bytes]:
    """A results tree on the 'box': a 3 MiB file, a nested file, an empty file, and a symlink."""
    out = root / "out"
    (out / "sub dir").mkdir(parents=True)
    files = {"big.bin": os.urandom(3 * 2**20 + 17), "sub dir/metrics.json": b'{"loss": 0.25}\n', "empty.txt": b""}
    for rel, data in files.items():
        (out / rel).write_bytes(data)
    (out / "escape").symlink_to("/etc/passwd")
    return files


def _ship_manifest(box) -> None:
    box.put(BOOTSTRAP / "manifest.py", results.MANIFEST)


def _assert_home(dest: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        assert hashlib.sha256((dest / rel).read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest(), rel
    assert not (dest / "escape").exists()
    assert not list(dest.rglob("*.gpuops-part"))


def test_local_copy_verified_and_kept_on_volume(tmp_path):
    root = tmp_path / "box"
    files = _make_results(root)
    box = LocalBox(root)
    _ship_manifest(box)
    volume = tmp_path / "volume"
    rep = results.fetch_results(box, "out/", tmp_path / "home", keep_to=str(volume / "gpuops/rental/results/s1"))
    assert (
        rep.ok and rep.files == 3 and rep.total_bytes == sum(map(len, files.values())) and rep.bytes == rep.total_bytes
    )
    assert rep.skipped == ["escape (symlink)"]
    _assert_home(tmp_path / "home", files)
    _assert_home(volume / "gpuops/rental/results/s1", files)
    assert (
        rep.kept == str(volume / "gpuops/rental/results/s1")
        and "sha256 verified" in rep.line()
        and "volume" in rep.line()
    )
    again = results.fetch_results(box, "out", tmp_path / "home")  # a re-run finds everything home
    assert again.ok and again.bytes == 0 and again.resumed_bytes == rep.total_bytes


def test_no_results_directory_is_not_a_failure(tmp_path):
    box = LocalBox(tmp_path / "box")
    _ship_manifest(box)
    rep = results.fetch_results(box, "out", tmp_path / "home")
    assert rep.ok and rep.files == 0 and rep.error is None


def test_checksum_mismatch_and_unsafe_names_fail_clearly(tmp_path, monkeypatch):
    root = tmp_path / "box"
    _make_results(root)
    box = LocalBox(root)
    _ship_manifest(box)
    real = results.read_manifest

    def forged(*a, **kw):
        entries, skipped, last = real(*a, **kw)
        for e in entries:
            if e.path == "big.bin":
                e.sha256 = "0" * 64  # the box's listing and its bytes disagree
        entries.append(results.Entry("../../outside.txt", 3, "0" * 64))
        return entries, skipped, last

    monkeypatch.setattr(results, "read_manifest", forged)
    rep = results.fetch_results(box, "out", tmp_path / "home")
    assert not rep.ok and rep.failed == ["big.bin: sha256 mismatch after a fresh copy"]
    assert "'../../outside.txt' (not a plain relative path)" in rep.skipped
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "home" / "big.bin").exists()
    assert rep.line().startswith("NOT all copied home: 1 of 3 files failed: big.bin: sha256 mismatch")


@pytest.fixture
def ssh_box_factory(sshd, tmp_path):
    data = tmp_path / "gpuops-data"
    key, pub = ensure_ssh_key(data)
    sshd.authorize(pub)
    boxes = []

    def make(port, **kw):
        b = SSHBox(
            sshd.host,
            port,
            sshd.user,
            key_path=key,
            pins=HostKeyPins(data / "known_hosts"),
            pin_name="gpuops-t/i-1",
            root=f"{sshd.home}/gpuops/s1",
            **kw,
        )
        boxes.append(b)
        return b.connect(time.monotonic() + 15)

    yield make
    for b in boxes:
        b.close()


def test_ssh_copy_resumes_after_the_connection_is_cut_mid_copy(sshd, ssh_box_factory, tmp_path, monkeypatch):
    files = _make_results(sshd.home / "gpuops" / "s1")
    monkeypatch.setattr(results, "CHUNK", 256 * 1024)
    monkeypatch.setattr(results, "RETRY_WAIT_S", 0.05)
    proxy = TcpProxy(sshd.port)
    try:
        box = ssh_box_factory(proxy.port, reconnect_s=20)
        _ship_manifest(box)
        cuts = []

        def progress(rep):
            if not cuts and rep.bytes >= 1024 * 1024:  # a third of the big file is home
                cuts.append(rep.bytes)
                proxy.cut()

        rep = results.fetch_results(box, "out", tmp_path / "home", deadline_s=60, on_progress=progress)
        assert cuts and rep.ok, rep.as_json()
        assert rep.reconnects >= 1 and proxy.accepted >= 2 and box.connects >= 2
        assert rep.bytes == rep.total_bytes  # nothing re-read from zero: the copy resumed at the cut
        _assert_home(tmp_path / "home", files)
    finally:
        proxy.close()


def test_ssh_copy_past_its_deadline_resumes_on_the_next_run(sshd, ssh_box_factory, tmp_path, monkeypatch):
    files = _make_results(sshd.home / "gpuops" / "s1")
    monkeypatch.setattr(results, "CHUNK", 256 * 1024)
    monkeypatch.setattr(results, "RETRY_WAIT_S", 0.05)
    proxy = TcpProxy(sshd.port)
    box = ssh_box_factory(proxy.port, reconnect_s=1)
    _ship_manifest(box)

    def progress(rep):
        if rep.bytes >= 1024 * 1024:
            proxy.close()  # the network is gone for good: no reconnect possible

    rep = results.fetch_results(box, "out", tmp_path / "home", deadline_s=3, on_progress=progress)
    assert not rep.ok and any(f.startswith("big.bin: ") for f in rep.failed), rep.as_json()
    part = tmp_path / "home" / "big.bin.gpuops-part"
    assert part.stat().st_size >= 1024 * 1024
    kept = part.stat().st_size
    box2 = ssh_box_factory(sshd.port)
    rep2 = results.fetch_results(box2, "out", tmp_path / "home", deadline_s=60)
    assert rep2.ok and rep2.resumed_bytes >= kept and rep2.bytes == rep2.total_bytes - rep2.resumed_bytes
    _assert_home(tmp_path / "home", files)


def _local_up(tmp_path, body: str, reporter=None):
    from gpuops.config import load_settings
    from gpuops.rental.launcher import Reporter, UpRequest, run_up

    job = tmp_path / "job.sh"
    job.write_text("#!/usr/bin/env bash\n" + body + "\n")
    s = load_settings(None, {"teardown": {"kill_grace_seconds": 1}})
    return s, run_up(UpRequest(job=job, provider="local", card="rtx-4090"), s, reporter or Reporter())


def test_up_copies_results_home_verified_before_the_destroy(gpuops_home, tmp_path):
    from ledger import Ledger

    s, summ = _local_up(
        tmp_path, "mkdir -p out/logs && head -c 300000 /dev/urandom > out/w.bin && echo ok > out/logs/a.txt"
    )
    assert summ["end_reason"] == "job_end", summ
    copy = summ["results_copy"]
    assert copy["ok"] and copy["files"] == 2 and copy["total_bytes"] == 300003 and "sha256 verified" in copy["line"]
    assert (Path(summ["results"]) / "logs" / "a.txt").read_text() == "ok\n"
    kinds = [e.kind for e in Ledger(s.ledger_url()).events(summ["session"])]
    assert kinds.index("results_copied") < kinds.index("destroyed")


def test_a_failed_copy_is_an_event_and_a_summary_line_and_the_box_still_goes(gpuops_home, tmp_path, monkeypatch):
    from gpuops.rental.launcher import Reporter
    from ledger import Ledger

    monkeypatch.setattr(
        results, "_fetch_one", lambda *a, **k: "connection lost and the copy deadline passed (EOFError)"
    )
    warned = []

    class R(Reporter):
        def warn(self, text):
            warned.append(text)

    s, summ = _local_up(tmp_path, "mkdir -p out && echo data > out/r.txt", R())
    assert summ["end_reason"] == "job_end" and summ["status"] == "closed", summ
    line = summ["results_copy"]["line"]
    assert (
        line
        == "NOT all copied home: 1 of 1 files failed: r.txt: connection lost and the copy deadline passed (EOFError); the box is destroyed, so what did not come home is lost"
    )
    assert any(line in w for w in warned)
    events = Ledger(s.ledger_url()).events(summ["session"])
    kinds = [e.kind for e in events]
    assert kinds.index("results_copy_failed") < kinds.index("destroyed")


def test_manifest_is_python_3_8_and_stdlib_only():
    import ast
    import sys

    tree = ast.parse((BOOTSTRAP / "manifest.py").read_text(), feature_version=(3, 8))
    top = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    top |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert top - set(sys.stdlib_module_names) == set()


def test_a_box_without_sftp_is_copied_whole_and_still_verified(tmp_path):
    class NoSftp(Exception):
        pass

    class NoSftpBox(LocalBox):
        def sftp(self):
            raise NoSftp("no SFTP subsystem")

    root = tmp_path / "box"
    files = _make_results(root)
    box = NoSftpBox(root)
    _ship_manifest(box)
    rep = results.fetch_results(box, "out", tmp_path / "home")
    assert rep.ok and rep.bytes == rep.total_bytes, rep.as_json()
    _assert_home(tmp_path / "home", files)


def test_a_box_listing_past_the_caps_copies_nothing(tmp_path):
    root = tmp_path / "box"
    _make_results(root)
    box = LocalBox(root)
    _ship_manifest(box)
    rep = results.fetch_results(box, "out", tmp_path / "home", max_bytes=2**20)
    assert not rep.ok and "over the copy-back caps" in rep.error and not (tmp_path / "home").exists()
    assert rep.line().startswith("NOT all copied home: the box lists 3 files")
