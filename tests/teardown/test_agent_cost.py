"""What the agent does every sample, made cheaper without changing what it sees.

The incremental /proc scan (onbox/agent.py ``ProcScanner``): a process's argv is not read every
sample, yet a new SSH session, a process that execs into one after it was first seen, and a pid
that changed hands are each seen on the next scan, and a /proc/loadavg that does not count pids
the kernel's way turns the old rule (compare /proc entry times) back on. ``run_capture`` (the
nvidia-smi call without subprocess): output, exit status, a time limit, a missing program."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from onbox import agent
from tests.teardown.conftest import wait_for

USER = "scanuser"


def titled(pid: int, title: str) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode() == title
    except OSError:
        return False


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []

    def start(script: str, **kw) -> subprocess.Popen:
        p = subprocess.Popen(["bash", "-c", script], **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()
        p.wait()


def test_a_session_started_between_two_scans_is_seen_on_the_next(procs):
    s = agent.ProcScanner()
    assert s.scan([USER]) == (0, False)
    assert s.scan([USER]) == (0, False)
    p = procs(f'exec -a "sshd: {USER}@pts/9" sleep 30')
    wait_for(lambda: titled(p.pid, f"sshd: {USER}@pts/9"), 10)
    assert s.scan([USER])[0] == 1
    assert s.scan(["someone-else"])[0] == 0
    p.kill()
    p.wait()
    assert s.scan([USER])[0] == 0


def test_a_process_that_execs_into_a_session_after_its_first_sighting_is_seen(procs):
    s = agent.ProcScanner()
    p = procs(f'read line; exec -a "sshd: {USER}@pts/8" sleep 30', stdin=subprocess.PIPE)
    wait_for(lambda: os.path.exists(f"/proc/{p.pid}"), 10)
    assert s.scan([USER])[0] == 0  # first seen as bash, its argv cached
    p.stdin.write(b"go\n")
    p.stdin.flush()
    wait_for(lambda: titled(p.pid, f"sshd: {USER}@pts/8"), 10)
    assert s.scan([USER])[0] == 1  # read once more on the next scan


def _stale(s: agent.ProcScanner, pid: int) -> None:
    """Make ``pid``'s cache entry say what an earlier process under the same pid ran (settled:
    read twice, not an sshd title) -- what a reused pid looks like to the cache."""
    e = s.cache[pid]
    s.cache[pid] = [e[0] - 1, "python3\0worker.py\0", None, False, False, 2]
    s.watch.discard(pid)


def test_a_pid_handed_out_since_the_last_scan_is_read_again(procs, tmp_path):
    loadavg = tmp_path / "loadavg"
    p = procs(f'exec -a "sshd: {USER}@pts/7" sleep 30')
    wait_for(lambda: titled(p.pid, f"sshd: {USER}@pts/7"), 10)
    s = agent.ProcScanner(loadavg=str(loadavg), pids=lambda: [p.pid])  # no other process's noise
    loadavg.write_text(f"0.00 0.00 0.00 1/1 {p.pid + 5}\n")
    assert s.scan([USER])[0] == 1  # first scan: every pid read
    assert s.scan([USER])[0] == 1
    _stale(s, p.pid)
    loadavg.write_text(f"0.00 0.00 0.00 1/1 {p.pid + 5}\n")  # nothing handed out: the cache stands
    assert s.scan([USER])[0] == 0
    loadavg.write_text(f"0.00 0.00 0.00 1/1 {p.pid + 9}\n")  # pids after p's handed out: still
    assert s.scan([USER])[0] == 0
    _stale(s, p.pid)
    # The counter wrapped past pid_max and came round past p: p may be a new process.
    loadavg.write_text(f"0.00 0.00 0.00 1/1 {p.pid}\n")
    assert s.scan([USER])[0] == 1
    assert s.by_range


def test_every_pid_is_checked_again_after_the_full_check_interval(procs, tmp_path, monkeypatch):
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.00 0.00 0.00 1/1 4000000\n")
    p = procs(f'exec -a "sshd: {USER}@pts/6" sleep 30')
    wait_for(lambda: titled(p.pid, f"sshd: {USER}@pts/6"), 10)
    s = agent.ProcScanner(loadavg=str(loadavg), pids=lambda: [p.pid])
    s.scan([USER])
    s.scan([USER])
    _stale(s, p.pid)
    assert s.scan([USER])[0] == 0  # the pid counter did not move: a full wrap would look like this
    monkeypatch.setattr(agent.ProcScanner, "FULL_CHECK_S", 0.0)
    assert s.scan([USER])[0] == 1  # /proc entry times compared: the entry is not the cached one


@pytest.mark.parametrize("newest", ["0", "7"])
def test_a_loadavg_that_does_not_count_pids_falls_back_to_entry_times(procs, tmp_path, newest):
    loadavg = tmp_path / "loadavg"
    loadavg.write_text(f"0.00 0.00 0.00 1/1 {newest}\n")  # gVisor prints 0; an emulation anything
    live: list[int] = []
    s = agent.ProcScanner(loadavg=str(loadavg), pids=lambda: list(live))
    s.scan([USER])
    s.scan([USER])
    p = procs(f'exec -a "sshd: {USER}@pts/5" sleep 30')
    wait_for(lambda: titled(p.pid, f"sshd: {USER}@pts/5"), 10)
    live.append(p.pid)
    assert agent.run_capture(["true"], 20)[0] == 0  # our own child, outside the count: not trusted
    assert s.scan([USER])[0] == 1
    if newest != "0":
        assert not s.by_range  # a new pid outside 7..7: the count is not the kernel's
    _stale(s, p.pid)
    assert s.scan([USER])[0] == 1  # entry times compared every scan


def test_few_new_pids_are_looked_up_one_by_one_threads_apart(procs, monkeypatch):
    monkeypatch.setattr(agent.ProcScanner, "PROBE_MAX", 10**6)  # other tests' processes: any number
    listings = []
    s = agent.ProcScanner(pids=lambda: listings.append(1) or agent.localbox.pids())
    agent.run_capture(["true"], 20)
    assert s.scan([USER]) == (0, False) and len(listings) == 1  # the first scan lists /proc
    # A session whose process also runs a thread: /proc answers for the thread's id too.
    p = procs(
        f'exec -a "sshd: {USER}@pts/4" {sys.executable} -c "import threading, time; '
        f'threading.Thread(target=time.sleep, args=(60,)).start(); print(1, flush=True); time.sleep(60)"',
        stdout=subprocess.PIPE,
    )
    assert p.stdout.readline() == b"1\n"
    tids = sorted(int(t) for t in os.listdir(f"/proc/{p.pid}/task"))
    assert len(tids) == 2
    agent.run_capture(["true"], 20)  # what each sample does before it scans
    assert s.scan([USER])[0] == 1
    assert len(listings) == 1 and s.probed == 1  # looked up, not listed
    assert s.cache[tids[1]][2] is None  # the thread's id was looked up too, and is not a session
    assert s.scan([USER])[0] == 1  # no new child of ours: /proc listed, same answer
    p.kill()
    p.wait()
    agent.run_capture(["true"], 20)
    assert s.scan([USER])[0] == 0


# -- run_capture / sample_gpus ---------------------------------------------------------------------
def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_run_capture_returns_exit_status_and_both_streams_apart(tmp_path):
    smi = script(tmp_path / "smi", 'echo "0, 12, 100, 200"; echo "WARNING: infoROM" >&2; exit 14\n')
    assert agent.run_capture([smi, "a b"], timeout=20) == (14, b"0, 12, 100, 200\n", b"WARNING: infoROM\n")
    killed = script(tmp_path / "killed", "kill -9 $$\n")
    assert agent.run_capture([killed], timeout=20)[0] == -9


def test_run_capture_kills_a_program_past_its_time_limit_and_reaps_it(tmp_path):
    hang = script(tmp_path / "hang", "exec sleep 60\n")
    closes = script(tmp_path / "closes", "exec sleep 60 >&- 2>&-\n")  # closes its output, keeps running
    for prog in (hang, closes):
        assert agent.run_capture([prog], timeout=0.5) is None
        assert agent.sample_gpus([prog], timeout=1.0) == {"gpus": [], "error": "nvidia-smi timed out after 1 s"}
    assert children(os.getpid()) == []  # killed and reaped: nothing left behind, no zombie


def test_run_capture_works_when_the_process_holds_more_than_1024_fds(tmp_path):
    """select() refuses an fd >= 1024 (FD_SETSIZE); a loaded agent can hold that many."""
    import resource
    import select

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1100
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {want}")
    held: list[int] = []
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # within the hard limit; restored below
    try:
        while True:  # fill every number below 1024: the pipes run_capture makes get higher ones
            fd = os.open(os.devnull, os.O_RDONLY)
            held.append(fd)
            if fd >= 1024:
                break
        with pytest.raises(ValueError):  # the condition is real: select() cannot wait on this fd
            select.select([held[-1]], [], [], 0)
        smi = script(tmp_path / "smi", 'echo "0, 12, 100, 200"; echo warn >&2; exit 3\n')
        assert agent.run_capture([smi], timeout=20) == (3, b"0, 12, 100, 200\n", b"warn\n")
        hang = script(tmp_path / "hang", "exec sleep 60\n")
        assert agent.run_capture([hang], timeout=0.5) is None  # the time limit holds there too
        assert children(os.getpid()) == []
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def children(ppid: int) -> list[str]:
    """The states of ``ppid``'s child processes that run ``sleep 60`` (zombies included)."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            if not d.name.isdigit():
                continue
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == ppid and (fields[0] == "Z" or b"sleep\x0060" in (d / "cmdline").read_bytes()):
                out.append(fields[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


def test_sample_gpus_without_the_program_says_not_found(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert agent.sample_gpus(["nvidia-smi"], timeout=5) == {"gpus": [], "error": "nvidia-smi not found"}
    assert agent.sample_gpus([str(tmp_path / "nvidia-smi")], timeout=5) == {"gpus": [], "error": "nvidia-smi not found"}
    script(tmp_path / "nvidia-smi", 'echo "0, 3, 100, 200"\n')  # found on PATH once it is there
    assert agent.sample_gpus(["nvidia-smi"], timeout=20)["gpus"] == [
        {"index": 0, "util": 3.0, "mem_used_mib": 100.0, "mem_total_mib": 200.0}
    ]
