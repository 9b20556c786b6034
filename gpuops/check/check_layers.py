"""`gpuops check --live --rent`: each teardown layer proven on the user's own account.

One short rental per layer, all three at once, each a child ``gpuops up`` (the cheapest on-demand
offer, ``--max-price`` at that offer's price, experiment ``check``), SIGKILLed once the agent is
armed and the job has started, so that the box has only its agent:

* ``job_end``: a ``job_seconds`` job; the agent must destroy the box after it ends;
* ``idle``: a job that sleeps (no GPU use) with the idle window at ``[check] idle_minutes``;
* ``ttl``: a job that sleeps with the TTL at ``[check] ttl_minutes`` (counted from create).

Each layer's verdict says whether the provider showed the box gone (or stopped: billing for the
GPU over) by its due time + the agent's job-end grace + one sample + ``slack_seconds``, which
reason the agent gave, and the seconds from the trigger (the job's end, the idle window's end,
the TTL's end) to the provider showing it gone. The cap covers the whole check: every box's own
TTL is the wall cap (the TTL layer's its TTL), so the worst case -- every box to its TTL at the
offer's price -- is what is refused above ``max_usd``. Whatever happens (a failed layer, the wall
cap, Ctrl-C, an error here) every box is destroyed with the account key and its row closed before
``rent`` returns. Then the booked seconds and cost of each rental beside the provider's billing.
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuops.check.check import Finding, Verdict
from gpuops.errors import BadInput, GpuopsError
from gpuops.providers.base import InstanceStatus, OfferQuery, Provider, ProviderError
from onbox.vocabulary import EndReason, EventKind, RowStatus

if TYPE_CHECKING:
    from ledger.books import Books

EXPERIMENT = "check"
LAYERS = ("job_end", "idle", "ttl")
SLEEP_JOB_S = 3600  # the idle and TTL layers' job: longer than any check, ended with its box


@dataclass
class Layer:
    """One rental of the check and what was seen of it (times are this machine's epoch s)."""

    name: str
    note: str
    job: Path
    idle_minutes: str
    max_hours: float
    log: Path
    proc: subprocess.Popen | None = None
    session: str | None = None  # the id its `up` is given (--name): its box's label without the ledger
    row_id: str | None = None
    instance_id: str | None = None
    created_at: float | None = None
    job_started_at: float | None = None
    killed_at: float | None = None
    trigger_at: float | None = None
    due_at: float | None = None
    stopped_at: float | None = None
    gone_at: float | None = None
    status: dict | None = None
    box: Any = None
    done: bool = False
    finding: Finding | None = None
    data: dict = field(default_factory=dict)


def plan_cap(price_usd_h: float, settings, max_usd: float | None, max_minutes: float | None) -> dict:
    """The check's cap: its wall time, every box's TTL and the worst-case USD, refused above the limit.

    The check's cap: ``wall_s`` (``max_minutes`` or ``[check] max_minutes``), every box's TTL in
    hours (the wall cap; the TTL layer's own TTL), and ``worst_usd``: every box billed to its TTL at
    ``price_usd_h``. Raises BadInput, before anything is rented, when the worst case is above
    ``max_usd`` (or ``[check] max_usd``) or the TTL layer does not fit the wall cap, naming the flag
    value that would allow it."""
    c = settings.check
    usd = c.max_usd if max_usd is None else max_usd
    minutes = c.max_minutes if max_minutes is None else max_minutes
    if minutes <= c.ttl_minutes:
        raise BadInput(
            f"the TTL layer's TTL ({c.ttl_minutes:g} min) does not fit the check's wall cap ({minutes:g} min)",
            f"pass --max-minutes {c.ttl_minutes * 2:g} (or lower [check] ttl_minutes)",
        )
    hours = {"job_end": minutes / 60, "idle": minutes / 60, "ttl": c.ttl_minutes / 60}
    worst = price_usd_h * sum(hours.values())
    if worst > usd + 1e-9:
        raise BadInput(
            f"the check's worst case is {worst:.4f} USD (3 boxes at {price_usd_h:g} USD/h, each to its TTL), above the cap of {usd:g} USD",
            f"pass --max-usd {math.ceil(worst * 100 - 1e-9) / 100:.2f} to allow it, or a smaller --max-minutes",
        )
    return {
        "wall_s": minutes * 60,
        "max_hours": hours,
        "worst_usd": round(worst, 6),
        "max_usd": usd,
        "max_minutes": minutes,
    }


def cheapest(provider: Provider, n: int = len(LAYERS)) -> list:
    """The ``n`` cheapest trustworthy on-demand offers of ``provider``, any card.

    The ``n`` cheapest on-demand offers of ``provider`` (any card: the agent needs only python3),
    the untrustworthy ones dropped, cheapest first: the three rentals run at once, and on a
    marketplace of single machines (Vast) one offer is rented once, so each `up` may take the next
    one. Raises BadInput when there is none."""
    from gpuops.planning.offers import screen

    offers, _ = screen(provider.offers(OfferQuery(spot=False if provider.supports_spot else None)), 1)
    offers = sorted((o for o in offers if not o.spot), key=lambda o: (o.usd_per_hour, -o.reliability))
    if not offers:
        raise BadInput(
            f"no on-demand {provider.name} offer in stock to check with", "try again later, or --provider another one"
        )
    return offers[:n]


def _child_env() -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    if root not in env.get("PYTHONPATH", "").split(os.pathsep):  # this checkout's gpuops, whatever the cwd
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s whole session (`up` and anything it started) and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


class CheckRun:
    """The three layers of one check on one provider (module doc).

    ``clock``/``sleep``: seams for tests; ``on_line``: called with a progress line (stderr on a
    terminal)."""

    def __init__(
        self,
        settings,
        ledger: Books,
        provider: Provider,
        max_price: float,
        cap: dict,
        config: str | None = None,
        on_line: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.settings, self.ledger, self.provider, self.max_price, self.cap = settings, ledger, provider, max_price, cap
        self.config = config
        self.on_line = on_line or (lambda _l: None)
        self.clock, self.sleep = clock, sleep
        self.started = clock()
        self.run_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime(self.started)) + f"-{os.getpid()}"
        self.dir = settings.private_data_path() / "check" / self.run_id  # the layers' jobs and `up` logs, kept
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.layers: list[Layer] = []
        self.interrupted = False
        self.signalled: list = []  # the signals `_signals_raise` saw (``run``)

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> list[Finding]:
        """Run the three layers to their end, destroy what is left, and compare the books.

        Start the three layers, watch them to the end, destroy whatever is left (always), then
        compare the books with the provider's billing. Returns one finding per layer, then the
        books."""
        from gpuops.rental.launcher import Interrupted, _shielded, _signals_raise

        c = self.settings.check
        self._load()  # before Ctrl-C can raise: a first import it cuts would break the cleanup
        try:
            # Ctrl-C (KeyboardInterrupt), SIGTERM, SIGHUP (Interrupted): cleaned up below
            with _signals_raise() as self.signalled:
                for name in LAYERS:
                    self.layers.append(self._start(name, c))
                self._watch_all(c)
        except (KeyboardInterrupt, Interrupted):
            self.interrupted = True
        finally:
            with _shielded():  # a second Ctrl-C must not cut the cleanup
                self._cleanup()
        head = (
            [
                Finding(
                    "rent.interrupted",
                    Verdict.FAIL,
                    "interrupted: every box of the check is destroyed and its row closed",
                    "run `gpuops check --live --rent` again",
                )
            ]
            if self.interrupted
            else []
        )
        return head + [layer.finding for layer in self.layers if layer.finding is not None] + self._books()

    def _load(self) -> None:
        """Import what the watch and the cleanup use, and open the ledger's engine, before anything is rented.

        A KeyboardInterrupt that lands in a module's first import leaves that module half made (a
        library's module may then not import again), and every ledger read the cleanup needs
        would fail: no row closed, no row id to find a box by its label, every box left to its
        TTL. On a loaded machine that first import takes seconds, so a Ctrl-C lands in it."""
        from gpuops.teardown import lifecycle, reconcile  # noqa: F401  (the cleanup's end_rental; close_gone)

        self.ledger.rows_between(self.started, self.started)  # SQLAlchemy, the engine, the first read

    def _raise_lost(self) -> None:
        """Raise the signal that came while its exception was dropped (once per watch round).

        The signal handler raises wherever the main thread is, and an exception raised in a weakref
        callback or a ``__del__`` (SQLAlchemy's, say) is printed ("Exception ignored in") and dropped;
        ``_signals_raise`` then ignores every later signal, so the watch would go on to the wall cap
        with the user's Ctrl-C spent."""
        from gpuops.rental.launcher import raise_lost_signal

        raise_lost_signal(self.signalled)

    def _watch_all(self, c) -> None:
        wall_end = self.started + self.cap["wall_s"]
        while not all(layer.done for layer in self.layers):
            self._raise_lost()
            for layer in self.layers:
                if not layer.done:
                    self._step(layer)
            if self.clock() > wall_end:
                for layer in self.layers:
                    if not layer.done:
                        self._fail(
                            layer,
                            f"not over within the check's wall cap ({self.cap['max_minutes']:g} min)",
                            "raise --max-minutes, or look at the layer's log",
                        )
                return
            if not all(layer.done for layer in self.layers):
                self.sleep(c.poll_seconds)

    def _start(self, name: str, c) -> Layer:
        job = self.dir / f"{name}.sh"
        seconds = c.job_seconds if name == "job_end" else SLEEP_JOB_S
        job.write_text(f"# gpuops check: the {name} layer\nsleep {shlex.quote(f'{seconds:g}')}\n")
        session = f"check-{self.run_id}-{name}".replace("_", "-").lower()
        layer = Layer(
            name=name,
            note=f"gpuops check {self.run_id} {name}",
            job=job,
            idle_minutes=f"{c.idle_minutes:g}" if name == "idle" else "off",
            max_hours=self.cap["max_hours"][name],
            log=self.dir / f"{name}.log",
            session=session,
        )
        argv = [
            sys.executable,
            "-m",
            "gpuops",
            "up",
            "--job",
            str(job),
            "--provider",
            self.provider.name,
            "--experiment",
            EXPERIMENT,
            "--note",
            layer.note,
            "--name",
            session,
            "--max-hours",
            repr(layer.max_hours),
            "--idle-minutes",
            layer.idle_minutes,
            "--max-price",
            repr(self.max_price),
        ]
        if self.provider.supports_spot:
            argv.append("--on-demand")
        if self.config:
            argv += ["--config", self.config]
        with open(layer.log, "wb") as out:
            layer.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=_child_env(),
                start_new_session=True,
            )
        self.on_line(f"check: {name} layer: `gpuops up` started (pid {layer.proc.pid})")
        return layer

    def _row(self, layer: Layer):
        if layer.row_id is None:
            for r in self.ledger.rows_between(self.started - 60, self.clock() + 60):
                if r.note == layer.note:
                    layer.row_id = r.id
                    break
        return self.ledger.get(layer.row_id) if layer.row_id else None

    def _step(self, layer: Layer) -> None:
        now = self.clock()
        row = self._row(layer)
        if row is not None and row.instance_id:
            layer.instance_id, layer.created_at = row.instance_id, row.instance_created_at
        if layer.killed_at is None:
            rc = layer.proc.poll() if layer.proc is not None else None
            kinds = {e.kind for e in self.ledger.events(layer.row_id)} if layer.row_id else set()
            if {EventKind.ARMED, EventKind.JOB_STARTED} <= kinds and rc is None:
                assert layer.proc is not None and layer.row_id is not None  # _start ran it; kinds came from its row
                _kill(layer.proc)  # the laptop is gone: only the agent is left
                layer.killed_at = self.clock()
                layer.job_started_at = next(
                    (e.at for e in self.ledger.events(layer.row_id) if e.kind == EventKind.JOB_STARTED), layer.killed_at
                )
                self._due(layer)
                self.on_line(f"check: {layer.name} layer: agent armed, job started; `gpuops up` SIGKILLed")
            elif rc is not None:
                reason = row.end_reason if row is not None else None
                self._fail(
                    layer,
                    f"`gpuops up` ended by itself (exit {rc}{', ' + str(reason) if reason else ''}) before the agent was armed and "
                    f"the job started: {self._why(layer)}",
                    f"read {layer.log}",
                )
            return
        self._watch(layer, now)

    def _why(self, layer: Layer) -> str:
        """What the row's events say went wrong (the last provider error or failed stage)."""
        if layer.row_id:
            for e in reversed(self.ledger.events(layer.row_id)):
                if e.kind in (EventKind.PROVIDER_ERROR, EventKind.STAGE_FAILED, EventKind.ERROR):
                    return f"{e.kind}: {e.detail[:300]}"
            return "its row's events name no error (see the log)"
        return "no row was written (see the log)"

    def _due(self, layer: Layer) -> None:
        c, td = self.settings.check, self.settings.teardown
        if layer.name == "job_end":
            layer.trigger_at = layer.job_started_at + c.job_seconds
        elif layer.name == "idle":
            layer.trigger_at = layer.job_started_at + c.idle_minutes * 60
        else:
            layer.trigger_at = (layer.created_at or layer.job_started_at) + c.ttl_minutes * 60
        layer.due_at = layer.trigger_at + td.job_end_grace_seconds + td.sample_seconds + c.slack_seconds

    def _read_status(self, layer: Layer, inst) -> None:
        """The agent's status over SSH while the box lives; unreachable is no news.

        The agent's status over SSH while the box lives (its destroy record says which layer fired
        and whether its destroy failed); unreachable is no news. A fresh one from the row's own box
        (the provider answered its id with its label) is booked as a proof of life, as `up` and the
        watchdog book theirs (``reconcile.record_proof_of_life``): with the layer's `up` killed,
        nothing else tells the books how long the box lived once the provider no longer knows it
        (Vast, RunPod: no end time of a destroyed instance), and its row would end at its job's
        start."""
        from gpuops.agent.agentctl import read_status
        from gpuops.teardown.reconcile import Context, ours, record_proof_of_life

        try:
            if layer.box is None:
                own = self.provider.box(inst)
                if own is None and inst.ssh is not None:
                    from gpuops.box import remote

                    own = remote.open_box(
                        inst,
                        data_dir=self.settings.data_path(),
                        deadline=time.monotonic() + 5.0,
                        ssh_key=self.settings.up.ssh_key,
                        reconnect_s=0.0,
                    )
                layer.box = own
            if layer.box is not None:
                st = read_status(layer.box)
                if st:
                    layer.status = st
                    row = self._row(layer)
                    if row is not None and ours(row, inst) is not None:
                        ctx = Context(self.settings, ledger=self.ledger, providers={self.provider.name: self.provider})
                        record_proof_of_life(ctx, row, st, self.clock())
        except Exception:  # a box going away mid-read: what the check waits for
            self._close_box(layer)

    def _watch(self, layer: Layer, now: float) -> None:
        try:
            inst = self.provider.get(layer.instance_id) if layer.instance_id else None
        except ProviderError as e:
            if now > (layer.due_at or now):
                self._fail(
                    layer, f"the provider could not be asked about the box: {e}", "retry `gpuops check --live --rent`"
                )
            return
        if inst is None or inst.status == InstanceStatus.GONE:
            layer.gone_at = now
            if layer.box is not None:  # its last word, if the connection outlived the box for a moment
                self._read_status(layer, inst)
            self._held(layer)
            return
        if inst.status in (InstanceStatus.EXITED, InstanceStatus.STOPPED) and layer.stopped_at is None:
            layer.stopped_at = now
            self._read_status(layer, inst)  # its last word, if it still answers
            self._held(layer, stopped=True)
            return
        self._read_status(layer, inst)
        assert layer.due_at is not None and layer.trigger_at is not None  # _due set them (watched once killed)
        if now > layer.due_at:
            d = (layer.status or {}).get("destroy") or {}
            errors = (layer.status or {}).get("errors") or [""]
            last = errors[-1].get("msg", "") if isinstance(errors[-1], dict) else str(errors[-1])
            why = (
                f"the agent asked for {d.get('reason')} but its destroy failed ({d.get('attempts')} attempts; last: {last[:300]})"
                if d.get("reason")
                else "the agent never asked for the end"
            )
            self._fail(
                layer,
                f"the box was still up {now - layer.trigger_at:.0f} s after its {self._what(layer)} ({why})",
                self._fix(layer, d),
            )

    def _what(self, layer: Layer) -> str:
        return {"job_end": "job ended", "idle": "idle window ran out", "ttl": "TTL ran out"}[layer.name]

    def _fix(self, layer: Layer, d: dict) -> str:
        if d.get("reason"):
            return "the box's own key may not destroy it: read the agent's log on the box; `gpuops watchdog` covers such a box with the account key"
        if layer.name == "idle":
            return "a GPU above [teardown] idle_util_percent, a bootstrap step or an SSH session kept it busy: see the agent's last samples"
        return "read the agent's log on the box (<box>/.gpuops/agent.log)"

    def _held(self, layer: Layer, stopped: bool = False) -> None:
        """The box went (or stopped) on its own: book it, judge the reason the agent gave."""
        seen = layer.stopped_at if stopped else layer.gone_at
        assert (
            seen is not None and layer.trigger_at is not None and layer.row_id is not None
        )  # set by _watch, _due, _row
        measured = round(seen - layer.trigger_at, 1)
        d = (layer.status or {}).get("destroy") or {}
        reason = d.get("reason")
        self._close_box(layer)
        row = self.ledger.get(layer.row_id)
        if not stopped and row is not None and row.status != RowStatus.CLOSED:
            from gpuops.teardown.reconcile import Context, close_gone

            ctx = Context(self.settings, ledger=self.ledger, providers={self.provider.name: self.provider})
            close_gone(ctx, row, self.provider, None, layer.status)
            row = self.ledger.get(layer.row_id)
        reason = reason or (row.end_reason if row is not None else None)
        layer.data.update(
            session=layer.row_id, instance_id=layer.instance_id, seconds_to_gone=measured, agent_reason=reason
        )
        expected = EndReason.JOB_END.value if layer.name == "job_end" else layer.name
        if reason is not None and reason not in (expected, EndReason.AGENT_ENDED.value):
            self._fail(
                layer,
                f"the box went by {reason}, not by its {self._what(layer)} ({measured:+.0f} s from the trigger)",
                "raise [check] ttl_minutes: boot, arm and bootstrap must fit in it"
                if reason == "ttl"
                else "read the layer's log",
            )
            return
        if stopped:
            layer.done = True
            layer.finding = Finding(
                f"layer.{layer.name}",
                Verdict.WARN,
                f"the agent stopped the box {measured:.0f} s after its {self._what(layer)} "
                "(GPU billing over; its key may not terminate it): the check terminates it with the account key",
                "nothing: the watchdog and reconcile terminate a stopped box of ours",
                data=dict(layer.data),
            )
            return
        layer.done = True
        layer.finding = Finding(
            f"layer.{layer.name}",
            Verdict.OK,
            f"the box went by itself {measured:.0f} s after its {self._what(layer)}"
            + (f" (agent: {reason})" if reason else ""),
            data=dict(layer.data),
        )
        self.on_line(f"check: {layer.name} layer: gone {measured:.0f} s after the trigger")

    def _fail(self, layer: Layer, detail: str, fix: str) -> None:
        layer.done = True
        layer.data.update(session=layer.row_id, instance_id=layer.instance_id)
        layer.finding = Finding(f"layer.{layer.name}", Verdict.FAIL, detail, fix, data=dict(layer.data))
        self.on_line(f"check: {layer.name} layer FAILED: {detail}")

    def _close_box(self, layer: Layer) -> None:
        if layer.box is not None:
            try:
                layer.box.close()
            except Exception:
                pass
            layer.box = None

    # -- always ----------------------------------------------------------------------------------
    def _cleanup(self) -> None:
        """End every child, destroy every box of this check, close every row.

        Every child ended, every box of this check destroyed with the account key, every row closed
        (``lifecycle.end_rental``: idempotent, retried, waits on the provider only)."""
        for layer in self.layers:  # every child first: a layer that fails below must not keep one alive
            self._close_box(layer)
            if layer.proc is not None:
                _kill(layer.proc)
        for layer in self.layers:
            try:
                self._end_row(layer)
            except Exception as e:  # noqa: BLE001 -- the next layer's box is destroyed all the same
                layer.finding = Finding(
                    f"layer.{layer.name}",
                    Verdict.FAIL,
                    f"its row could not be closed: {e}",
                    "run `gpuops reconcile` (it closes the row from the provider's answer)",
                    data=dict(layer.data),
                )
        # A create that had not reached the row yet, or a ledger that cannot be read: each layer's
        # session id (its `up --name`) names its box's label, so the provider alone finds every box.
        ours = {sid for layer in self.layers for sid in (layer.session, layer.row_id) if sid}
        try:
            for inst in self.provider.list("gpuops-"):
                sid = inst.label[len("gpuops-") :]
                if inst.status != InstanceStatus.GONE and sid in ours:
                    self.provider.destroy(inst.id)
        except GpuopsError:
            pass

    def _end_row(self, layer: Layer) -> None:
        """Close ``layer``'s row if it is still open (``lifecycle.end_rental`` destroys its box)."""
        from gpuops.teardown.lifecycle import end_rental

        row = self._row(layer)
        if row is not None and row.status != RowStatus.CLOSED:
            # a box its agent stopped is booked with the agent's reason; one the check ends, as manual
            reason = EndReason.parse(layer.data.get("agent_reason")) if layer.stopped_at is not None else None
            reason = reason or (EndReason.INTERRUPTED if layer.finding is None else EndReason.MANUAL)
            end_rental(
                self.ledger,
                self.provider,
                row.id,
                reason,
                by=f"check:{os.getpid()}",
                detail=f"gpuops check: {layer.name} layer over",
            )
            if layer.finding is None:
                layer.data.update(session=layer.row_id, instance_id=layer.instance_id)
                layer.finding = Finding(
                    f"layer.{layer.name}",
                    Verdict.FAIL,
                    "interrupted before the layer was proven; its box is destroyed",
                    "run `gpuops check --live --rent` again",
                    data=dict(layer.data),
                )

    def _books(self) -> list[Finding]:
        """Booked seconds and cost of each rental beside the provider's billing."""
        got = [self.ledger.get(layer.row_id) for layer in self.layers if layer.row_id]
        rows = [r for r in got if r is not None and r.instance_id]
        if not rows:
            return []
        booked_s = sum(r.billed_seconds or 0 for r in rows)
        booked = sum(r.cost_usd or 0.0 for r in rows)
        data: dict = {
            "booked_seconds": round(booked_s, 3),
            "booked_usd": round(booked, 6),
            "sessions": [r.id for r in rows],
        }
        try:
            lines = self.provider.billing(
                min(r.instance_created_at or r.created_at for r in rows) - 3600, self.clock() + 60
            )
        except ProviderError as e:
            return [
                Finding(
                    "books.check",
                    Verdict.PENDING,
                    f"booked {booked_s:.0f} s, {booked:.4f} USD; billing not read: {e}",
                    "run `gpuops check --live` later",
                    data=data,
                )
            ]
        ids = {str(r.instance_id) for r in rows}
        labels = {f"gpuops-{r.id}" for r in rows}
        mine = [c for c in lines if str(c.instance_id) in ids or getattr(c, "label", None) in labels]
        if not mine:
            return [
                Finding(
                    "books.check",
                    Verdict.PENDING,
                    f"booked {booked_s:.0f} s, {booked:.4f} USD; not billed yet",
                    "run `gpuops check --live` later",
                    data=data,
                )
            ]
        theirs = sum(c.usd for c in mine)
        data["billed_usd"] = round(theirs, 6)
        close = abs(theirs - booked) <= max(0.01, 0.05 * booked)
        return [
            Finding(
                "books.check",
                Verdict.OK if close else Verdict.WARN,
                f"booked {booked_s:.0f} s, {booked:.4f} USD; the provider billed {theirs:.4f} USD",
                "" if close else "gpuops ledger sync --apply books the provider's figures",
                data=data,
            )
        ]


def rent(
    settings,
    ledger: Books,
    provider: Provider,
    max_usd: float | None = None,
    max_minutes: float | None = None,
    config: str | None = None,
    on_line: Callable[[str], None] | None = None,
) -> list[Finding]:
    """``check --live --rent`` on ``provider`` (module doc).

    The cap first, at the dearest of the three cheapest offers (each `up` gets it as
    ``--max-price``; BadInput above the cap, nothing rented), then the three layers. Returns the
    findings (the cap, one per layer, then the books)."""
    offers = cheapest(provider)
    price = max(o.usd_per_hour for o in offers)
    cap = plan_cap(price, settings, max_usd, max_minutes)
    head = Finding(
        "rent.cap",
        Verdict.INFO,
        f"3 rentals from {offers[0].usd_per_hour:g} USD/h ({offers[0].card}), at most {price:g} USD/h; worst case "
        f"{cap['worst_usd']:.4f} USD of a {cap['max_usd']:g} USD cap, {cap['max_minutes']:g} min of wall time",
        data={**cap, "card": offers[0].card, "usd_per_hour": offers[0].usd_per_hour, "max_usd_per_hour": price},
    )
    return [head] + CheckRun(settings, ledger, provider, price, cap, config=config, on_line=on_line).run()
