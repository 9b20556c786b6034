"""`gpuops check`: what gpuops will do with this account, said before it costs anything.

Offline (``offline``): the settings and where each came from (infra.toml, a ``GPUOPS_*`` variable,
the default), the key files and their modes, the API routes and versions each provider will call,
the credential the on-box agent destroys with and what it does when that credential is refused,
the ledger and its schema, what is open now, and the last watchdog pass. ``--live`` (``live``):
authenticate, the balance, offers in stock, our labelled instances and volumes, and this month's
billing against the books (``ledger sync`` without applying). ``--live --rent`` is ``gpuops.check.check_layers``.

Every finding is one ``Finding``: a verdict (``Verdict``), a name, what was found, and the fix.
Nothing here writes the ledger or rents anything.
"""

from __future__ import annotations

import enum
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuops.errors import GpuopsError
from gpuops.providers import ACCOUNTLESS  # the registry: names only

if TYPE_CHECKING:
    from ledger.books import Books


class Verdict(str, enum.Enum):
    """One finding's verdict.

    ``fail`` makes the command exit 1; ``warn`` (an open box of ours, a key file others can read)
    does not; ``pending``: not known yet (billing not arrived)."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    PENDING = "pending"
    INFO = "info"
    SKIP = "skip"


FINDING_COLUMNS = ("verdict", "check", "detail", "fix")


@dataclass
class Finding:
    """One line of `gpuops check`.

    One check line: ``verdict``, ``check`` (e.g. ``keys.runpod``, ``layer.idle``), ``detail`` (what
    was found), ``fix`` (what to do; empty when nothing), ``data`` (figures for JSON: seconds, USD,
    ids), ``first``: named before the rest (an open box of ours)."""

    check: str
    verdict: Verdict
    detail: str
    fix: str = ""
    data: dict = field(default_factory=dict)
    first: bool = False

    def as_json(self) -> dict:
        return {
            "verdict": self.verdict.value,
            "check": self.check,
            "detail": self.detail,
            "fix": self.fix,
            **({"data": self.data} if self.data else {}),
        }


def ordered(findings: Iterable[Finding]) -> list[Finding]:
    """``findings`` with the ones marked ``first`` (anything of ours billing) ahead, order kept."""
    items = list(findings)
    return [f for f in items if f.first] + [f for f in items if not f.first]


def exit_code(findings: Iterable[Finding]) -> int:
    """1 when any finding failed, else 0 (warnings and pending billing are not failures)."""
    return 1 if any(f.verdict == Verdict.FAIL for f in findings) else 0


def nothing_live(findings: Iterable[Finding]) -> bool:
    """True when ``--live`` checked no provider.

    Every ``live.<provider>`` finding is a skip (no API key) and no provider was asked (no
    ``auth.<provider>`` finding)."""
    items = list(findings)
    skipped = [f for f in items if f.check.startswith("live.") and f.verdict == Verdict.SKIP]
    return bool(skipped) and not any(f.check.startswith("auth.") for f in items)


def report(findings: Iterable[Finding], provider: str | None = None, live: bool = False, rent: bool = False) -> dict:
    """The command's one document, as a dict.

    Keys: ``checks`` (ordered), ``failed`` / ``warnings`` / ``skipped`` counts, ``nothing_live``
    (``--live`` asked no provider: no key anywhere), ``exit``: 1 when a check failed, else
    ``gpuops.errors.NOTHING_CHECKED`` (4) when ``nothing_live``, else 0 (a provider skipped beside one
    checked is named, not a failure)."""
    from gpuops.errors import NOTHING_CHECKED

    items = ordered(findings)
    none_live = live and nothing_live(items)
    code = exit_code(items)
    return {
        "provider": provider,
        "live": live,
        "rent": rent,
        "nothing_live": none_live,
        "exit": code or (NOTHING_CHECKED if none_live else 0),
        "failed": sum(f.verdict == Verdict.FAIL for f in items),
        "warnings": sum(f.verdict == Verdict.WARN for f in items),
        "skipped": sum(f.verdict == Verdict.SKIP for f in items),
        "checks": [f.as_json() for f in items],
    }


# -- offline ---------------------------------------------------------------------------------------
def _mode(path: Path) -> int | None:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None


def _private(name: str, path: Path, what: str, want: int = 0o600) -> Finding:
    """A file or directory that must be the user's alone: ok at ``want`` or tighter, warn wider."""
    mode = _mode(path)
    if mode is None:
        return Finding(name, Verdict.INFO, f"{what} {path}: not there yet (made at the first rental)")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return Finding(
            name, Verdict.WARN, f"{what} {path} is mode {mode:04o}: others may read it", f"chmod {want:o} {path}"
        )
    return Finding(name, Verdict.OK, f"{what} {path} is mode {mode:04o}")


def settings_findings(settings, env: dict | None = None) -> list[Finding]:
    """Where each setting came from.

    One line per setting not at its default (its value and its source: the file or the variable),
    one line counting the rest; secrets are never shown."""
    from gpuops.config import setting_origins

    rows = setting_origins(settings, env)
    where = str(Path(settings.source).resolve()) if settings.source else None
    out = [
        Finding(
            "settings.file",
            Verdict.OK,
            f"read {where}"
            if where
            else "no infra.toml (./infra.toml, then the user config dir): every setting is a GPUOPS_* variable or its default",
            data={"file": where},
        )
    ]
    defaults = 0
    for key, value, origin in rows:
        if origin == "default":
            defaults += 1
            continue
        out.append(
            Finding(
                f"settings.{key}", Verdict.INFO, f"{value} (from {origin})", data={"value": value, "origin": origin}
            )
        )
    out.append(
        Finding(
            "settings.defaults",
            Verdict.INFO,
            f"{defaults} other settings at their defaults (infra.example.toml lists them)",
        )
    )
    return out


def key_findings(settings, names: Iterable[str]) -> list[Finding]:
    """Per marketplace: which key will be used and from where (a key file: its mode).

    The SSH key for rented boxes and the data dir, both the user's alone."""
    from gpuops.providers import REGISTRY
    from gpuops.providers.keys import resolve_key

    out = []
    for name in names:
        cfg = getattr(settings.providers, REGISTRY[name].section)
        cred = resolve_key(REGISTRY[name].key_source, cfg.api_key, settings.source)
        if cred is None:
            out.append(
                Finding(
                    f"keys.{name}",
                    Verdict.SKIP,
                    f"no {name} API key (not in ${REGISTRY[name].key_source.env_var}, infra.toml or the {name} CLI's file)",
                    f"export {REGISTRY[name].key_source.env_var}=... to use {name}",
                )
            )
            continue
        src = cred.source
        path = Path(src.split(" [providers.", 1)[0]).resolve() if not src.startswith("$") else None
        if path is not None:
            f = _private(f"keys.{name}", path, f"{name} key in")
            f.detail += f" (account {name}:{cred.account})"
            out.append(f)
        else:
            out.append(Finding(f"keys.{name}", Verdict.OK, f"{name} key from {src} (account {name}:{cred.account})"))
    ssh = Path(settings.up.ssh_key).expanduser() if settings.up.ssh_key else settings.data_path() / "ssh" / "id_ed25519"
    out.append(_private("keys.ssh", ssh, "SSH key for rented boxes"))
    data = settings.data_path()
    out.append(_unwritable(data) or _private("data_dir", data, "data dir (ledger, logs, results, keys)", want=0o700))
    return out


def _unwritable(data: Path) -> Finding | None:
    """A failed ``data_dir`` finding when ``data`` cannot be written or made, else None.

    Made: the nearest folder above it that exists must be a writable folder (not a file, not
    read-only, ours to write). ``os.access`` answers for a read-only file system too (EROFS)."""
    at = data
    while not at.exists() and at.parent != at:
        at = at.parent
    why = None
    if not at.is_dir():
        why = f"{at} is not a folder"
    elif not os.access(at, os.W_OK | os.X_OK):
        why = f"{at} is not writable"
    if why is None:
        return None
    return Finding(
        "data_dir",
        Verdict.FAIL,
        f"data dir (ledger, logs, results, keys) {data} cannot be {'written' if at == data else 'made'}: {why}",
        "point GPUOPS_DATA_DIR (or data_dir in infra.toml) at a folder you can write",
    )


def _sdk_version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def route_findings(settings, names: Iterable[str]) -> list[Finding]:
    """Per provider: what it will call, the SDK installed, and how the agent destroys a box.

    Per provider: the API base, the routes it will call (``Provider.routes``) with their API
    versions, the SDK installed, the packages of its extra that are missing (``Provider.requires``:
    a failure for a provider with a key, a warning without one; the fix ``pip install
    'gpuops[<name>]'``); and the credential the agent destroys a box with, and what it does
    when that credential is refused (``gpuops.providers.REGISTRY``)."""
    from gpuops.providers import REGISTRY, get_provider
    from gpuops.providers.base import extra_fix, missing_packages

    out = []
    for name in names:
        entry = REGISTRY[name]
        try:
            p = get_provider(name, settings)
        except GpuopsError as e:
            out.append(
                Finding(
                    f"routes.{name}", Verdict.FAIL, f"cannot build the {name} provider: {e}", "fix the setting it names"
                )
            )
            continue
        if p.routes:
            base = getattr(p, "url", "")
            versions = sorted({_api_version(path) for _, path in p.routes})
            sdk = entry.sdk
            have = _sdk_version(sdk) if sdk else None
            missing = missing_packages(p.requires)  # the packages its extra installs, as every call checks them
            sdk_note = f"; SDK {sdk} {have}" if have else ""
            verdict, fix = Verdict.OK, ""
            if missing:
                # a provider with a key that cannot be called is a failure; without one, a warning
                verdict = Verdict.FAIL if p.account is not None else Verdict.WARN
                fix = extra_fix(name)
                sdk_note += f"; {', '.join(missing)} not installed: every {name} call would fail"
            out.append(
                Finding(
                    f"routes.{name}",
                    verdict,
                    f"{base}: {', '.join(versions)} ({len(p.routes)} routes){sdk_note}",
                    fix,
                    data={
                        "base": base,
                        "versions": versions,
                        "routes": [f"{m} {path}" for m, path in p.routes],
                        "sdk": have,
                        "missing": missing,
                    },
                )
            )
        elif not p.http_calls:
            out.append(Finding(f"routes.{name}", Verdict.OK, "no API: this machine"))
        else:
            out.append(Finding(f"routes.{name}", Verdict.INFO, "this provider does not list its routes"))
        out.append(
            Finding(
                f"agent.{name}",
                Verdict.OK if entry.agent_credential else Verdict.INFO,
                f"the box destroys itself with {entry.agent_credential or 'nothing of its own'}",
            )
        )
        if entry.agent_refused:
            out.append(Finding(f"agent.{name}.refused", Verdict.INFO, f"if that is refused, {entry.agent_refused}"))
    return out


def _api_version(path: str) -> str:
    """``/v2/pods`` -> ``REST v2``; ``/api/v0/...`` -> ``REST v0``; ``/graphql`` -> ``GraphQL``."""
    parts = [p for p in path.split("/") if p]
    if parts and parts[0] == "graphql":
        return "GraphQL"
    for p in parts[:2]:
        if len(p) > 1 and p[0] == "v" and p[1:].isdigit():
            return f"REST {p}"
    return "REST"


def ledger_findings(settings) -> tuple[list[Finding], Any]:
    """The ledger's findings: where it is, its schema, and the Ledger when it opens.

    The ledger: where it is (a password never shown), its schema (migrations applied against the
    ones this gpuops knows), and, when it opens, the Ledger for the open-now checks."""
    import re

    from ledger import migrations
    from ledger.engine import sqlite_file

    url = settings.ledger_url()
    shown = re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", url)
    latest = migrations.MIGRATIONS[-1][0]
    known = set(migrations.KNOWN_NAMES)
    if (path := sqlite_file(url)) is not None and not path.exists():
        return [
            Finding("ledger", Verdict.INFO, f"{shown}: no ledger yet (made at the first rental, schema {latest})")
        ], None
    try:
        import sqlalchemy as sa

        engine = sa.create_engine(url)
        with engine.connect() as conn:
            done = migrations.applied(conn)
        engine.dispose()
    except Exception as e:  # a bad URL, a driver missing, a server down: said, not a traceback
        first = (str(getattr(e, "orig", None) or e).strip().splitlines() or [type(e).__name__])[0]
        return [
            Finding(
                "ledger",
                Verdict.FAIL,
                f"{shown}: cannot open: {first}",
                "check [ledger] url / GPUOPS_LEDGER_URL and that its server runs",
            )
        ], None
    ahead = [n for n in done if n not in known]
    data = {"url": shown, "schema": done[-1] if done else None, "latest": latest}
    if ahead:
        out = [
            Finding(
                "ledger",
                Verdict.FAIL,
                f"{shown}: schema {ahead[-1]} is newer than this gpuops knows ({latest})",
                "upgrade gpuops on this machine (a teammate's newer version migrated the shared ledger)",
                data,
            )
        ]
        return out, None
    pending = migrations.pending(done)
    detail = f"{shown}: schema {done[-1] if done else 'none'}" + (
        f" ({len(pending)} migration(s) to {latest} run at the next open)" if pending else " (current)"
    )
    from ledger import Ledger

    return [Finding("ledger", Verdict.OK, detail, data=data)], Ledger(url)


def open_findings(settings, led: Books) -> list[Finding]:
    """What is open now in the ledger.

    Each of our open sessions (a box that may be billing) is a warning named first, with the command
    that ends it; a teammate's is information."""
    if led is None:
        return [Finding("open", Verdict.OK, "nothing open (no ledger)")]
    from gpuops.ownership import is_mine

    rows = list(led.open_sessions())
    if not rows:
        return [Finding("open", Verdict.OK, "no open session in the ledger")]
    me = settings.owner()
    out = []
    for r in rows:
        mine = is_mine(r, me)
        price = f", {r.usd_per_hour:g} USD/h" if r.usd_per_hour else ""
        since = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(r.instance_created_at or r.created_at))
        detail = f"{r.provider} {r.instance_id or '(no instance yet)'} of session {r.id} ({r.experiment}{price}) open since {since}"
        if mine:
            out.append(
                Finding(
                    f"open.{r.id}",
                    Verdict.WARN,
                    detail + ": it may be billing",
                    f"gpuops down {r.id} (or gpuops reconcile)",
                    data={"session": r.id, "provider": r.provider, "instance_id": r.instance_id},
                    first=True,
                )
            )
        else:
            out.append(Finding(f"open.{r.id}", Verdict.INFO, f"{detail} (owner {r.owner})"))
    return out


def watchdog_findings(led: Books) -> list[Finding]:
    """The newest watchdog pass on this ledger (``gpuops.teardown.watchdog_passes``).

    OK when a watchdog passed within three of its own intervals; else a warning, since the balance
    floor and the monthly cap are enforced only while one runs."""
    from gpuops.teardown.watchdog_passes import INSTALL_HINT, NOT_ENFORCED, ago, last_passes

    passes = last_passes(led) if led is not None else []
    fix = INSTALL_HINT.replace("`", "")
    if not passes:
        return [Finding("watchdog", Verdict.WARN, f"no watchdog pass in this ledger: {NOT_ENFORCED}", fix)]
    p = passes[0]
    data = {k: p[k] for k in ("host", "owner", "last_pass_at", "stale", "interval_seconds", "summary")}
    if p["stale"]:
        return [
            Finding(
                "watchdog",
                Verdict.WARN,
                f"last pass {ago(p['age_seconds'])} ago on {p['host']} by {p['owner']} (stopped?): {NOT_ENFORCED}",
                fix,
                data=data,
            )
        ]
    return [
        Finding(
            "watchdog",
            Verdict.OK,
            f"last pass {ago(p['age_seconds'])} ago on {p['host']} by {p['owner']} ({p['summary']})",
            data=data,
        )
    ]


def rent_provider(settings, provider: str | None) -> str:
    """The marketplace ``--rent`` proves the layers on.

    ``provider``, else ``[up] provider`` when it is one, else the one marketplace with a key. Raises
    BadInput for the local provider (nothing of an account to prove) or when the choice is not
    clear."""
    from gpuops.errors import BadInput
    from gpuops.providers import MARKETPLACES, REGISTRY, configured, flags

    name = provider or (settings.up.provider if settings.up.provider in MARKETPLACES else None)
    if name is None:
        have = configured(settings)
        if len(have) != 1:
            raise BadInput(
                "--rent proves the teardown layers on one provider account: which one?",
                f"add {flags(MARKETPLACES)}" + (f" (keys found: {', '.join(have)})" if have else ""),
            )
        name = have[0]
    if name in REGISTRY and not REGISTRY[name].needs_key:
        raise BadInput(
            f"--rent proves the teardown layers on a provider account; the {name} provider has none",
            f"add {flags(MARKETPLACES)} (the local box's teardown is covered by the test suite)",
        )
    return name


def provider_names(provider: str | None) -> list[str]:
    """The marketplaces a check looks at: ``provider`` alone (local included), else every marketplace."""
    from gpuops.providers import MARKETPLACES

    return [provider] if provider else list(MARKETPLACES)


def offline(
    settings, provider: str | None = None, env: dict | None = None, problems: Iterable[str] = ()
) -> tuple[list[Finding], Any]:
    """Every offline check (module doc), in order.

    Returns the findings and the opened ledger (None when there is none yet or it did not open).
    ``problems``: what a lenient settings load skipped (``gpuops.config.load_settings``'s warning),
    each a failed check."""
    names = provider_names(provider)
    out = [
        Finding(
            "settings",
            Verdict.FAIL,
            p.removeprefix("warning: "),
            "fix the file or variable it names (`gpuops up` refuses until then)",
        )
        for p in problems
    ]
    out += settings_findings(settings, env)
    out += key_findings(settings, [n for n in names if n not in ACCOUNTLESS])
    out += route_findings(settings, names)
    led_findings, led = ledger_findings(settings)
    out += led_findings + open_findings(settings, led) + watchdog_findings(led) + notify_findings(settings)
    if led is not None:
        from gpuops.teardown.watchdog_passes import tell_if_silent

        tell_if_silent(settings, led)  # a dead watchdog cannot say so: the check that sees it does ([notify])
    return out, led


def notify_findings(settings) -> list[Finding]:
    """``[notify]``'s targets, redacted, each with its last delivery from this machine (none: INFO).

    A failed last delivery warns, with the fix `gpuops notify test`."""
    from gpuops.notify.notifier import DELIVERIES_FILE, Target, read_deliveries
    from gpuops.teardown.watchdog_passes import ago

    targets = [Target(u) for u in settings.notify.urls]
    if not targets:
        return [Finding("notify", Verdict.INFO, "no notification target ([notify] urls or GPUOPS_NOTIFY_URLS)")]
    kept = read_deliveries(settings.data_path() / DELIVERIES_FILE)
    out = []
    now = time.time()
    for t in targets:
        d = kept.get(t.id)
        if not isinstance(d, dict):
            out.append(Finding(f"notify.{t.id}", Verdict.INFO, f"{t.shown}: no delivery from this machine yet"))
            continue
        when = f"{ago(now - float(d.get('at') or 0))} ago ({d.get('event', '')})"
        if d.get("ok"):
            out.append(Finding(f"notify.{t.id}", Verdict.OK, f"{t.shown}: last delivery {when} delivered"))
        else:
            out.append(
                Finding(
                    f"notify.{t.id}",
                    Verdict.WARN,
                    f"{t.shown}: last delivery {when} failed: {d.get('why', '')}",
                    "gpuops notify test",
                )
            )
    return out


# -- live ------------------------------------------------------------------------------------------
def live(settings, led: Books, provider: str | None = None, providers: dict | None = None) -> list[Finding]:
    """``--live``: each keyed provider's account, offers, our instances and volumes, and billing.

    ``--live``: per provider with a key (``provider``: that one, and a missing key fails),
    authenticate and read the balance, count the offers in stock, list our ``gpuops-`` labelled
    instances (each one a warning named first: it bills) and our volumes (named first too: they bill
    by the month); then this month's billing against the books (``ledger sync`` without --apply).
    ``led``: the ledger or None (none yet). ``providers``: name -> Provider to use instead of
    building them (tests)."""
    from gpuops.providers import REGISTRY, get_provider
    from gpuops.providers.base import OfferQuery

    out: list[Finding] = []
    answered: list[str] = []
    built: dict = dict(providers or {})
    for name in provider_names(provider):
        if name in ACCOUNTLESS:
            continue
        try:
            p = built.get(name) or get_provider(name, settings)
        except GpuopsError as e:
            out.append(Finding(f"auth.{name}", Verdict.FAIL, str(e), "fix the setting it names"))
            continue
        built[name] = p
        if p.account is None and REGISTRY[name].needs_key:
            if provider:  # asked for by name: it must work
                out.append(
                    Finding(
                        f"auth.{name}",
                        Verdict.FAIL,
                        f"no {name} API key",
                        "set the key (`gpuops check` shows where it is looked for)",
                    )
                )
            else:  # said, so that the summary claims nothing of a provider not checked
                out.append(
                    Finding(
                        f"live.{name}",
                        Verdict.SKIP,
                        f"{name} not checked live: no {name} API key",
                        "set the key (`gpuops check` shows where it is looked for)",
                    )
                )
            continue
        try:
            bal = p.balance()
        except GpuopsError as e:
            out.append(
                Finding(f"auth.{name}", Verdict.FAIL, f"{name} refused: {e}", getattr(e, "fix", "") or "check the key")
            )
            continue
        answered.append(name)
        out.append(Finding(f"auth.{name}", Verdict.OK, f"{name} accepted the key (account {p.account})"))
        floor = settings.teardown.balance_floor_usd
        if bal.unreadable and floor is not None:
            from gpuops.teardown.budget import floor_unenforced

            cap = settings.teardown.monthly_cap_usd
            out.append(
                Finding(
                    f"balance.{name}",
                    Verdict.WARN,
                    floor_unenforced(name, floor, cap, bal.note),
                    "set [teardown] monthly_cap_usd (the books enforce it)" if cap is None else "",
                )
            )
        elif bal.usd is None:
            out.append(
                Finding(
                    f"balance.{name}",
                    Verdict.INFO,
                    f"no balance figure{': ' + bal.note if getattr(bal, 'note', '') else ''}",
                )
            )
        else:
            rate = f", spending {bal.spend_usd_per_hour:g} USD/h" if bal.spend_usd_per_hour else ""
            low = floor is not None and bal.usd < floor
            out.append(
                Finding(
                    f"balance.{name}",
                    Verdict.WARN if low else Verdict.OK,
                    f"{bal.usd:.2f} USD{rate}" + (f" (under the floor {floor:g})" if low else ""),
                    "add credit, or lower [teardown] balance_floor_usd" if low else "",
                    data={"usd": bal.usd},
                )
            )
        try:
            from gpuops.planning.offers import screen

            offers, _ = screen(p.offers(OfferQuery()), 1)
        except GpuopsError as e:
            out.append(
                Finding(
                    f"offers.{name}",
                    Verdict.FAIL,
                    f"offers: {e}",
                    "retry; `gpuops offers --provider " + name + "` shows it alone",
                )
            )
        else:
            if offers:
                cheap = min(offers, key=lambda o: o.usd_per_hour)
                out.append(
                    Finding(
                        f"offers.{name}",
                        Verdict.OK,
                        f"{len(offers)} offers in stock; cheapest {cheap.card} at {cheap.usd_per_hour:g} USD/h",
                        data={
                            "count": len(offers),
                            "cheapest_usd_per_hour": cheap.usd_per_hour,
                            "cheapest_card": cheap.card,
                        },
                    )
                )
            else:
                out.append(
                    Finding(f"offers.{name}", Verdict.WARN, "no offer in stock", "try later or another provider")
                )
        out += _instances(p, led, name)
        out += _volumes(p, name)
    out += _billing(settings, led, answered, built)
    return out


def _instances(p, led: Books, name: str) -> list[Finding]:
    from gpuops.providers.base import InstanceStatus

    try:
        insts = [i for i in p.list("gpuops-") if i.status != InstanceStatus.GONE]
    except GpuopsError as e:
        return [Finding(f"instances.{name}", Verdict.FAIL, f"cannot list instances: {e}", "retry")]
    if not insts:
        return [Finding(f"instances.{name}", Verdict.OK, "no gpuops instance of ours")]
    out = []
    for i in insts:
        sid = i.label[len("gpuops-") :] if i.label.startswith("gpuops-") else i.label
        row = led.get(sid) if led is not None else None
        booked = (
            "its row is open"
            if row is not None and row.status != "closed"
            else ("its row is closed: an orphan" if row is not None else "no row in this ledger")
        )
        price = f" at {i.usd_per_hour:g} USD/h" if i.usd_per_hour else ""
        out.append(
            Finding(
                f"instances.{name}.{i.id}",
                Verdict.WARN,
                f"{name} instance {i.id} ({i.label}, {i.status.value}{price}) is billing: {booked}",
                f"gpuops down {sid}"
                if row is not None and row.status != "closed"
                else "gpuops reconcile (--destroy-unknown for a row elsewhere)",
                data={"instance_id": i.id, "label": i.label, "status": i.status.value},
                first=True,
            )
        )
    return out


def _volumes(p, name: str) -> list[Finding]:
    svc = p.volumes()
    if svc is None:
        return []
    try:
        vols = svc.list()
    except GpuopsError as e:
        return [Finding(f"volumes.{name}", Verdict.WARN, f"cannot list volumes: {e}", "retry; `gpuops volumes list`")]
    if not vols:
        return [Finding(f"volumes.{name}", Verdict.OK, "no persistent volume")]
    out = []
    for v in vols:
        price = f", {v.usd_per_month:g} USD/month" if v.usd_per_month is not None else ""
        out.append(
            Finding(
                f"volumes.{name}.{v.id}",
                Verdict.INFO,
                f"volume {v.name or v.id} ({v.size_gb:g} GB{price}) bills until deleted",
                f"gpuops volumes delete {name}:{v.id} --yes, when it is no longer needed",
                data=v.as_json(),
                first=True,
            )
        )
    return out


def _billing(settings, led: Books, names: list[str], built: dict) -> list[Finding]:
    """This month's billing of ``names`` against the books: ``ledger sync`` without --apply."""
    if not names:
        return []
    if led is None:
        return [Finding("billing", Verdict.OK, "no ledger yet: nothing booked to compare")]
    from gpuops.accounting.ledger_service import sync

    try:
        rep = sync(led, settings, providers=names, get_provider=lambda n, s: built[n])
    except GpuopsError as e:
        return [Finding("billing", Verdict.FAIL, f"billing: {e}", "retry; `gpuops ledger sync` shows it")]
    out = []
    for n, why in rep.get("skipped", {}).items():
        out.append(Finding(f"billing.{n}", Verdict.WARN, f"not compared: {why}", "retry later"))
    counts: dict[str, int] = {}
    for s in rep["sessions"]:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    diff = rep.get("diff_usd") or 0.0
    shown = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sorted(counts.items())) or "no session this month"
    verdict = Verdict.WARN if counts.get("differs") else Verdict.OK
    out.append(
        Finding(
            f"billing.{rep['month']}",
            verdict,
            f"{', '.join(rep['providers']) if rep.get('providers') else ', '.join(names)}: "
            f"theirs {rep.get('theirs_usd') or 0:.4f} USD, ours {rep.get('ours_usd') or 0:.4f} USD ({shown})",
            "gpuops ledger sync --apply books their figures" if counts.get("differs") else "",
            data={
                "theirs_usd": rep.get("theirs_usd"),
                "ours_usd": rep.get("ours_usd"),
                "diff_usd": diff,
                "sessions": counts,
            },
        )
    )
    return out
