"""The teardown rules, shared by the on-box agent (``agent.py``) and the laptop's ``gpuops watchdog``.

Pure functions, stdlib only, python3 >= 3.8: this file is shipped to the box byte for byte, so the
rule "what decides idle" lives in one place that both sides run.

Shapes (JSON-ready, because samples travel in the agent's status file):

* a GPU reading: ``{"index": int, "util": float|None, "mem_used_mib": float|None,
  "mem_total_mib": float|None}``; ``util`` is percent 0..100, None when the driver did not say
  (``[N/A]``, ``[Not Supported]``, ``[Unknown Error]`` ...).
* a sample: ``{"t": epoch seconds, "gpus": [reading...], "error": str|None, "bootstrap": bool,
  "ssh": int}``; ``error`` is set when nvidia-smi/NVML failed (driver gone, no GPU, timeout);
  ``bootstrap`` is True while a bootstrap step runs; ``ssh`` counts interactive SSH sessions
  (None: not looked, because a GPU was busy anyway).
  A sample may stand for a run of equal samples (``merge_sample``): then ``t`` is the first
  one's time, ``t_last`` the last one's, ``n`` how many, and ``gpus`` the newest reading.
* settings: any object or mapping with ``max_hours`` (h), ``idle_minutes`` (min, or "off"),
  ``idle_util_percent`` (%), ``sample_seconds`` (s), ``job_end_grace_seconds`` (s),
  ``fetch_deadline_seconds`` (s), ``max_session_usd`` (USD, or None) -- the fields of ``gpuops.config.TeardownSettings`` -- and
  ``no_job_seconds`` (s, the agent's bounded wait for a job after arm; default ``NO_JOB_SECONDS``).
* state: ``BoxState`` (billing start, job end, price, the armed-no-job wait, the laptop's presence).

Rule order (first that applies wins): ttl, session_cap, job end (job_end / job_failed), no_job,
idle. While the laptop's presence lease is fresh (it is copying results back), job end, no_job and
idle wait, up to the lease's hard deadline; ttl and session_cap never wait.

Times: every epoch second given to ``decide`` must come from one clock. The agent passes the
ledger's timeline (the laptop's clock at arm + the box's monotonic clock since), never the box's
wall clock, so a box clock hours off cannot fire or suppress a rule.
"""

from __future__ import annotations

import math

# No dataclasses/typing here: on the box this module is imported by the agent, whose resident
# memory is a target (bench/bench_agent.py); the annotations below are never evaluated, and their
# names are imported for the type checker only (``TYPE_CHECKING`` is False at run time, as typing's).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# The query the agent runs; the parser expects exactly these four columns in this order.
SMI_QUERY = "index,utilization.gpu,memory.used,memory.total"
SMI_ARGS = ["--query-gpu=" + SMI_QUERY, "--format=csv,noheader,nounits"]

KEEP = "keep"
DESTROY = "destroy"

if TYPE_CHECKING:  # the type checker reads the package
    from .vocabulary import EndReason
else:
    try:  # imported as onbox.policy on the laptop, as a plain module next to agent.py on the box
        from .vocabulary import EndReason
    except ImportError:
        from vocabulary import EndReason

# End reasons this file can return (onbox/vocabulary.py; enum here costs nothing: re imports it).
REASON_TTL = EndReason.TTL
REASON_SESSION_CAP = EndReason.SESSION_CAP
REASON_JOB_END = EndReason.JOB_END
REASON_JOB_FAILED = EndReason.JOB_FAILED
REASON_NO_JOB = EndReason.NO_JOB  # armed, then neither a job nor the laptop came for no_job_seconds
REASON_IDLE = EndReason.IDLE

# -- the teardown defaults --------------------------------------------------------------------------
# Stated once, here: the agent falls back to them when its settings lack one, the laptop's settings
# default to them (gpuops.config.TeardownSettings), and infra.example.toml shows them
# (tests/core/test_example_config.py checks it does).
MAX_HOURS = 4.0  # hard TTL per box, hours
IDLE_MINUTES = 15.0  # the GPU idle window, minutes
IDLE_UTIL_PERCENT = 5.0  # a GPU at or under this utilization (%) counts as idle
SAMPLE_SECONDS = 10.0  # how often the agent samples the GPUs, seconds
JOB_END_GRACE_SECONDS = 30.0  # the agent destroys the box this long after the job's exit marker, seconds
KILL_GRACE_SECONDS = 10.0  # a local box's destroy: TERM, then KILL after this many seconds
# From the job's exit, the one deadline for what must come home before the box is destroyed: the
# rest of the job log, then the results, fetched in bulk (seconds). Past it the box is destroyed
# anyway and the kept log says where it stops; the agent holds a job-end destroy for the laptop's
# presence lease no longer than this plus the grace.
FETCH_DEADLINE_SECONDS = 900.0

# The armed-no-job wait when settings do not say: long enough for a slow bootstrap upload with the
# laptop present (it holds a presence lease meanwhile), short against a 4 h TTL.
NO_JOB_SECONDS = 900.0

# A hole in the sample series longer than this many sample intervals (plus slack) breaks an idle
# streak: we do not know what the GPU did while nobody looked (agent restarted, box suspended).
MAX_GAP_SAMPLES = 3
MAX_GAP_SLACK_S = 5.0


# -- parsing ---------------------------------------------------------------------------------------
def _num(field: str) -> float | None:
    """A csv cell as a float.

    None for ``[N/A]``, ``[Not Supported]``, ``N/A`` and anything else that is not a finite number."""
    f = field.strip()
    if f.endswith("%"):
        f = f[:-1].strip()
    if f.endswith("MiB"):
        f = f[:-3].strip()
    try:
        v = float(f)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def parse_smi(stdout: str, returncode: int = 0, stderr: str = "") -> dict[str, Any]:
    """Parse the output of ``nvidia-smi`` run with ``SMI_ARGS`` (``--query-gpu=SMI_QUERY``, CSV).

    Returns ``{"gpus": [reading...], "error": None|"why", "warning": None|"what"}``.

    * Rows are trusted whatever the exit status when every non-empty line either is a row of four
      cells or is a ``WARNING:`` line: nvidia-smi exits non-zero with valid rows when it only
      warns (exit 14, "WARNING: infoROM is corrupted at gpu 0000:04:00.0"; exit codes in
      ``nvidia-smi --help``/its man page, "RETURN VALUE"). Then ``error`` is None and ``warning``
      says what it printed.
    * ``error`` is set when the output cannot be trusted as a whole: no GPU row (driver failure:
      "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", "No devices
      were found"), or a line that is neither a row nor a warning.
    * Cells like ``[N/A]`` / ``[Not Supported]`` do not make an error: that GPU's value is None,
      which ``classify`` treats as unknown (never idle).
    """
    gpus: list[dict[str, Any]] = []
    bad: list[str] = []
    warnings: list[str] = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line:
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4 or _num(cells[0]) is None:
            (warnings if line.upper().startswith("WARNING") else bad).append(line)
            continue
        gpus.append(
            {
                "index": int(_num(cells[0]) or 0),
                "util": _num(cells[1]),
                "mem_used_mib": _num(cells[2]),
                "mem_total_mib": _num(cells[3]),
            }
        )
    warnings += [w.strip() for w in stderr.splitlines() if w.strip().upper().startswith("WARNING")]
    if bad or not gpus:
        if returncode != 0:
            text = (stderr.strip() or stdout.strip() or "no output").splitlines()[0]
            return {"gpus": gpus, "error": "nvidia-smi exited %d: %s" % (returncode, text[:200]), "warning": None}
        if bad:
            return {"gpus": gpus, "error": "unparsed nvidia-smi line: %s" % bad[0][:200], "warning": None}
        return {"gpus": [], "error": "no GPU reported", "warning": None}
    warning = None
    if returncode != 0 or warnings:
        first = warnings[0] if warnings else (stderr.strip().splitlines() or ["no message"])[0]
        warning = ("nvidia-smi exited %d: %s" % (returncode, first[:200])) if returncode else first[:200]
    return {"gpus": gpus, "error": None, "warning": warning}


# -- one sample ------------------------------------------------------------------------------------
def classify(sample: dict[str, Any], util_percent: float) -> str:
    """``"busy"``, ``"idle"`` or ``"unknown"`` for one sample.

    busy: a bootstrap step runs, an interactive SSH session is open, or any GPU is above
    ``util_percent``. idle: every GPU reported a number at or below ``util_percent``. unknown:
    anything else (no GPU, driver error, a ``[N/A]`` cell with no GPU busy): never counts as idle.
    """
    if sample.get("bootstrap"):
        return "busy"
    if sample.get("ssh"):
        return "busy"
    gpus = sample.get("gpus") or []
    if any(g.get("util") is not None and g["util"] > util_percent for g in gpus):
        return "busy"
    if sample.get("error") or not gpus or any(g.get("util") is None for g in gpus):
        return "unknown"
    return "idle"


# -- the decision ----------------------------------------------------------------------------------
class BoxState:
    """What the rules need besides samples. Times are epoch seconds; price is USD/hour.

    ``started_at``: billing start (the instance's create time; the agent's start when unknown).
    ``job_ended_at``: when the job exited (from ``exit_code``), None while it runs or before it starts.
    ``no_job_since``: since when the box has been armed with no job, no bootstrap, no SSH session
    and no laptop presence (None: a job started, or something is happening; the rule is off).
    ``presence_until``: the laptop's presence lease is fresh until then (None: no lease);
    ``presence_deadline``: the hard limit of what presence may defer (None: only the TTL).
    """

    __slots__ = (
        "started_at",
        "job_ended_at",
        "job_exit_code",
        "usd_per_hour",
        "no_job_since",
        "presence_until",
        "presence_deadline",
    )

    def __init__(
        self,
        started_at: float,
        job_ended_at: float | None = None,
        job_exit_code: int | None = None,
        usd_per_hour: float | None = None,
        no_job_since: float | None = None,
        presence_until: float | None = None,
        presence_deadline: float | None = None,
    ):
        self.started_at = started_at
        self.job_ended_at = job_ended_at
        self.job_exit_code = job_exit_code
        self.usd_per_hour = usd_per_hour
        self.no_job_since = no_job_since
        self.presence_until = presence_until
        self.presence_deadline = presence_deadline

    def __repr__(self) -> str:
        return "BoxState(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BoxState) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BoxState:
        return cls(
            started_at=float(d["started_at"]),
            job_ended_at=d.get("job_ended_at"),
            job_exit_code=d.get("job_exit_code"),
            usd_per_hour=d.get("usd_per_hour"),
            no_job_since=d.get("no_job_since"),
            presence_until=d.get("presence_until"),
            presence_deadline=d.get("presence_deadline"),
        )


class Decision:
    """``action`` is "keep" or "destroy".

    ``reason`` one of job_end, job_failed, no_job, idle, ttl, session_cap (None to keep);
    ``explanation`` is one human line with the numbers; ``idle_since`` the start of the current idle
    streak (epoch s) or None; ``next_due`` the earliest epoch second at which a rule could fire if
    nothing changes (the agent wakes then), or None."""

    __slots__ = ("action", "reason", "explanation", "idle_since", "next_due")

    def __init__(
        self,
        action: str,
        reason: str | None,
        explanation: str,
        idle_since: float | None = None,
        next_due: float | None = None,
    ):
        self.action = action
        self.reason = reason
        self.explanation = explanation
        self.idle_since = idle_since
        self.next_due = next_due

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self) -> str:
        return "Decision(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Decision) and self.as_dict() == other.as_dict()


def _get(settings: Any, name: str, default: Any = None) -> Any:
    if isinstance(settings, dict):
        return settings.get(name, default)
    return getattr(settings, name, default)


def idle_minutes_of(settings: Any) -> float | None:
    """The idle window in minutes, or None when the idle layer is "off"."""
    v = _get(settings, "idle_minutes", IDLE_MINUTES)
    if v is None or (isinstance(v, str) and v.strip().lower() == "off"):
        return None
    return float(v)


def idle_streak(samples: list[dict[str, Any]], util_percent: float, sample_seconds: float) -> float | None:
    """When the current idle streak began (epoch s), or None when the newest sample is not idle.

    Epoch time of the first sample of the newest unbroken run of idle samples (ending at the newest
    sample), or None when the newest sample is not idle. A gap longer than ``MAX_GAP_SAMPLES``
    intervals (+ slack) between samples breaks the run."""
    max_gap = MAX_GAP_SAMPLES * sample_seconds + MAX_GAP_SLACK_S
    since = None
    later_t = None
    for s in reversed(samples):
        if classify(s, util_percent) != "idle":
            break
        if later_t is not None and later_t - s.get("t_last", s["t"]) > max_gap:
            break
        since = s["t"]
        later_t = s["t"]
    return since


def _same_kind(a: dict[str, Any], b: dict[str, Any], util_percent: float) -> bool:
    return (
        classify(a, util_percent) == classify(b, util_percent)
        and a.get("error") == b.get("error")
        and bool(a.get("bootstrap")) == bool(b.get("bootstrap"))
        and a.get("ssh") == b.get("ssh")
        and len(a.get("gpus") or []) == len(b.get("gpus") or [])
    )


def merge_sample(
    samples: list[dict[str, Any]], sample: dict[str, Any], util_percent: float, sample_seconds: float
) -> bool:
    """Append ``sample`` to ``samples``, folding it into the newest entry when they say the same.

    Append ``sample`` to ``samples`` (in place), folding it into the newest entry when both classify
    alike, say the same about onbox/SSH/errors and no gap longer than the idle rule's
    ``MAX_GAP_SAMPLES`` intervals separates them. Returns True when a new entry was made (what the
    rules read changed), False when it only extended the newest run. The idle rule reads a run
    exactly as it reads the samples it stands for, so an idle GPU for hours is one entry."""
    if samples:
        last = samples[-1]
        gap = sample["t"] - last.get("t_last", last["t"])
        if gap <= MAX_GAP_SAMPLES * sample_seconds + MAX_GAP_SLACK_S and _same_kind(last, sample, util_percent):
            last["t_last"] = sample["t"]
            last["n"] = int(last.get("n", 1)) + 1
            last["gpus"] = sample.get("gpus") or []
            return False
    samples.append(sample)
    return True


def _fmt_s(seconds: float) -> str:
    return "%.0f s" % seconds if seconds < 600 else "%.1f min" % (seconds / 60.0)


def decide(samples: list[dict[str, Any]], now: float, state: BoxState, settings: Any) -> Decision:
    """Keep or destroy the box, and why.

    ``samples``: oldest first (see module doc); ``now``: epoch seconds; ``state``: ``BoxState`` or
    its dict; ``settings``: teardown settings (module doc). Rules, first that applies wins:

    * ttl: ``now >= started_at + max_hours*3600``, whatever else is happening;
    * session_cap: ``max_session_usd`` set and ``(now - started_at)/3600 * usd_per_hour`` reached it;
    * job end: the job exited at ``job_ended_at`` and ``job_end_grace_seconds`` have passed
      (reason ``job_end`` for exit code 0, else ``job_failed``);
    * no_job: ``state.no_job_since`` is set (the agent's armed-no-job wait) and
      ``no_job_seconds`` have passed since;
    * idle: the idle layer is on and the newest run of idle samples (``classify``) began at least
      ``idle_minutes*60`` s ago. Unknown readings break the run: they are never idle.

    Job end, no_job and idle are deferred while ``state.presence_until`` (capped by
    ``state.presence_deadline``) is in the future: the laptop is copying results back.
    """
    if isinstance(state, dict):
        state = BoxState.from_dict(state)
    due: list[float] = []

    ttl_at = state.started_at + float(_get(settings, "max_hours", MAX_HOURS)) * 3600.0
    if now >= ttl_at:
        return Decision(
            DESTROY,
            REASON_TTL,
            "ttl: box up %s, max_hours %.4g h reached"
            % (_fmt_s(now - state.started_at), float(_get(settings, "max_hours"))),
        )
    due.append(ttl_at)

    cap = _get(settings, "max_session_usd")
    price = state.usd_per_hour
    if cap is not None and price:
        cap_at = state.started_at + float(cap) / float(price) * 3600.0
        spent = (now - state.started_at) / 3600.0 * float(price)
        if now >= cap_at:
            return Decision(
                DESTROY,
                REASON_SESSION_CAP,
                "session_cap: $%.4f spent at $%.4f/h reached max_session_usd $%.2f" % (spent, float(price), float(cap)),
            )
        due.append(cap_at)

    soft = None  # the first of job end / no_job / idle that says destroy; presence may defer it
    if state.job_ended_at is not None:
        grace = float(_get(settings, "job_end_grace_seconds", JOB_END_GRACE_SECONDS))
        end_at = float(state.job_ended_at) + grace
        code = state.job_exit_code
        reason = REASON_JOB_END if code in (0, None) else REASON_JOB_FAILED
        if now >= end_at:
            soft = Decision(
                DESTROY,
                reason,
                "%s: job exited (code %s) %s ago, grace %s"
                % (reason, code, _fmt_s(now - float(state.job_ended_at)), _fmt_s(grace)),
            )
        else:
            due.append(end_at)

    if soft is None and state.job_ended_at is None and state.no_job_since is not None:
        wait = float(_get(settings, "no_job_seconds", NO_JOB_SECONDS) or NO_JOB_SECONDS)
        no_job_at = float(state.no_job_since) + wait
        if now >= no_job_at:
            soft = Decision(
                DESTROY,
                REASON_NO_JOB,
                "%s: armed with no job, no bootstrap and no laptop for %s (wait %s)"
                % (REASON_NO_JOB, _fmt_s(now - float(state.no_job_since)), _fmt_s(wait)),
            )
        else:
            due.append(no_job_at)

    idle_min = idle_minutes_of(settings)
    util = float(_get(settings, "idle_util_percent", IDLE_UTIL_PERCENT))
    sample_s = float(_get(settings, "sample_seconds", SAMPLE_SECONDS))
    since = idle_streak(samples, util, sample_s)
    last = samples[-1] if samples else None
    what = classify(last, util) if last else "no samples"
    if soft is None and idle_min is not None and since is not None:
        window = idle_min * 60.0
        if now - since >= window:
            soft = Decision(
                DESTROY,
                REASON_IDLE,
                "idle: no GPU above %.4g%% for %s (window %s), no bootstrap step, no SSH session"
                % (util, _fmt_s(now - since), _fmt_s(window)),
                idle_since=since,
            )
        else:
            due.append(since + window)
    if soft is not None:
        soft.idle_since = since
        held_until = state.presence_until
        if held_until is not None and state.presence_deadline is not None:
            held_until = min(held_until, float(state.presence_deadline))
        if held_until is not None and now < held_until:
            due.append(held_until)
            return Decision(
                KEEP,
                None,
                "keep: laptop present (results copy-back) for %s more; then %s"
                % (_fmt_s(held_until - now), soft.explanation),
                idle_since=since,
                next_due=min(due),
            )
        return soft
    why = _keep_why(last, what, util, since, now)
    return Decision(KEEP, None, why, idle_since=since, next_due=min(due) if due else None)


def _keep_why(last: dict[str, Any] | None, what: str, util: float, since: float | None, now: float) -> str:
    if last is None:
        return "keep: no samples yet"
    if what == "idle":
        return "keep: idle for %s so far" % _fmt_s(now - (since if since is not None else now))
    if what == "unknown":
        return "keep: GPU state unknown (%s); not idle" % (last.get("error") or "a GPU did not report utilization")
    parts = []
    if last.get("bootstrap"):
        parts.append("bootstrap step running")
    if last.get("ssh"):
        parts.append("%d SSH session(s) open" % last["ssh"])
    busy = [g for g in last.get("gpus") or [] if g.get("util") is not None and g["util"] > util]
    if busy:
        parts.append("GPU %s at %.0f%%" % (busy[0]["index"], busy[0]["util"]))
    return "keep: busy (%s)" % ", ".join(parts)
