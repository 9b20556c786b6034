"""The per-test leak check reaps only its own run's processes (tests/support/procs.py)."""

from tests.support import procs
from tests.support.procs import Proc

NODE = "tests/check/test_check_rent.py::test_every_layer_holds_with_the_laptop_gone[runpod]"


def _proc(pid: int, run: str, test: str = NODE, cwd: str = "/") -> Proc:
    env = {procs.RUN_VAR: run, procs.TEST_VAR: test}
    return Proc(pid=pid, ppid=1, pgid=pid, cmdline="gpuops check", cwd=cwd, env=env)


def test_the_same_test_in_another_suite_is_not_ours():
    mine, theirs = _proc(101, "run-a"), _proc(102, "run-b")
    found = procs.of_test(NODE, "run-a", ["/tmp/run-a/t0"], [mine, theirs])
    assert [p.pid for p in found] == [101]


def test_a_process_that_lost_its_environment_is_still_found_by_its_path():
    stray = Proc(pid=103, ppid=1, pgid=103, cmdline="sshd: job", cwd="/tmp/run-a/t0/box", env={})
    other = Proc(pid=104, ppid=1, pgid=104, cmdline="sshd: job", cwd="/tmp/run-b/t0/box", env={})
    found = procs.of_test(NODE, "run-a", ["/tmp/run-a/t0"], [stray, other])
    assert [p.pid for p in found] == [103]


def test_session_servers_are_not_one_tests_leak():
    server = _proc(105, "run-a", test=procs.SESSION, cwd="/tmp/run-a/t0")
    assert procs.of_test(NODE, "run-a", ["/tmp/run-a/t0"], [server]) == []
