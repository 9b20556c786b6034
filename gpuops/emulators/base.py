"""What both provider emulators share.

An HTTP server on 127.0.0.1, an emulated clock, instance state with a billing clock, an account
balance, and fault switches.

An emulator is stateful and in-process: tests read and change its state directly (``emu.faults``,
``emu.advance(s)``, ``emu.preempt(id)``, ``emu.live()``) while the real SDK talks to it over HTTP.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

HOURS = 3600.0
_EPS = 1e-9  # float slack before a started increment counts: 5.000000000001 s is 5 s


def billed_span(t0: float, t1: float, increment_s: float) -> float:
    """Seconds a provider bills for a spell in one billing state from ``t0`` to ``t1`` (epoch s).

    Every increment begun counts whole (the emulator's own rule, from the providers' documents; see
    each emulator's ``BILLING_INCREMENT_S``)."""
    return math.ceil((t1 - t0) / increment_s - _EPS) * increment_s if t1 > t0 else 0.0


_CURRENT = threading.local()  # the op of the request this server thread handles

# What the test suite plugs in (tests/emulators/__init__.py); the emulators run without both:
# ``contract_for(provider)``: the provider's published spec judging every request and reply
# (tests/emulators/contract.py; openapi-core is a development dependency), None: nothing judges;
# ``port_for()``: the port an emulator binds on 127.0.0.1 (0: the kernel picks one).
contract_for: Callable[[str], Any] | None = None


def _any_port() -> int:
    return 0


port_for: Callable[[], int] = _any_port


def contract(provider: str) -> Any:
    """The contract plugged in for ``provider`` (``contract_for``), else None."""
    return contract_for(provider) if contract_for is not None else None


@dataclass
class Faults:
    """Fault switches. Counters (``*_times``) fire that many times, then reset themselves.

    - ``latency_s``: delay before every reply.
    - ``inject``: op -> list of HTTP statuses to answer with, one per call, before serving it
      (op names: see each emulator's ``OPS``; ``"*"`` matches every op).
    - ``create_fails_but_creates``: the next N creates make the instance, then answer 5xx.
    - ``vanish_on_create``: the offer is taken by someone else between search and create.
    - ``no_ssh_port``: new instances run but never publish port 22.
    - ``stuck_status``: new instances stay in this raw provider status (e.g. "loading", or a
      string the provider never documented).
    - ``delete_after_s``: new instances are deleted (as if from the console) this many emulated
      seconds after creation.
    - ``boot_s``: emulated seconds from create to running.
    - ``retry_after_s``: the ``Retry-After`` header sent with a 429.
    - ``quota_reset_s``: the ``RateLimit``/``RateLimit-Policy`` headers (RunPod's spec) sent with a
      429, the exhausted window resetting in this many seconds.
    - ``reply_delay_s``: op -> seconds to hold the reply AFTER the op was served (a create that
      made the instance while the caller still waits on the answer).
    - ``trickle_s``: send every reply body one byte at a time, this many seconds apart.
    - ``pad_reply_bytes``: append this many bytes of JSON whitespace to every reply (a huge reply).
    - ``hide_length``: send replies with no ``Content-Length`` (the body ends when the connection
      closes), so the client learns the size only by reading.
    - ``stall_reply``: send the headers and the first byte of every reply body, then nothing more
      while the fault is set (a reply that never completes).
    - ``create_unsuccessful_but_creates``: the next N creates make the instance, then answer
      ``200 {"success": false}`` (Vast).
    - ``destroy_ignored``: the next N destroys through the API answer success and leave the
      instance as it was (an acknowledged terminate the provider dropped).
    - ``web_page``: op -> N: the next N requests for op are served, then answered 200 with a web
      page (``WEB_PAGE``: a proxy, a captive portal or a wrong host in front of the API), each a
      fault (contract.py does not judge it).
    """

    latency_s: float = 0.0
    inject: dict[str, list[int]] = field(default_factory=dict)
    create_fails_but_creates: int = 0
    vanish_on_create: bool = False
    no_ssh_port: bool = False
    stuck_status: str | None = None
    delete_after_s: float | None = None
    boot_s: float = 0.3
    retry_after_s: float | None = None  # sent as Retry-After with every 429
    quota_reset_s: float | None = None  # sent as RunPod's RateLimit header (t= of the exhausted window) with every 429
    reply_delay_s: dict[str, float] = field(default_factory=dict)
    trickle_s: float = 0.0
    pad_reply_bytes: int = 0
    hide_length: bool = False
    stall_reply: bool = False
    create_unsuccessful_but_creates: int = 0
    destroy_ignored: int = 0
    web_page: dict[str, int] = field(default_factory=dict)
    # New instances are not what was ordered: any of gpu_name, num_gpus, usd_per_hour (USD/h)
    # replaces what the instance reports (and is charged), e.g. {"gpu_name": "RTX 3070", "usd_per_hour": 5.0}.
    deliver: dict | None = None


@dataclass
class EmuInstance:
    """One rented box.

    Money: ``usd_per_hour`` while provisioning/running, ``storage_usd_per_hour``
    while stopped, nothing once destroyed; ``billed_usd``: each spell in one billing state
    (``segments``, brought up to date by ``Market.tick``) billed in whole ``increment_s``."""

    id: str
    label: str
    offer: dict
    usd_per_hour: float
    storage_usd_per_hour: float
    created_t: float
    state: str = "provisioning"  # provisioning | running | stopped | offline (host gone: bills nothing) | destroyed
    spot: bool = False
    bid: float | None = None
    preempted: bool = False
    stuck_status: str | None = None
    no_ssh_port: bool = False
    delete_at: float | None = None
    boot_s: float = 0.3
    increment_s: float = 1.0  # the market's billing increment (Market.increment_s), set at create
    last_bill_t: float = 0.0
    ended_t: float | None = None
    ssh: tuple[str, int] = ("203.0.113.10", 40022)
    request: dict = field(default_factory=dict)
    # The billing clock's history: (t0, t1, usd_per_hour, kind) with kind "gpu" (provisioning or
    # running: the whole price) or "storage" (stopped: disk only). The billing endpoints cut it
    # into the provider's buckets (``Market.charges``).
    segments: list = field(default_factory=list)
    account: str = "acct-1"  # the account whose key rented it; other keys cannot see or touch it
    delivered: dict = field(default_factory=dict)  # Faults.deliver at create: what it reports instead of the offer

    def billed_s(self, kind: str | None = None) -> float:
        """Seconds the provider billed it so far (of ``kind`` "gpu" or "storage" only, when given)."""
        return sum(billed_span(t0, t1, self.increment_s) for t0, t1, _, k in self.segments if kind in (None, k))

    def billed_cost(self, kind: str | None = None) -> float:
        """USD the provider charged for it so far: every segment's billed seconds x its rate (``kind`` only, when given)."""
        return sum(
            rate * billed_span(t0, t1, self.increment_s) / HOURS
            for t0, t1, rate, k in self.segments
            if kind in (None, k)
        )

    @property
    def billed_usd(self) -> float:
        """What the provider charged for it so far, USD (``billed_cost``)."""
        return self.billed_cost()


class Market:
    """State common to both emulators; every public method holds ``self.lock``.

    Accounts: ``api_key`` is the first account (``acct-1``); ``add_account`` adds more. An instance
    belongs to the account whose key created it: another key neither lists, reads, stops nor
    destroys it (the provider answers "not found", as RunPod and Vast do), and each account has its
    own balance. Methods taking ``account=None`` mean every account (tests) or, for money, acct-1.
    """

    def __init__(self, api_key: str, balance_usd: float, increment_s: float):
        self.api_key = api_key
        self.increment_s = increment_s  # the provider's billing increment, s (its emulator's BILLING_INCREMENT_S)
        self.initial_balance = balance_usd
        self.accounts: dict[str, str] = {api_key: "acct-1"}  # key -> account id
        self.initial_balances: dict[str, float] = {"acct-1": balance_usd}
        self.faults = Faults()
        self.lock = threading.RLock()
        self.instances: dict[str, EmuInstance] = {}
        self.requests: list[dict] = []  # method, path, query, body, auth header
        self.crashes: list[str] = []  # emulator exceptions (tests assert this stays empty)
        self.offset_s = 0.0
        self.opened_at = time.time()  # the account's opening credit (the invoices' one payment)
        self.ssh_endpoint: tuple[str, int] | None = None  # point new instances at a test sshd
        self._ids = itertools.count(1)
        self._ports = itertools.count(40022)

    # -- accounts ----------------------------------------------------------------------------
    def add_account(self, api_key: str, balance_usd: float = 100.0) -> str:
        """A second (third, ...) account with its own key and credit; returns its id."""
        with self.lock:
            acct = f"acct-{len(self.accounts) + 1}"
            self.accounts[api_key] = acct
            self.initial_balances[acct] = balance_usd
            return acct

    def account_of(self, auth_header: str) -> str | None:
        """The account whose key is in ``Authorization: Bearer <key>``, else None."""
        key = auth_header[len("Bearer ") :] if auth_header.startswith("Bearer ") else ""
        return self.accounts.get(key)

    def key_of(self, account: str) -> str:
        """The API key of ``account``."""
        return next(k for k, a in self.accounts.items() if a == account)

    # -- clock and money -------------------------------------------------------------------
    def now(self) -> float:
        """The emulated clock, epoch s (wall clock plus every ``advance``)."""
        return time.time() + self.offset_s

    def advance(self, seconds: float) -> None:
        """Move the emulated clock (status progression and billing) forward."""
        with self.lock:
            for inst in self.instances.values():
                self.tick(inst)
            self.offset_s += seconds
            for inst in self.instances.values():
                self.tick(inst)

    def _rate(self, inst: EmuInstance) -> float:
        if inst.state in ("provisioning", "running"):
            return inst.usd_per_hour
        if inst.state == "stopped":
            return inst.storage_usd_per_hour
        return 0.0

    def tick(self, inst: EmuInstance) -> None:
        """Bill ``inst`` up to now and apply due transitions (boot, console delete)."""
        now = self.now()
        events: list[tuple[float, str | None]] = [(now, None)]  # (when, the state it enters; None: now)
        if inst.state == "provisioning" and inst.stuck_status is None:
            events.insert(0, (inst.created_t + inst.boot_s, "running"))
        if inst.delete_at is not None and inst.state != "destroyed":
            events.append((inst.delete_at, "destroyed"))
        for t, new_state in sorted(events, key=lambda e: e[0]):
            if t > now:
                continue
            if t > inst.last_bill_t:
                rate = self._rate(inst)
                if rate:
                    kind = "storage" if inst.state == "stopped" else "gpu"
                    seg = inst.segments[-1] if inst.segments else None
                    if seg is not None and seg[1] == inst.last_bill_t and seg[2] == rate and seg[3] == kind:
                        inst.segments[-1] = (seg[0], t, rate, kind)  # the same rate goes on: one segment
                    else:
                        inst.segments.append((inst.last_bill_t, t, rate, kind))
                inst.last_bill_t = t
            if new_state and inst.state != "destroyed":
                if new_state == "running" and inst.state != "provisioning":
                    continue
                inst.state = new_state
                if new_state == "destroyed":
                    inst.ended_t = t

    def balance(self, account: str = "acct-1") -> float:
        """The account's credit left, USD: its initial balance less everything billed up to now."""
        with self.lock:
            for inst in self.instances.values():
                self.tick(inst)
            initial = self.initial_balance if account == "acct-1" else self.initial_balances[account]
            return initial - sum(i.billed_usd for i in self.instances.values() if i.account == account)

    def set_clock(self, epoch_s: float) -> None:
        """Put the emulated clock at ``epoch_s`` (before any instance exists: tests start a month)."""
        with self.lock:
            assert not self.instances, "set the clock before renting anything"
            self.offset_s = epoch_s - time.time()
            self.opened_at = epoch_s

    def charges(
        self, lo: float, hi: float, account: str | None = None
    ) -> list[tuple[EmuInstance, float, float, float, str]]:
        """The billing clock cut to [lo, hi) epoch s.

        One (instance, start, end, usd, kind) per segment part inside the window, oldest first (of
        ``account`` only when given). Money is rate x
        seconds; a segment bills to the end of its last increment begun (``billed_span``), so the
        parts add up to ``billed_usd``."""
        with self.lock:
            out = []
            for inst in self.instances.values():
                self.tick(inst)
                if account is not None and inst.account != account:
                    continue
                for t0, t1, rate, kind in inst.segments:
                    a, b = max(t0, lo), min(t0 + billed_span(t0, t1, inst.increment_s), hi)
                    if b > a:
                        out.append((inst, a, b, rate * (b - a) / HOURS, kind))
            return sorted(out, key=lambda c: (c[1], c[0].id))

    def spend_rate(self, account: str = "acct-1") -> float:
        """What the account's instances bill now, USD/h."""
        with self.lock:
            return sum(self._rate(i) for i in self.instances.values() if i.account == account)

    # -- instances ---------------------------------------------------------------------------
    def new_instance(
        self,
        label: str,
        offer: dict,
        usd_per_hour: float,
        storage_usd_per_hour: float,
        spot: bool = False,
        bid: float | None = None,
        id_prefix: str = "",
        request: dict | None = None,
        account: str = "acct-1",
    ) -> EmuInstance:
        """A new instance of ``offer``, provisioning, with the market's faults applied.

        It bills ``usd_per_hour`` (USD/h) while provisioning or running, ``storage_usd_per_hour`` once stopped."""
        with self.lock:
            now = self.now()
            f = self.faults
            n = next(self._ids)
            ssh = self.ssh_endpoint or ("203.0.113.10", next(self._ports))
            inst = EmuInstance(
                id=f"{id_prefix}{n}",
                label=label,
                offer=offer,
                usd_per_hour=usd_per_hour,
                storage_usd_per_hour=storage_usd_per_hour,
                created_t=now,
                spot=spot,
                bid=bid,
                stuck_status=f.stuck_status,
                no_ssh_port=f.no_ssh_port,
                delete_at=now + f.delete_after_s if f.delete_after_s is not None else None,
                boot_s=f.boot_s,
                last_bill_t=now,
                increment_s=self.increment_s,
                ssh=ssh,
                request=request or {},
                account=account,
            )
            if f.deliver:
                inst.delivered = dict(f.deliver)
                inst.usd_per_hour = float(f.deliver.get("usd_per_hour", usd_per_hour))
            self.instances[inst.id] = inst
            return inst

    def find(self, instance_id: str, account: str | None = None) -> EmuInstance | None:
        """The instance unless destroyed (or, with ``account``, owned by another account)."""
        with self.lock:
            inst = self.instances.get(str(instance_id))
            if inst is None or (account is not None and inst.account != account):
                return None
            self.tick(inst)
            return None if inst.state == "destroyed" else inst

    def api_destroy(self, instance_id: str) -> None:
        """A destroy asked through the API: ``destroy``, unless ``faults.destroy_ignored`` drops it."""
        with self.lock:
            if self.faults.destroy_ignored > 0:
                self.faults.destroy_ignored -= 1
                return
            self.destroy(instance_id)

    def destroy(self, instance_id: str, account: str | None = None) -> bool:
        """Destroy; False when unknown, already destroyed or (with ``account``) another's."""
        with self.lock:
            inst = self.find(instance_id, account)
            if inst is None:
                return False
            inst.state = "destroyed"
            inst.ended_t = self.now()
            return True

    def stop(self, instance_id: str, account: str | None = None) -> bool:
        """Stop the instance (it bills storage only); False when there is none (of ``account``)."""
        with self.lock:
            inst = self.find(instance_id, account)
            if inst is None:
                return False
            inst.state = "stopped"
            return True

    def preempt(self, instance_id: str, mode: str = "outbid") -> None:
        """An interruptible instance is taken back.

        ``mode`` "outbid": it loses its GPU to a higher
        bid: stopped, still billing disk. "host_gone": its host machine went offline: the
        instance shows ``offline`` and bills nothing more (GPU and disk went with the host)."""
        assert mode in ("outbid", "host_gone"), mode
        with self.lock:
            inst = self.find(instance_id)
            assert inst is not None and inst.spot, "only a live interruptible instance can be preempted"
            inst.state = "stopped" if mode == "outbid" else "offline"
            inst.preempted = True

    def delete_from_console(self, instance_id: str) -> None:
        """The user deletes the instance in the provider's web console."""
        self.destroy(instance_id)

    def reuse_id(self, instance_id: str, label: str, account: str | None = None) -> EmuInstance:
        """Fault: the instance is deleted (as from the console) and its id now answers for another.

        The other is a running instance labelled ``label`` (of ``account``, default the same account): the old
        one's billing history stays under ``<id>~old``. Returns the new instance."""
        with self.lock:
            old = self.instances[str(instance_id)]
            self.destroy(old.id)
            now = self.now()
            new = EmuInstance(
                id=old.id,
                label=label,
                offer=old.offer,
                usd_per_hour=old.usd_per_hour,
                storage_usd_per_hour=old.storage_usd_per_hour,
                created_t=now,
                state="running",
                boot_s=0.0,
                last_bill_t=now,
                ssh=old.ssh,
                account=account or old.account,
            )
            self.instances[f"{old.id}~old"] = old
            self.instances[old.id] = new
            return new

    def live(self, account: str | None = None) -> list[EmuInstance]:
        """Instances not destroyed (running, provisioning, or stopped and billing storage).

        Of ``account`` only when given."""
        with self.lock:
            for inst in self.instances.values():
                self.tick(inst)
            return [
                i
                for i in self.instances.values()
                if i.state != "destroyed" and (account is None or i.account == account)
            ]

    def mark_fault(self) -> None:
        """The reply of the request this thread serves is a deliberate fault.

        A gateway's page, an undocumented status: the spec does not judge it (contract.py)."""
        _CURRENT.injected = True

    def take_injected(self, op: str) -> int | None:
        """The next injected HTTP status for ``op`` (or for ``"*"``), consuming it.

        Also notes ``op`` as the current request's (``reply_delay_s``)."""
        _CURRENT.op = op
        with self.lock:
            for key in (op, "*"):
                q = self.faults.inject.get(key)
                if q:
                    _CURRENT.injected = True  # the reply is a fault, not the API's (contract.py)
                    return q.pop(0)
            return None


class _Handler(BaseHTTPRequestHandler):
    server_version = "gpuops-emulator/1"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet in tests
        pass

    def _serve(self) -> None:
        emu: Emulator = self.server.emulator  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        parts = urlsplit(self.path)
        auth = self.headers.get("Authorization", "")
        req = {
            "method": self.command,
            "path": parts.path,
            "query": {k: v[0] for k, v in parse_qs(parts.query).items()},
            "body": body,
            "raw": raw.decode("utf-8", "replace"),
            "auth": auth,
            "query_raw": parts.query,
            "raw_body": raw,
            "headers": dict(self.headers.items()),
        }
        req["account"] = emu.market.account_of(auth)
        with emu.market.lock:
            emu.market.requests.append(req)
        if emu.market.faults.latency_s:
            time.sleep(emu.market.faults.latency_s)
        _CURRENT.injected = False
        try:
            status, payload, ctype = emu.handle(req)
        except Exception as e:  # an emulator bug must show up in the test, not as a dropped socket
            with emu.market.lock:
                emu.market.crashes.append(f"{type(e).__name__}: {e}")
            status, payload, ctype = 500, {"errors": [{"message": f"emulator crashed: {type(e).__name__}: {e}"}]}, JSON
        op = getattr(_CURRENT, "op", None)
        with emu.market.lock:
            if op is not None and emu.market.faults.web_page.get(op, 0) > 0:
                emu.market.faults.web_page[op] -= 1
                status, payload, ctype = 200, WEB_PAGE, HTML
                _CURRENT.injected = True
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        headers = {}  # the reply's headers beyond Content-Type and its length, judged by the spec too
        if status == 429 and emu.market.faults.retry_after_s is not None:
            headers["Retry-After"] = f"{emu.market.faults.retry_after_s:g}"
        if status == 429 and emu.market.faults.quota_reset_s is not None:  # RunPod's spec: the exhausted window
            headers["RateLimit"] = f'"minute";r=0;t={emu.market.faults.quota_reset_s:g}, "hour";r=2800;t=1812'
            headers["RateLimit-Policy"] = '"minute";q=60;w=60, "hour";q=3000;w=3600'
        if emu.contract is not None:  # the provider's published spec judges both sides (contract.py)
            emu.contract.check(
                req, status, data, ctype, injected=getattr(_CURRENT, "injected", False), reply_headers=headers
            )
        _CURRENT.injected = False
        f = emu.market.faults
        if f.pad_reply_bytes:
            data += b" " * f.pad_reply_bytes
        delay = f.reply_delay_s.get(getattr(_CURRENT, "op", None) or "", 0.0)
        _CURRENT.op = None
        if delay:
            time.sleep(delay)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", ctype)
        if f.hide_length:
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            if f.stall_reply:
                self.wfile.write(data[:1])
                self.wfile.flush()
                give_up = time.monotonic() + 300  # the test clears the fault once its call has given up
                while f.stall_reply and time.monotonic() < give_up:
                    time.sleep(0.05)
                data = data[1:]
            if f.trickle_s:
                for i in range(len(data)):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(f.trickle_s)
            else:
                self.wfile.write(data)
        except OSError:  # the client gave up (its deadline): nothing to answer
            pass

    do_GET = do_POST = do_PUT = do_DELETE = _serve


class Emulator:
    """Base for an HTTP emulator: ``start()`` binds 127.0.0.1 on a free port; ``url`` is its base."""

    contract: Any = None  # a plugged-in contract (``contract_for``): the provider's spec validates the traffic

    def __init__(self, market: Market):
        self.market = market
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def faults(self) -> Faults:
        """The market's fault switches."""
        return self.market.faults

    def start(self) -> Emulator:
        """Serve on 127.0.0.1 in a daemon thread; returns the emulator."""
        if self.contract is not None:
            self.contract.warm()
        self._httpd = _server()
        self._httpd.daemon_threads = True
        self._httpd.emulator = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:<port>``."""
        assert self._httpd is not None, "emulator not started"
        host, port = self._httpd.server_address[:2]
        assert isinstance(host, str), "an AF_INET server's address is a (str, int) pair"
        return f"http://{host}:{port}"

    def authorized(self, req: dict) -> bool:
        """True when the request carries the key of one of the market's accounts."""
        return self.market.account_of(req["auth"]) is not None

    def handle(self, req: dict) -> tuple[int, Any, str]:  # pragma: no cover - overridden
        """The reply to ``req``: (HTTP status, JSON payload, content type)."""
        raise NotImplementedError

    # conveniences shared by tests
    def advance(self, seconds: float) -> None:
        """Move the market's clock forward ``seconds`` s."""
        self.market.advance(seconds)

    def live(self, account: str | None = None) -> list[EmuInstance]:
        """The market's instances not destroyed (of ``account`` only when given)."""
        return self.market.live(account)

    def add_account(self, api_key: str, balance_usd: float = 100.0) -> str:
        """A new account with ``api_key`` and ``balance_usd`` USD of credit; returns its id."""
        return self.market.add_account(api_key, balance_usd)

    def preempt(self, instance_id: str, mode: str = "outbid") -> None:
        """Take the instance back (``Market.preempt``)."""
        self.market.preempt(instance_id, mode)

    def delete_from_console(self, instance_id: str) -> None:
        """Delete the instance as from the provider's console."""
        self.market.delete_from_console(instance_id)

    def wire_text(self) -> str:
        """Every request received, as text, for secret-leak assertions.

        Path, query and body; not the Authorization header, which must carry the key."""
        with self.market.lock:
            return "\n".join(
                json.dumps({k: v for k, v in r.items() if k not in ("auth", "headers", "raw_body")})
                for r in self.market.requests
            )


JSON = "application/json"
HTML = "text/html"
# What ``Faults.web_page`` answers with a 200 in place of the API's JSON.
WEB_PAGE = b"<!doctype html><html><head><title>Sign in</title></head><body><h1>Sign in to continue</h1></body></html>"


def _server() -> ThreadingHTTPServer:
    """The emulator's HTTP server on 127.0.0.1, on ``port_for()``'s port (in the suite: below the ephemeral range).

    A port ``bind(0)`` handed out goes to the next ``bind(0)`` on the machine once its server
    stops, while a process of the test that used it (an `up` retrying its destroy in the leak
    grace, another run's) may still send there: its traffic then reached another test's emulator,
    whose spec check blamed it on that test (RunPod's ``GET``/``DELETE /v2/pods/pod1`` at a Vast
    emulator). The suite plugs in ``port_for``: tests/support/ports.py's ``reserved_port`` walks a
    block of this worker's own; a port another run takes between its check and the bind is skipped."""
    import errno

    for _ in range(4):
        try:
            return ThreadingHTTPServer(("127.0.0.1", port_for()), _Handler)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
    return ThreadingHTTPServer(("127.0.0.1", port_for()), _Handler)
