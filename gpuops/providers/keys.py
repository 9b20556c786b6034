"""Where provider API keys come from, in order, and the rules that keep them secret.

Order (first found wins), for a provider whose registry entry has a ``KeySource``:
1. the provider's variable (``KeySource.env_var``: ``RUNPOD_API_KEY`` / ``VAST_API_KEY``);
2. ``[providers.<name>] api_key`` in infra.toml (or ``GPUOPS_PROVIDERS_<NAME>_API_KEY``); a file
   readable by group or others gets a warning;
3. the provider's own files (``KeySource.files``, in its folder's ``account.py``):
   ``~/.runpod/config.toml`` (profile ``[default]``, key ``api_key``, as the runpod SDK's
   ``get_credentials`` reads it), or ``$XDG_CONFIG_HOME/vastai/vast_api_key`` then
   ``~/.vast_api_key`` (as vastai's ``_resolve_api_key`` reads them).

Note the runpod SDK itself never reads ``RUNPOD_API_KEY`` (only its config file), so we resolve the
key and hand it to the SDK explicitly. A key is never logged, put in an error, a ledger row or a
command line; ``redact`` scrubs it from any text that came back from a library.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuops.providers.entry import KeySource, read_key_file  # noqa: F401  (a provider's key rules, with the entry)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

log = logging.getLogger("gpuops.providers")


@dataclass(frozen=True)
class Credential:
    """An API key and where it came from (``source`` is safe to print; ``key`` is not)."""

    key: str
    source: str

    def __repr__(self) -> str:  # never show the key in a traceback or a debug print
        return f"Credential(source={self.source!r})"

    @property
    def account(self) -> str:
        """A non-secret fingerprint of the key.

        The first 8 hex digits of its SHA-256 (32 bits: tells a team's keys apart, reveals nothing
        usable). Stored on every ledger row rented with it (``sessions.account``, as
        ``<provider>:<fingerprint>``) so that only a holder of the same key closes or destroys that
        row."""
        return key_fingerprint(self.key)


def key_fingerprint(key: str) -> str:
    """First 8 hex digits of SHA-256 of ``key`` (stripped)."""
    import hashlib

    return hashlib.sha256(key.strip().encode("utf-8")).hexdigest()[:8]


_warned: set[str] = set()


def _warn_if_readable(path: str) -> None:
    if path in _warned:
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        _warned.add(path)
        log.warning(
            "%s holds a provider API key and is readable by group/others (mode %o); run: chmod 600 %s",
            path,
            stat.S_IMODE(mode),
            path,
        )


def _key_in_file(path: str, name: str) -> bool:
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return bool(data.get("providers", {}).get(name, {}).get("api_key"))


def resolve_key(
    source: KeySource, configured: str = "", config_source: str | None = None, env: Mapping[str, str] | None = None
) -> Credential | None:
    """The API key for the marketplace of ``source`` (its entry's ``keys``), or None when none is set anywhere.

    ``configured``: ``settings.providers.<name>.api_key``; ``config_source``: the infra.toml path it
    may have come from (for the permission warning).
    """
    env = os.environ if env is None else env
    name, var = source.name, source.env_var
    if env.get(var, "").strip():
        return Credential(env[var].strip(), f"${var}")
    if configured.strip():
        if config_source and _key_in_file(config_source, name):
            _warn_if_readable(config_source)
            return Credential(configured.strip(), f"{config_source} [providers.{name}] api_key")
        return Credential(configured.strip(), f"$GPUOPS_PROVIDERS_{name.upper()}_API_KEY")
    for path in source.files(env):
        key = source.read_file(path)
        if key:
            return Credential(key, str(path))
    return None


def resolve_url(source: KeySource, configured: str = "", env: Mapping[str, str] | None = None) -> str:
    """API base URL of the provider of ``source``.

    ``[providers.<name>] url``, else its ``KeySource.url_var`` (``RUNPOD_API_BASE_URL`` /
    ``VAST_URL``), else the provider's public endpoint. Trailing slashes are dropped (vastai joins
    paths with plain string concatenation), and so are its ``url_tails`` (RunPod: the URL names
    the API host; ``/v2/...`` and ``/graphql`` are appended per call)."""
    env = os.environ if env is None else env
    url = (configured.strip() or env.get(source.url_var, "").strip() or source.default_url).rstrip("/")
    for tail in source.url_tails:
        if url.endswith(tail):
            url = url[: -len(tail)].rstrip("/")
    return url


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with every non-empty secret replaced by ``***``."""
    for s in secrets:
        if s and len(s) >= 4:
            text = text.replace(s, "***")
    return text


def missing_key_fix(source: KeySource) -> str:
    """The one-line fix for a missing or rejected key of the provider of ``source``."""
    return f"set {source.env_var} ({source.console}), or [providers.{source.name}] api_key in infra.toml (chmod 600)"
