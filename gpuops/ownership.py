"""Who owns a ledger row, and whether this process may act on it.

A team shares one ledger (PostgreSQL). Every session row records its ``owner`` (``[user] name``,
default ``<login>@<hostname>``) and its provider ``account``:

* RunPod / Vast: ``<provider>:<first 8 hex of sha256(API key)>`` (``keys.Credential.account``);
* local: ``local:<login>@<hostname>:<first 8 hex of sha256(boxes dir)>`` -- a local box lives in
  one data dir on one machine, and nobody else can see, reach or end it.

The rule every command that closes or destroys follows (reconcile, watchdog, ``down``, ``up``'s
quick reconcile): act only on rows whose account this process holds a credential for. A provider
answering "not found" is only proof that an instance is gone when asked with the row's own
account; asked with another key it means nothing ("unknown"), so a row of another account is never
closed, booked destroyed or treated as an orphan here. Rows from before ownership (account NULL)
are acted on only while their instance is visible to the key we hold; not visible, they stay open
and are reported as ``unknown``.
"""

from __future__ import annotations

import getpass
import hashlib
import re
import socket
from pathlib import Path

HELD = "held"  # the row's account is the one this process holds
OTHER = "other"  # another account: hands off
LEGACY = "legacy"  # no account recorded (before m004): act only on what the held key can see


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "-", text).strip("-") or "unknown"


def default_owner() -> str:
    """``<login>@<hostname>`` with anything outside ``[A-Za-z0-9._+-]`` replaced by ``-``."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name (a container without /etc/passwd entry)
        user = "user"
    return f"{_clean(user)}@{_clean(socket.gethostname())}"[:64]


def local_account(boxes_dir: Path) -> str:
    """The local provider's account: this login on this machine with this boxes dir."""
    where = hashlib.sha256(str(Path(boxes_dir).expanduser().absolute()).encode("utf-8")).hexdigest()[:8]
    return f"local:{default_owner()}:{where}"


def account_of(provider) -> str | None:
    """The account ``provider`` acts for (None: no credential, so it owns nothing)."""
    return getattr(provider, "account", None)


def standing(row, held_account: str | None) -> str:
    """HELD, OTHER or LEGACY: may a process holding ``held_account`` act on ``row``."""
    acct = getattr(row, "account", None)
    if acct is None:
        return LEGACY
    return HELD if held_account is not None and acct == held_account else OTHER


def is_mine(row, owner: str) -> bool:
    """True when ``owner`` rented the row (rows from before m004 have no owner: everyone's)."""
    o = getattr(row, "owner", None)
    return o is None or o == owner


def refused_by(refusal, provider: str, account: str | None, owner: str) -> bool:
    """Does an active refusal (ledger.models.Refusal) cover renting on ``provider`` with ``account`` as ``owner``.

    Scope "*" or the provider name; its ``account`` None covers everyone (team scope), else the
    provider account (balance_floor) or the owner (monthly_cap)."""
    if refusal.scope not in ("*", provider):
        return False
    who = getattr(refusal, "account", None)
    return who is None or who in (account, owner)
