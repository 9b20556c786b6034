"""Repeated timing of a command, hyperfine-style.

One warm-up run, then ``runs`` timed runs; the median wall time, the fastest, the largest peak
RSS and the median CPU seconds (user + system, the command's and every process it waited for, from
``wait4``) of the command. The RSS comes from GNU ``/usr/bin/time -f %M`` (apt-get install time): a child's
own ``ru_maxrss`` also counts the parent's pages it was forked with (a 300 MiB bench process makes
``true`` look 300 MiB big); without it the figure falls back to that and says so. Used by the
benchmarks; never a pass/fail test.

    python bench/timing.py [--runs 7] -- gpuops ps
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else shutil.which("time")


@dataclass
class Timing:
    """Median and fastest wall seconds of the timed runs, peak RSS of the largest run (MiB).

    ``cpu_s``: the median CPU seconds (user + system) of the runs."""

    median_s: float
    min_s: float
    max_rss_mib: float
    runs: int
    cpu_s: float = 0.0

    def __str__(self) -> str:
        return f"median {self.median_s:7.3f} s  min {self.min_s:7.3f} s  peak RSS {self.max_rss_mib:7.1f} MiB  ({self.runs} runs)"


def run_once(
    argv: Sequence[str],
    env: dict | None = None,
    stdout: IO | int | None = subprocess.DEVNULL,
    stdin: IO | int | None = subprocess.DEVNULL,
    cwd: str | None = None,
    timeout_s: float = 1800.0,
) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds) of one run of ``argv``.

    CPU: user + system of the process and of every process it waited for (``wait4``'s usage).

    Raises CalledProcessError on a non-zero exit (with the command's stderr), TimeoutExpired past
    ``timeout_s``."""
    rss_file = None
    if GNU_TIME:
        fd, rss_file = tempfile.mkstemp(prefix="gpuops-rss-")
        os.close(fd)
        argv = [GNU_TIME, "-f", "%M", "-o", rss_file, *argv]
    t0 = time.perf_counter()
    p = subprocess.Popen(list(argv), env=env, stdout=stdout, stdin=stdin, stderr=subprocess.PIPE, cwd=cwd)
    deadline = t0 + timeout_s
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            p.kill()
            p.wait()
            raise subprocess.TimeoutExpired(list(argv), timeout_s)
        time.sleep(0.002)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.stderr:
        p.stderr.close()
    peak_kib = float(usage.ru_maxrss)
    if rss_file:
        with open(rss_file) as f:
            lines = f.read().split()
        os.unlink(rss_file)
        peak_kib = float(lines[-1]) if lines and lines[-1].isdigit() else peak_kib
    if p.returncode != 0:
        raise subprocess.CalledProcessError(p.returncode, list(argv), stderr=err)
    return wall, peak_kib / 1024.0, usage.ru_utime + usage.ru_stime


def measure(
    argv: Sequence[str],
    env: dict | None = None,
    runs: int = 5,
    warmup: int = 1,
    stdout_path: str | None = None,
    stdin_path: str | None = None,
    cwd: str | None = None,
) -> Timing:
    """``Timing`` of ``runs`` runs after ``warmup`` untimed ones.

    ``stdout_path``: where the output goes (else discarded); ``stdin_path``: a file fed to stdin."""
    walls, rss, cpu = [], [], []
    for i in range(warmup + runs):
        out = open(stdout_path, "wb") if stdout_path else subprocess.DEVNULL
        inp = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
        try:
            wall, peak, cpu_s = run_once(argv, env, out, inp, cwd)
        finally:
            for f in (out, inp):
                if hasattr(f, "close"):
                    f.close()
        if i >= warmup:
            walls.append(wall)
            rss.append(peak)
            cpu.append(cpu_s)
    return Timing(statistics.median(walls), min(walls), max(rss), runs, statistics.median(cpu))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    if not argv:
        ap.error("name a command after --")
    print(measure(argv, dict(os.environ), a.runs))


if __name__ == "__main__":
    sys.exit(main())
