"""One job of a sweep, in a process of its own: `up`'s own path (``request.build`` then ``run_up``).

Run by the executor as ``python -m gpuops.sweep.child`` in a session of its own (a terminal's
Ctrl-C reaches the executor, never a job: the executor decides). Its input comes on stdin, one JSON
object, so env values travel through the pipe only, never a command line or a file:

    {"args": {UpArgs fields}, "sweep_id": "...", "run_id": "...", "result": "PATH"}

It writes ``result`` (0600, JSON: ``end_reason``, ``cost_usd``, or ``error`` and ``limit`` for
input `up` refused before renting) and exits with `up`'s status (0 job done, 2 refused, 130
interrupted, else 1). SIGTERM, SIGINT and SIGHUP end it as they end `up` (the rental is torn down
and booked). When the executor dies (its pid is no longer this process's parent), it SIGTERMs
itself: an executor SIGKILLed leaves no job running unwatched.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import fields as dataclass_fields, replace
from typing import Any

from gpuops.errors import BadInput
from gpuops.rental.launcher import Reporter

PARENT_POLL_S = 0.5  # how often the child looks whether its executor is still there


class LineReporter(Reporter):
    """`up`'s stages and job lines as plain lines on stdout (the job's log file)."""

    def stage(self, name: str, detail: str = "") -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {name} {detail}".rstrip(), flush=True)

    def step(self, line: dict) -> None:
        print(f"  step {line.get('step') or line.get('name')}: {line.get('status')}", flush=True)

    def job_line(self, text: str) -> None:
        print(text, flush=True)

    def warn(self, text: str) -> None:
        print(f"warning: {text}", flush=True)


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)  # `up`'s handler: tear down, book, exit
            return
        time.sleep(PARENT_POLL_S)


def _write(path: str, data: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)


def run(data: dict[str, Any]) -> int:
    """Run one sweep job as described by ``data`` (this module's docstring); its exit status."""
    from gpuops.rental import launcher
    from gpuops.rental.request import UpArgs, build
    from onbox.vocabulary import EndReason, exit_status

    fields = dict(data["args"])
    for f in dataclass_fields(UpArgs):  # JSON's lists back to UpArgs' tuples (env, workdir_exclude, job_args)
        if isinstance(f.default, tuple) and f.name in fields:
            fields[f.name] = tuple(fields[f.name])
    result = data["result"]
    try:
        req, settings = build(UpArgs(**fields))
        req = replace(req, sweep_id=data["sweep_id"], run_id=data["run_id"])
        summ = launcher.run_up(req, settings, LineReporter())
    except BadInput as e:
        print(f"error: {e}", flush=True)
        _write(result, {"error": str(e), "limit": e.limit})
        return 2
    _write(result, {k: summ.get(k) for k in ("end_reason", "cost_usd", "run", "error", "interrupted")})
    code = exit_status(summ["end_reason"])
    if summ.get("interrupted") and summ["end_reason"] == EndReason.INTERRUPTED:
        code = 130
    return code


def main() -> None:
    """The child's entry: stdin's JSON in, `up` run, the result file written, exit with `up`'s status."""
    data = json.loads(sys.stdin.read())
    threading.Thread(target=_watch_parent, args=(int(data["parent"]),), daemon=True, name="gpuops-parent").start()
    try:
        code = run(data)
    finally:
        from gpuops.notify import notifier

        notifier.drain()
    sys.exit(code)


if __name__ == "__main__":
    main()
