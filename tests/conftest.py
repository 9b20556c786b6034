"""Fixtures every test area may use, the two lanes, and the run's process and temp-dir hygiene.

Area-specific fixtures live in tests/<area>/conftest.py; fixtures that several areas share (sshd,
emulators, PostgreSQL) live in tests/support/ and are imported.

Lanes (markers set here at collection) follow what a test starts, never its folder: ``e2e`` for
a test that starts a server or a process -- it uses a fixture (directly or through another) that
is one of ``E2E_FIXTURES`` or whose code starts one (``_SPAWNS``: a subprocess, an emulator, sshd,
PostgreSQL, the browser...), runs the PostgreSQL parameter of ``ledger_url``, or its own code or a
helper it calls (of its module, or imported from another test module) starts one -- or is marked
``e2e`` by hand (what it starts is out of sight: an in-process `up --dry-run` on the local
provider starts its containment probe, onbox/contain.py). ``unit`` for everything else: pure
logic and in-process ``CliRunner`` runs. A unit-lane test that starts a process or opens a
listening socket anyway fails (``_no_leftover_processes``), so the lanes cannot drift.
``pytest -m unit`` / ``pytest -m e2e -n 6`` run one lane (scripts/test.sh runs both).

Hygiene: a run first ends what runs that died left (a SIGKILLed pytest runs no teardown; each
run's root carries its owner's record, tests/support/procs.py ``end_dead_runs``). The run gets one
temp root (``TMPDIR``, so pytest's ``tmp_path``, ``tempfile`` and every child process write under
it) and one id in the environment of every process it starts (tests/support/procs.py). After each end-to-end test, whatever that test started and left alive
is killed and the test errors; at the end of the run, anything of the run still alive is killed
and the run fails; then the temp root is removed, with the bytecode compiled from files under it.
Every process of the run keeps its compiled bytecode in one cache outside the source tree
(``PYCACHE``, ``_keep_bytecode``), so that no process compiles what an earlier one did.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

import tests.emulators  # noqa: F401  (plugs the specs' contract and the reserved ports into every emulator)
from tests.support import procs

REPO = Path(__file__).resolve().parent.parent
# Compiled bytecode is kept between runs, outside the run's temp root (which is removed at the end).
_OUTER_TMP = os.environ.get("PYTEST_GPUOPS_OUTER_TMPDIR") or tempfile.gettempdir()
PYCACHE = str(Path(_OUTER_TMP) / "gpuops-tests-pycache")

# A test that requests one of these starts a server or a process: it runs in the e2e lane.
E2E_FIXTURES = frozenset(
    {
        "cli_env",
        "sshd",
        "sshd_unstarted",
        "make_box",
        "runpod_emulator",
        "vast_emulator",
        "emulator_env",
        "runpod_provider",
        "vast_provider",
        "postgres_server",
        "own_postgres",
        "rig",
        "fake_smi",
        "world",
        "side",  # tests/providers/test_provider_contract.py: an emulator per provider
        "hub",  # tests/plan/test_hub.py: the stand-in Hugging Face Hub (an HTTP server)
    }
)
# Code that starts a process or a server.
# (``run_up`` is `up` in process, ``LocalBox`` a local box: both start processes; ``...Emulator(``
# an emulated provider's HTTP server, with or without arguments.)
_SPAWNS = re.compile(
    r"\b(subprocess|Popen|gpuops_cmd|os\.fork|SshServer|PostgresServer|LocalBox|laptop\(|HttpFiles|HubServer"
    r"|run_up\(|\w*Emulator\(|\.listen\("
    # a fixture asked for by name may start anything; PostgreSQL asked for by a ledger fixture's
    # parameter is seen by that parameter (``_is_e2e``), so its other parameter stays a unit test
    r"|getfixturevalue\((?![\"']postgres_server[\"']\)))"
)
LEAK_GRACE_S = 10.0  # how long a test's processes get to end on their own once its fixtures are done


def _default_terminal_signals() -> None:
    """Give SIGINT and SIGHUP their default actions when this run inherited them ignored.

    The suite checks what a terminal's Ctrl-C and hang-up do to `up` and the watchdog, and a child
    inherits an ignored signal across exec (Python then installs no KeyboardInterrupt handler
    either). `nohup` ignores SIGHUP, and a shell without job control ignores SIGINT in `cmd &`;
    under either, those tests would wait forever on a signal their process never sees. To keep a
    run alive past a closed terminal, start it with `setsid` instead.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


_default_terminal_signals()


def pytest_configure(config):
    config.pluginmanager.register(_WideFixtures(), "gpuops-wide-fixtures")
    if os.environ.get(procs.RUN_VAR) and os.environ.get(procs.ROOT_VAR):
        return  # an xdist worker: the controller set the run up
    # A run SIGKILLed (a timeout) ran no teardown: end its servers and remove its root first.
    left = procs.end_dead_runs(_OUTER_TMP)
    if left:
        sys.stderr.write(f"ended {len(left)} process(es) left by dead test runs:\n")
        sys.stderr.write("".join(f"  {p.describe()}\n" for p in left))
    root = tempfile.mkdtemp(prefix=procs.SUITE_PREFIX, dir=_OUTER_TMP)
    os.chmod(root, 0o711)  # PostgreSQL runs as its own user (as root) and must reach its folder inside
    procs.write_owner(root)  # how a later run knows this one died (procs.owner_gone)
    config._gpuops_prev_tmp = (os.environ.get("TMPDIR"), tempfile.tempdir)
    config._gpuops_prev_bytecode = (
        {v: os.environ.get(v) for v in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")},
        sys.dont_write_bytecode,
        sys.pycache_prefix,
    )
    _keep_bytecode()
    os.environ["PYTEST_GPUOPS_OUTER_TMPDIR"] = _OUTER_TMP
    os.environ[procs.RUN_VAR] = uuid.uuid4().hex[:12]
    os.environ[procs.ROOT_VAR] = root
    os.environ["TMPDIR"] = root
    tempfile.tempdir = root
    config._gpuops_run_owner = True


def _keep_bytecode() -> None:
    """Every process of the run (this one, the xdist workers, every CLI, emulator and `up` it
    starts) reads and writes compiled bytecode under the shared ``PYCACHE``, outside the source
    tree, even where ``PYTHONDONTWRITEBYTECODE`` is set: without it each of them recompiles what it
    imports (SQLAlchemy alone ~2 s of CPU; a worker's collection 21 s of CPU instead of 8 s)."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = PYCACHE
    sys.dont_write_bytecode = False
    sys.pycache_prefix = PYCACHE


@functools.cache
def _defs(filename: str) -> tuple[dict[int, ast.AST], dict[str, list[ast.AST]]]:
    """The ``def`` and ``class`` statements of one source file, its docstrings dropped, parsed once:
    functions by their first line (the first decorator's, as ``co_firstlineno`` counts it),
    classes by their ``__qualname__``. Raises OSError when the file cannot be read, SyntaxError
    when it does not parse."""
    tree = ast.parse(Path(filename).read_text(encoding="utf-8"), filename)
    functions: dict[int, ast.AST] = {}
    classes: dict[str, list[ast.AST]] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:  # statements only: a def is one
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                first = stmt.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                    if isinstance(first.value.value, str):  # its docstring
                        stmt.body = stmt.body[1:] or [ast.Pass()]
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions[min([stmt.lineno] + [d.lineno for d in stmt.decorator_list])] = stmt
                visit(stmt.body, f"{prefix}{stmt.name}.<locals>.")
            elif isinstance(stmt, ast.ClassDef):
                classes.setdefault(prefix + stmt.name, []).append(stmt)
                visit(stmt.body, f"{prefix}{stmt.name}.")
            else:  # if, for, while, with, try, match: the statements inside
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, field, []), prefix)
                for part in getattr(stmt, "handlers", []) + getattr(stmt, "cases", []):
                    visit(part.body, prefix)

    visit(tree.body, "")
    return functions, classes


def _code(obj) -> str:
    """``obj``'s source (a function's or a class's) as code only: docstrings and comments dropped
    (a docstring that says "not in a subprocess" starts nothing). Raises OSError/TypeError when its
    source cannot be found, SyntaxError when its file does not parse."""
    obj = inspect.unwrap(obj) if inspect.isfunction(obj) else obj
    if inspect.isfunction(obj):
        node = _defs(obj.__code__.co_filename)[0].get(obj.__code__.co_firstlineno)
    elif inspect.isclass(obj):
        found = _defs(inspect.getfile(obj))[1].get(obj.__qualname__, [])
        node = found[0] if len(found) == 1 else None
    else:
        raise TypeError(f"{obj!r} is neither a function nor a class")
    if node is None:
        raise OSError(f"no source found for {obj!r}")
    return ast.unparse(node)


def _spawning_names(module) -> set[str]:
    """Names in the module of functions and classes whose code starts a process (transitively):
    its own, and those it imported from another test module (a shared helper such as
    tests/lifecycle/upproc.py's ``UpProc``)."""
    cached = getattr(module, "__gpuops_spawners__", None)
    if cached is not None:
        return cached
    module.__gpuops_spawners__ = set()  # a cycle of imports reads as "nothing" while it is computed
    sources = {}
    for name, obj in vars(module).items():
        home = getattr(obj, "__module__", None) or ""
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and (home == module.__name__ or home.startswith("tests.")):
            if home != module.__name__:
                if home in sys.modules and name in _spawning_names(sys.modules[home]):
                    sources[name] = "subprocess"  # its own module found that it starts one
                continue
            try:
                sources[name] = _code(obj)
            except (OSError, TypeError):
                pass
    spawners = {n for n, src in sources.items() if _SPAWNS.search(src)}
    while True:
        more = {
            n for n, src in sources.items() if n not in spawners and any(re.search(rf"\b{s}\(", src) for s in spawners)
        }
        if not more:
            break
        spawners |= more
    module.__gpuops_spawners__ = spawners
    return spawners


def _code_spawns(fn) -> bool:
    """True when ``fn``'s code, or a helper of its module (or a test module's helper it imported)
    that it calls, starts a process or a server; True also when its source cannot be read (doubt)."""
    cached = getattr(fn, "__gpuops_spawns__", None)
    if cached is not None:
        return cached
    try:
        src = _code(fn)
    except (OSError, TypeError):
        return True
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    found = bool(_SPAWNS.search(src)) or (
        module is not None and any(re.search(rf"\b{n}\(", src) for n in _spawning_names(module))
    )
    try:
        fn.__gpuops_spawns__ = found
    except (AttributeError, TypeError):
        pass
    return found


# This file's autouse fixtures watch what a test starts (and end it); they start nothing.
_WATCHERS = frozenset({"_no_leftover_processes", "_provider_contract"})


def _fixture_spawns(item) -> bool:
    """True when a fixture the test uses (directly or through another) starts a server or a process."""
    info = getattr(item, "_fixtureinfo", None)
    defs = getattr(info, "name2fixturedefs", {}) if info is not None else {}
    for name in getattr(item, "fixturenames", ()):
        if name in _WATCHERS:
            continue
        for fixturedef in defs.get(name, ()):
            fn = getattr(fixturedef, "func", None)
            module = getattr(fn, "__module__", "") or ""
            if fn is not None and module.startswith("tests.") and _code_spawns(fn):
                return True
    return False


def _is_e2e(item) -> bool:
    if item.get_closest_marker("e2e") or item.get_closest_marker("slow"):
        return True
    if item.get_closest_marker("unit"):
        return False
    if E2E_FIXTURES & set(getattr(item, "fixturenames", ())) or _fixture_spawns(item):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "postgres" in callspec.params.values():  # a ledger fixture's PostgreSQL parameter
        return True
    fn = getattr(item, "function", None)
    return fn is None or _code_spawns(fn)


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.e2e if _is_e2e(item) else pytest.mark.unit)


# Unit-lane tests that started a process or opened a listening socket anyway (found at run time):
# each fails, and the end of the run lists them so that the lane can be corrected (a fixture in
# E2E_FIXTURES, or @pytest.mark.e2e saying what it starts).
_SPAWNED_IN_UNIT: dict[str, str] = {}
_current_unit: list[str] = []
_execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]


_started_by_test: list[subprocess.Popen] = []  # every Popen of the running test (ended at its teardown)
_in_wide_fixture = [0]  # > 0 while a module/session-scoped fixture sets up: its processes outlive the test


class _WideFixtures:
    """Registered as a plugin (``pytest_configure``), not as this conftest's hook: pytest calls
    ``pytest_fixture_setup`` through the hooks of the fixture's node, and a session-scoped
    fixture's node is the session, which this folder's conftest does not reach."""

    @staticmethod
    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(fixturedef, request):
        """A fixture wider than one test (a module's browser, the session's PostgreSQL) starts
        processes that must outlive the test that first asked for it: they are tagged ``session``
        (the run-end check still covers them) and are not ended with that test."""
        if fixturedef.scope == "function":
            yield
            return
        prev = os.environ.get(procs.TEST_VAR)
        os.environ[procs.TEST_VAR] = procs.SESSION
        _in_wide_fixture[0] += 1
        try:
            yield
        finally:
            _in_wide_fixture[0] -= 1
            if prev is None:
                os.environ.pop(procs.TEST_VAR, None)
            else:
                os.environ[procs.TEST_VAR] = prev


_listen = socket.socket.listen


def _recording_listen(self, *args):
    """A server started in this process (an emulator, a stand-in hub, a socket that never answers):
    noted against the unit-lane test that runs, as a process would be."""
    if _current_unit and _current_unit[0] not in _SPAWNED_IN_UNIT:
        try:
            where = self.getsockname()
        except OSError:
            where = "?"
        _SPAWNED_IN_UNIT[_current_unit[0]] = f"a server listening on {where}"
    return _listen(self, *args)


socket.socket.listen = _recording_listen  # type: ignore[method-assign]


def _recording_execute_child(self, args, *rest, **kw):
    argv0 = str(args[0] if isinstance(args, (list, tuple)) and args else args)
    # ctypes.util.find_library runs `ldconfig -p` when an SDK loads a C library: not the test's.
    if _current_unit and _current_unit[0] not in _SPAWNED_IN_UNIT and not argv0.endswith("ldconfig"):
        _SPAWNED_IN_UNIT[_current_unit[0]] = str(args)[:120]
    _execute_child(self, args, *rest, **kw)
    if not _in_wide_fixture[0]:
        _started_by_test.append(self)


def _end_started_processes(grace_s: float = 3.0) -> None:
    """TERM every process the test started (its group, where it leads one) that still runs, KILL
    it after ``grace_s``: the finalizer of every Popen, whatever the test did or failed to do."""
    import signal
    import time

    running = [p for p in _started_by_test if p.poll() is None]
    _started_by_test.clear()

    def send(p: subprocess.Popen, sig: int) -> None:
        try:
            if os.getpgid(p.pid) == p.pid and p.pid != os.getpgrp():
                os.killpg(p.pid, sig)
            else:
                os.kill(p.pid, sig)
        except OSError:
            pass

    for p in running:
        send(p, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in running:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            send(p, signal.SIGKILL)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass


subprocess.Popen._execute_child = _recording_execute_child  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter):
    if _SPAWNED_IN_UNIT:
        terminalreporter.section("unit-lane tests that started a process or a server (failed)", red=True)
        for nodeid, argv in _SPAWNED_IN_UNIT.items():
            terminalreporter.write_line(f"{nodeid}: {argv}")


@pytest.fixture(autouse=True)
def _no_leftover_processes(request):
    """Tag what this test starts with its node id. Once its fixtures are torn down: end every
    process the test started itself (TERM, then KILL) that still runs; then give what those left
    behind (a job, an agent, a daemon they started) ``LEAK_GRACE_S`` to end, kill it, and error the
    test: something the product or a fixture started outlived it."""
    nodeid = request.node.nodeid
    unit = request.node.get_closest_marker("unit") is not None
    os.environ[procs.TEST_VAR] = nodeid
    _started_by_test.clear()
    if unit:
        _current_unit[:] = [nodeid]
    yield
    os.environ.pop(procs.TEST_VAR, None)
    _current_unit.clear()
    _end_started_processes()
    if unit and nodeid not in _SPAWNED_IN_UNIT:
        return
    tmp = request.node.funcargs.get("tmp_path")
    roots = [str(tmp)] if tmp is not None else []
    left = procs.wait_gone(lambda: procs.of_test(nodeid, os.environ[procs.RUN_VAR], roots), LEAK_GRACE_S)
    if left:
        procs.kill(left)
        pytest.fail(
            f"{len(left)} process(es) outlived this test and its fixtures (killed now):\n"
            + "\n".join(p.describe() for p in left),
            pytrace=False,
        )
    if unit:
        pytest.fail(
            f"a unit-lane test started a process or a server ({_SPAWNED_IN_UNIT[nodeid]}): the lane follows "
            "what a test starts -- use the fixture that starts it (E2E_FIXTURES in tests/conftest.py), or "
            "mark the test @pytest.mark.e2e and say what it starts",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _provider_contract():
    """Fail the test whose traffic the providers' published specs reject: every request an
    emulator received and every reply it sent during the test was validated
    (tests/emulators/contract.py); a violation not in ``contract.KNOWN`` errors the test here."""
    from tests.emulators import contract

    start = len(contract.VIOLATIONS)
    yield
    new = [v for v in contract.VIOLATIONS[start:] if not contract.known(v)]
    if new:
        pytest.fail(
            "the providers' published OpenAPI specs reject this test's traffic (tests/data/specs):\n"
            + contract.summary(new),
            pytrace=False,
        )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """Whatever this run started and is still alive fails the run (after it is killed); the run's
    temp root is removed."""
    if not getattr(session.config, "_gpuops_run_owner", False):
        return
    run_id, root = os.environ[procs.RUN_VAR], os.environ[procs.ROOT_VAR]
    left = procs.wait_gone(lambda: procs.of_run(run_id, [root]), 5.0)
    if left:
        procs.kill(left)
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        msg = (
            f"\nFAILED: {len(left)} process(es) started by this test run were still alive at its end (killed now):\n"
            + "\n".join("  " + p.describe() for p in left)
        )
        if tr is not None:
            tr.write_line(msg, red=True)
        else:
            sys.stderr.write(msg + "\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not os.environ.get("PYTEST_GPUOPS_KEEP_TMP"):
        shutil.rmtree(root, ignore_errors=True)
        _prune_pycache()
    # The run is over: a next pytest.main in this process (mutmut runs several) is a run of its own.
    for var in (procs.RUN_VAR, procs.ROOT_VAR):
        os.environ.pop(var, None)
    prev_vars, sys.dont_write_bytecode, sys.pycache_prefix = session.config._gpuops_prev_bytecode
    for var, value in prev_vars.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    prev_env, prev_dir = session.config._gpuops_prev_tmp
    if prev_env is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = prev_env
    tempfile.tempdir = prev_dir


def _prune_pycache() -> None:
    """Drop the bytecode compiled from files under temp roots that are gone (this run's, and any a
    killed run left): the shared ``PYCACHE`` keeps only the checkouts' and the libraries' subtrees,
    not one more per run. A root that still exists (a teammate's run in progress) is kept."""
    for outer in {os.path.abspath(_OUTER_TMP), os.path.realpath(_OUTER_TMP)}:  # as given, and as pytest resolves it
        for sub in (Path(PYCACHE) / outer.lstrip(os.sep)).glob("gpuops-suite-*"):
            if not (Path(outer) / sub.name).exists():
                shutil.rmtree(sub, ignore_errors=True)


@pytest.fixture
def gpuops_home(tmp_path, monkeypatch):
    """An isolated gpuops: its own data dir and SQLite ledger, no user config, no GPUOPS_* leaks.

    Returns the data dir. Subprocess CLI runs inherit the same environment (see ``cli_env``).
    """
    for k in list(os.environ):
        if k.startswith("GPUOPS_"):
            monkeypatch.delenv(k, raising=False)
    data = tmp_path / "gpuops-data"
    monkeypatch.setenv("GPUOPS_DATA_DIR", str(data))
    monkeypatch.setenv("GPUOPS_LEDGER_URL", f"sqlite:///{data / 'ledger.db'}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))  # the ledger spool (ledger/store.py)
    monkeypatch.setenv("GPUOPS_SPOOL_FALLBACK_DIR", str(tmp_path / "spool-fallback"))  # its second place
    monkeypatch.chdir(tmp_path)
    return data


@pytest.fixture
def cli_env(gpuops_home):
    """Environment for running ``python -m gpuops`` as a subprocess against ``gpuops_home``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


class CliResult:
    """What an in-process CLI run gave: ``returncode``, ``stdout``, ``stderr`` (as
    ``subprocess.CompletedProcess`` names them, so a test reads the same either way)."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def __repr__(self) -> str:
        return f"CliResult(returncode={self.returncode}, stdout={self.stdout!r}, stderr={self.stderr!r})"


def cli_in_process(*args: str, env: dict | None = None, input: str | None = None, whole_env: bool = False) -> CliResult:
    """Run ``gpuops *args`` in this process through typer's ``CliRunner`` isolation, via the real
    entry point (``gpuops.cli.app.main``: its exit codes and one-line errors); returns its CliResult.

    ``env`` adds variables for this one run; with ``whole_env`` it is the whole environment, as a
    subprocess started with ``env=`` would see it (every other variable is unset meanwhile). A
    changed ``TZ`` is applied (``time.tzset``) for the run and undone after it; the handlers of
    SIGINT, SIGTERM and SIGHUP a command sets are put back after it. stdin is ``input``."""
    import signal as _signal
    import time as _time

    from typer.testing import CliRunner

    from gpuops.cli.app import main

    overlay: dict[str, str | None] = dict(env or {})
    if whole_env:
        overlay.update({k: None for k in os.environ if k not in overlay})
    tz_changes = "TZ" in overlay and overlay["TZ"] != os.environ.get("TZ")
    argv = sys.argv
    handlers = {sig: _signal.getsignal(sig) for sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP)}
    with CliRunner().isolation(input=input, env=overlay) as (out, err, _):  # type: ignore[arg-type]
        sys.argv = ["gpuops", *args]
        if tz_changes:
            _time.tzset()
        code = 0
        try:
            main(fast_exit=False)  # never os._exit inside pytest
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            sys.argv = argv
            for sig, handler in handlers.items():
                if handler is not None:
                    _signal.signal(sig, handler)
        sys.stdout.flush()
        sys.stderr.flush()
        result = CliResult(code, out.getvalue().decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace"))
    if tz_changes:
        _time.tzset()
    return result


@pytest.fixture
def cli(gpuops_home):
    """``cli(*args, env=None, input=None) -> CliResult``: ``cli_in_process`` against ``gpuops_home``
    (``env`` adds variables for this one run). For argument handling, bad input and what a command
    reads or prints (milliseconds); a test of what `up` starts on a box, or of signals, runs
    ``gpuops_cmd`` in a subprocess instead (e2e lane)."""

    def run(*args: str, env: dict | None = None, input: str | None = None) -> CliResult:
        return cli_in_process(*args, env=env, input=input)

    return run


def gpuops_cmd(*args: str) -> list[str]:
    """argv for running the CLI of this checkout in a subprocess."""
    return [sys.executable, "-m", "gpuops", *args]
