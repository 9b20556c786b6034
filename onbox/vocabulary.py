"""The words of a rental's life, in one dependency-free place.

``gpuops/`` (the laptop), ``ledger/`` (the books) and ``onbox/`` (the box: stdlib only,
python >= 3.8, shipped byte for byte) all import this module, so an end reason, an event kind or a
row status is spelled once. Every enum is ``str``-valued: a member *is* its string, so ledger rows,
JSON documents and the agent's status file hold exactly the same text as before, and
``EndReason.JOB_END == "job_end"`` is true.

``str(member)`` and ``f"{member}"`` give the plain value on every Python version (3.12 changed the
default format of str-mixin enums to ``ClassName.MEMBER``; ``_Word`` pins it).
"""

import enum

TYPE_CHECKING = False  # as typing's, without importing typing on the box: names for the type checker only
if TYPE_CHECKING:
    from typing import TypeVar

    _W = TypeVar("_W", bound="_Word")


class _Word(str, enum.Enum):
    """A str-valued enum whose str() and format() are the bare value."""

    def __str__(self):
        return str.__str__(self)

    def __format__(self, spec):
        return str.__format__(str.__str__(self), spec)

    # Enum hashes members by name; a word must hash as its text so "closed" in {EventKind.CLOSED}.
    __hash__ = str.__hash__

    @classmethod
    def parse(cls: "type[_W]", text: object) -> "_W | None":
        """The member spelled ``text``, or None when ``text`` is not one (untrusted input)."""
        try:
            return cls(text)
        except ValueError:
            return None


class EndReason(_Word):
    """Why a rental ended: ``sessions.end_reason``.

    One value per row, chosen by whoever closes it (a reason requested earlier with
    ``Ledger.request_end`` wins). README lists them for users."""

    # the job
    JOB_END = "job_end"  # the job exited 0
    JOB_FAILED = "job_failed"  # the job exited non-zero, or its wrapper died
    # the laptop / a person
    INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM, SIGHUP to `up`, or `up` killed before arming
    MANUAL = "manual"  # `gpuops down`
    # before the job
    PROVISION_FAILED = "provision_failed"  # no instance was made (offers gone, create refused); $0
    SSH_NEVER_READY = "ssh_never_ready"  # the box never answered SSH by ready_timeout_seconds
    BOOTSTRAP_FAILED = "bootstrap_failed"  # a bootstrap step failed or ran past its timeout
    PROVIDER_ERROR = "provider_error"  # a provider call failed after the instance existed
    DELIVERY_MISMATCH = "delivery_mismatch"  # the created instance is not the offer (card, GPU count, price): destroyed
    ERROR = "error"  # a bug or unforeseen failure in gpuops itself (traceback in the log)
    # teardown layers 2 and 3 (agent on the box, watchdog on the laptop)
    IDLE = "idle"  # GPU under the threshold for the idle window
    NO_JOB = "no_job"  # armed, then no job, bootstrap, SSH session or laptop presence for no_job_seconds (the agent)
    TTL = "ttl"  # max_hours reached
    SESSION_CAP = "session_cap"  # max_session_usd reached
    BALANCE_FLOOR = "balance_floor"  # provider balance under balance_floor_usd
    MONTHLY_CAP = "monthly_cap"  # month-to-date spend reached monthly_cap_usd
    # nobody saw the end
    PREEMPTED = "preempted"  # an interruptible box the provider stopped (seen stopped/exited)
    AGENT_ENDED = "agent_ended"  # gone while its agent was armed, reason never read (the agent, or a console delete)
    # books only
    IMPORTED = "imported"  # a row from `ledger import` (a rental gpuops did not run)


END_REASONS = tuple(r.value for r in EndReason)


class RunEnd(_Word):
    """Why a run stopped re-renting, when it was not its last rental's own end reason.

    Why a run (``runs.end_reason``, the user's job across rentals) stopped re-renting, when it was
    not the last rental's own end reason (job_end, job_failed, interrupted, ... end a run as they
    end its rental; ttl and session_cap also say the run's whole budget ran out)."""

    ATTEMPTS_SPENT = "attempts_spent"  # every attempt was taken back (recover N: N + 1 rentals)
    NO_OFFER = "no_offer"  # no offer fit the next rental (same plan, --max-price, provider)


# Every word a run may end with: a rental's end reason, or a run's own.
RUN_ENDS = END_REASONS + tuple(r.value for r in RunEnd)

# Exit status of `gpuops up` by the reason its row was closed with (one table; cli.py uses it).
# 0 only for a job that ended well; 130 like a shell's Ctrl-C; 3 for "taken down by `gpuops down`
# from elsewhere", so a script can tell it from a failure; everything else 1. (2 is bad input.)
EXIT_STATUS: "dict[EndReason | None, int]" = {EndReason.JOB_END: 0, EndReason.INTERRUPTED: 130, EndReason.MANUAL: 3}


def exit_status(reason):
    """Exit status of `gpuops up` for a row closed with ``reason`` (see EXIT_STATUS; default 1)."""
    return EXIT_STATUS.get(EndReason.parse(reason), 1)


class RowStatus(_Word):
    """``sessions.status``: intent row -> instance known -> closed."""

    PROVISIONING = "provisioning"
    RUNNING = "running"
    CLOSED = "closed"


class EventKind(_Word):
    """``events.kind``: every transition or action on a session. Only kinds something writes."""

    # `up`'s stages (launcher.STAGES): one event when a stage is entered or done
    INTENT = "intent"  # the row was written (before create)
    CREATE = "create"  # create is being called
    CREATED = "created"  # the instance exists; row has its id and price
    CREATE_LEFT_INSTANCE = "create_left_instance"  # a failed create still made an instance (booked)
    OFFER_SKIPPED = "offer_skipped"  # an offer was gone; the next one is tried
    READY = "ready"
    ARMED = "armed"  # the on-box agent runs: from here the box can destroy itself
    BOOTSTRAPPED = "bootstrapped"
    BOOTSTRAP_TIMEOUT = "bootstrap_timeout"
    TTL = "ttl"  # max_hours ran out while `up` watched
    JOB_STARTED = "job_started"
    JOB_EXITED = "job_exited"  # detail {"exit_code"}; written by `up` or a watchdog that saw it
    WRAPPER_LOST = "wrapper_lost"
    TOKENS = "tokens"  # tokens booked (by `up`'s collect, or `ledger tokens`)
    LOG_KEPT = "log_kept"  # detail {"complete", "bytes", "fetched", "by"}: the kept copy of the job log, finished by whoever ended the rental
    LIVE = "live"  # detail {"tokens", "idle_since", "by"}: the box's last status as `up` or a watchdog read it (what `ps` shows)
    VOLUME = "volume"  # detail {"volume"}: the persistent volume mounted at create (gpuops.providers.volumes)
    RESULTS_COPIED = "results_copied"  # detail: gpuops.rental.results.CopyReport (sizes and sha256 verified)
    RESULTS_COPY_FAILED = "results_copy_failed"  # same detail; what did not come home is lost with the box
    STAGE_FAILED = "stage_failed"  # detail {"stage", "reason", "error"}: what the stage table booked
    PROVIDER_ERROR = "provider_error"
    ERROR = "error"
    # ending (gpuops/lifecycle.end_rental)
    END_REQUESTED = "end_requested"  # detail {"reason", "by", ...}: written before any destroy
    DESTROY_FAILED = "destroy_failed"  # one destroy attempt failed (retried)
    DESTROY_GAVE_UP = "destroy_gave_up"  # every attempt failed: the row stays open for reconcile
    DESTROYED = "destroyed"  # detail {"instance", "by", "end_source", "already_gone"}
    CLOSED = "closed"  # the row was closed (detail: the end reason)
    # reconcile / watchdog
    ADOPTED = "adopted"  # an open row without instance id got the instance its label names
    STALE_INTENT = "stale_intent"  # an intent row never got an instance by the deadline
    ORPHAN_DESTROYED = "orphan_destroyed"  # an instance whose row was already closed
    UNKNOWN = "unknown"  # the instance is not visible to the key held here and the row has no account: left open
    DELIVERY_MISMATCH = "delivery_mismatch"  # detail {"ordered", "delivered", "problem"}: the box is not the order
    SPOOL_REPLAYED = "spool_replayed"  # writes that failed earlier were replayed from the spool
    REBOOKED = "rebooked"  # the ledger file vanished under `up`; the row was booked again from memory
    DESTROY_REFUSED = "destroy_refused"  # detail {"instance", "expected_label", "label", ...}: the id answers for an instance not ours
    NOTE = "note"  # `ledger note`
    # runs (up --recover): the user's job across rentals
    TAKEN_BACK = "taken_back"  # detail {"stage", "status", "raw_status"}: the provider shows the interruptible box stopped/exited/offline
    RECOVER = (
        "recover"  # detail {"run", "attempt", "after", "hours_left", "usd_left"}: this rental re-rents a run's job
    )
    RESUME = "resume"  # detail {"from", "files", "dir"}: the previous rental's results put on this box for the job to resume from
    # books (ledger/sync.py)
    CHARGED = "charged"  # `ledger sync --apply` booked the provider's charge; detail {"charged_usd", "estimated_usd", "storage_usd"}


# Who ends rentals; ``by`` in END_REQUESTED/DESTROYED events (with a host:pid or command suffix).
class Actor(_Word):
    UP = "up"
    DOWN = "down"
    RECONCILE = "reconcile"
    WATCHDOG = "watchdog"
    AGENT = "agent"


class ProviderName(_Word):
    """Every provider gpuops knows.

    The laptop's registry (gpuops/providers/__init__.py) maps each to its class and config section;
    the agent's destroy kinds are these same names."""

    LOCAL = "local"
    RUNPOD = "runpod"
    VAST = "vast"


PROVIDER_NAMES = tuple(p.value for p in ProviderName)
