"""How long a box bills after its job exits, whatever the job prints (issue 42).

For each output size (1 MB, 100 MB, 300 MB by default) a job ``cat``s a file of that many bytes of
lines, then exits. Measured, in one interleaved loop (each size: local, then SSH; each with this
checkout and, with ``--baseline DIR``, another one, e.g. main before the change):

* the job alone: ``bash job.sh > file`` on this machine, wall seconds (the floor of the job itself);
* box end after exit: the provider's own destroy time minus the box's own ``exit_code`` time
  (the local provider's ``destroyed.json`` ``destroyed_at``; over SSH the Vast.ai emulator's
  billing record ``ended_t``, the box a real sshd on 127.0.0.1, gpuops/emulators/sshd.py);
* the link's rate, bytes/s, measured beside it with no gpuops code: local, a plain copy of the
  output file; SSH, the best of two paramiko SFTP ``getfo`` reads of it from the same sshd
  (pipelined, as scp; one read alone can hit paramiko's prefetch race and measure that instead);
* the floor: remaining bytes / rate, and ours/target beside it;
* the target: 1 s + remaining bytes / rate, where remaining is what `up` had not shown when it
  read the exit (its ``log_kept`` event's ``fetched``; the whole output for a checkout that books
  none, the upper bound);
* `up`'s terminal output (its stdout, to a file) is checked to begin with the job's output byte
  for byte; the machine's 1-minute load is printed beside each run.

Never a pass/fail test: it prints figures.

    PYTHONPATH=. python bench/bench_job_exit.py [--sizes-mb 1,100,300] [--runs 1] [--baseline /work/main] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchenv import local_env  # noqa: E402

LINE = b"x" * 70


def write_output(path: Path, size: int) -> None:
    """``size`` bytes of numbered lines of 80 bytes (the last one cut to fit, newline-ended)."""
    with open(path, "wb") as f:
        left, i = size, 0
        while left > 0:
            line = b"%09d " % i + LINE + b"\n"
            if len(line) > left:
                line = line[: left - 1] + b"\n"
            f.write(line)
            left -= len(line)
            i += 1


def python_of(repo: Path) -> str:
    """The checkout's own interpreter (its .venv), else this one."""
    venv = repo / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def job_alone(job: Path, tmp: Path) -> float:
    t0 = time.perf_counter()
    with open(tmp / "alone.out", "wb") as out:
        subprocess.run(["bash", str(job)], stdout=out, check=True, timeout=600)
    return time.perf_counter() - t0


def local_rate(src: Path, tmp: Path) -> float:
    """Bytes/s of a plain copy of ``src`` on this machine (the local link's floor)."""
    t0 = time.perf_counter()
    shutil.copyfile(src, tmp / "rate.copy")
    dt = time.perf_counter() - t0
    (tmp / "rate.copy").unlink()
    return src.stat().st_size / max(dt, 1e-6)


def ssh_rate(sshd, key: Path, src: Path) -> float:
    """Bytes/s of one pipelined SFTP read of ``src`` from ``sshd`` (paramiko's getfo, as scp would)."""
    import paramiko

    t = paramiko.Transport((sshd.host, sshd.port))
    try:
        t.connect(username=sshd.user, pkey=paramiko.Ed25519Key.from_private_key_file(str(key)))
        sftp = paramiko.SFTPClient.from_transport(t)
        assert sftp is not None
        with open(os.devnull, "wb") as sink:
            t0 = time.perf_counter()
            sftp.getfo(str(src), sink)
            dt = time.perf_counter() - t0
        sftp.close()
    finally:
        t.close()
    return src.stat().st_size / max(dt, 1e-6)


def _kept(env: dict, sid: str) -> dict | None:
    db = sqlite3.connect(env["GPUOPS_LEDGER_URL"][len("sqlite:///") :])
    try:
        got = db.execute(
            "SELECT detail FROM events WHERE session_id = ? AND kind = 'log_kept' ORDER BY at DESC LIMIT 1", (sid,)
        ).fetchone()
    finally:
        db.close()
    return json.loads(got[0]) if got else None


def _last_session(env: dict) -> tuple[str, str]:
    db = sqlite3.connect(env["GPUOPS_LEDGER_URL"][len("sqlite:///") :])
    try:
        sid, label = db.execute("SELECT id, label FROM sessions ORDER BY created_at DESC LIMIT 1").fetchone()
    finally:
        db.close()
    return sid, label


def up(env: dict, repo: Path, job: Path, out: Path, extra: list[str]) -> float:
    t0 = time.perf_counter()
    with open(out, "wb") as stdout:
        r = subprocess.run(
            [python_of(repo), "-m", "gpuops", "up", "--job", str(job), *extra],
            env=env,
            cwd=str(repo),
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=1800,
        )
    if r.returncode != 0:
        raise RuntimeError(f"gpuops up exited {r.returncode}: {r.stderr.decode(errors='replace')[-2000:]}")
    return time.perf_counter() - t0


def same_output(out: Path, expected: Path) -> bool:
    """True when ``out`` begins with ``expected`` byte for byte (the summary table follows it)."""
    with open(out, "rb") as a, open(expected, "rb") as b:
        while chunk := b.read(1 << 20):
            if a.read(len(chunk)) != chunk:
                return False
    return True


def run_local(env: dict, repo: Path, job: Path, expected: Path, tmp: Path) -> dict:
    wall = up(env, repo, job, tmp / "up.out", [])
    sid, _ = _last_session(env)
    box = Path(env["GPUOPS_DATA_DIR"]) / "boxes" / f"gpuops-{sid}"
    ended = float((box / ".gpuops" / "run" / "exit_code").read_text().split()[2])
    destroyed = json.loads((box / "destroyed.json").read_text())["destroyed_at"]
    return _figures(env, sid, destroyed - ended, wall, tmp / "up.out", expected)


def run_ssh(env: dict, repo: Path, job: Path, expected: Path, tmp: Path, sshd) -> dict:
    from tests.emulators import VastEmulator

    emu = VastEmulator().start()  # a fresh market each run: a rented offer leaves the market
    emu.market.ssh_endpoint = (sshd.host, sshd.port)
    e = dict(env, VAST_API_KEY=emu.market.api_key, VAST_URL=emu.url, GPUOPS_TEARDOWN_SAMPLE_SECONDS="1")
    try:
        wall = up(e, repo, job, tmp / "up.out", ["--provider", "vast", "--card", "rtx-4090"])
        inst = max(emu.market.instances.values(), key=lambda i: int(i.id))
    finally:
        emu.stop()
    sid, label = _last_session(env)
    ended = float((sshd.home / "gpuops" / label / ".gpuops" / "run" / "exit_code").read_text().split()[2])
    return _figures(env, sid, inst.ended_t - ended, wall, tmp / "up.out", expected)


def _figures(env: dict, sid: str, after_exit: float, wall: float, out: Path, expected: Path) -> dict:
    kept = _kept(env, sid) or {}
    return {
        "after_exit_s": round(after_exit, 3),
        "up_wall_s": round(wall, 3),
        "remaining_bytes": kept.get("fetched"),
        "fetch_s": kept.get("seconds"),
        "same_output": same_output(out, expected),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mb", default="1,100,300", help="output sizes, MB (10^6 bytes), comma separated")
    ap.add_argument("--runs", type=int, default=1, help="interleaved rounds")
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout, timed in the same rounds")
    ap.add_argument("--no-ssh", action="store_true", help="the local provider only")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    sizes = [int(float(x) * 1e6) for x in a.sizes_mb.split(",")]
    repos = [("ours", REPO)] + ([("baseline", a.baseline.resolve())] if a.baseline else [])
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpuops-bench-exit-") as d:
        tmp = Path(d)
        envs = {name: local_env(tmp / name, repo) for name, repo in repos}
        sshd = None
        if not a.no_ssh:
            from gpuops.box.ssh import ensure_ssh_key
            from gpuops.emulators.sshd import SshServer

            sshd = SshServer(tmp / "sshd", extra_path=[tmp / "ours" / "bin"])
            for name, _ in repos:
                sshd.authorize(ensure_ssh_key(Path(envs[name]["GPUOPS_DATA_DIR"]))[1])
            sshd.start()
            key = ensure_ssh_key(Path(envs["ours"]["GPUOPS_DATA_DIR"]))[0]
        try:
            for name, repo in repos:  # untimed warm-up: bytecode compiled, settings snapshot written
                up(envs[name], repo, _warm(tmp), tmp / "warm.out", [])
            for size in sizes:
                expected = tmp / f"out-{size}.txt"
                write_output(expected, size)
                job = tmp / f"job-{size}.sh"
                job.write_text(f"cat {expected}\n")
                for _ in range(a.runs):
                    alone = job_alone(job, tmp)
                    for where in ("local",) + (() if sshd is None else ("ssh",)):
                        if where == "local":
                            rate = local_rate(expected, tmp)
                        else:
                            # the best of two: one getfo alone can hit paramiko's prefetch race
                            # (one round trip per 32 KiB) and measure that, not the link
                            rate = max(ssh_rate(sshd, key, expected), ssh_rate(sshd, key, expected))
                        for name, repo in repos:
                            load = os.getloadavg()[0]
                            if where == "local":
                                f = run_local(envs[name], repo, job, expected, tmp)
                            else:
                                f = run_ssh(envs[name], repo, job, expected, tmp, sshd)
                            remaining = f["remaining_bytes"] if f["remaining_bytes"] is not None else size
                            rows.append(
                                {
                                    "size_bytes": size,
                                    "where": where,
                                    "checkout": name,
                                    "load_1min": round(load, 2),
                                    "job_alone_s": round(alone, 3),
                                    "rate_bytes_per_s": round(rate),
                                    "floor_s": round(remaining / rate, 3),
                                    "target_s": round(1.0 + remaining / rate, 3),
                                    **f,
                                }
                            )
                            if not a.json:
                                r = rows[-1]
                                print(
                                    f"{size / 1e6:6.0f} MB {where:5s} {name:8s} load {r['load_1min']:5.2f}  "
                                    f"job alone {r['job_alone_s']:6.3f} s  box end after exit {r['after_exit_s']:7.3f} s  "
                                    f"floor {remaining / rate:6.3f} s ({remaining / 1e6:.1f} MB at {rate / 1e6:.0f} MB/s)  "
                                    f"target {r['target_s']:6.3f} s (1 s + floor)  ours/target {r['after_exit_s'] / r['target_s']:4.2f}  "
                                    f"fetch {r['fetch_s']} s  up wall {r['up_wall_s']:.1f} s  output same: {r['same_output']}",
                                    flush=True,
                                )
        finally:
            if sshd is not None:
                sshd.stop()
                sshd.end_box_processes()
    if a.json:
        print(json.dumps(rows, indent=1))
    return 0


def _warm(tmp: Path) -> Path:
    job = tmp / "warm.sh"
    job.write_text("echo warm\n")
    return job


if __name__ == "__main__":
    sys.exit(main())
