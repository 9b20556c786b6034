"""One provider as the registry (``gpuops.providers.REGISTRY``) knows it.

``ProviderEntry``; ``KeySource``, where its account key and API base come from; ``SettingsView``,
what a provider is built from. Light on purpose: every provider folder's ``__init__.py`` builds its
entry from these at CLI start-up (the help strings and ``gpuops.config``'s ``[providers]`` tables),
so this module imports no provider class, SDK or ``logging``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from onbox.vocabulary import ProviderName

if TYPE_CHECKING:
    from gpuops.providers.base import Provider
    from gpuops.providers.volumes import VolumeService
    from gpuops.settings_base import Section


@runtime_checkable
class SettingsView(Protocol):
    """What a provider is built from: the parts of ``gpuops.config.Settings`` that ``build`` reads.

    ``config`` sits above ``providers/`` (it builds ``[providers]`` from the registry's ``settings``
    models), so nothing here imports it; ``Settings`` has this shape, which
    ``tests/core/test_import_contract.py`` checks. ``providers``: one table per provider
    (``providers.<section>``, that entry's ``settings`` model); ``up`` / ``teardown``: the
    ``[up]`` / ``[teardown]`` tables; ``source``: the infra.toml they came from (None: none);
    ``data_path()``: the data directory; ``ledger_url()``: the ledger's URL (its spool paths);
    ``simulated()``: the data directory is `gpuops demo`'s (every offer simulated, gpuops.providers.get_provider)."""

    providers: Any
    up: Any
    teardown: Any
    source: str | None

    def data_path(self) -> Path: ...

    def ledger_url(self) -> str: ...

    def simulated(self) -> bool: ...


def read_key_file(path: Path) -> str:
    """A key file that holds the key alone (stripped); "" when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class KeySource:
    """Where one provider's account key and API base come from (its ``ProviderEntry.keys``).

    ``env_var``: the provider's own key variable; ``url_var``: its API base variable;
    ``default_url``: its public API base; ``files``: its own key files, given the environment
    (``HOME``, ``XDG_CONFIG_HOME``), first found wins; ``read_file``: the key in one of them ("" when
    none); ``url_tails``: path tails dropped from a configured base (gpuops appends them per call);
    ``console``: where a user makes a key, for the fix line; ``name``: the provider's registry name
    (its ``[providers.<name>]`` table)."""

    env_var: str
    url_var: str
    default_url: str
    files: Callable[[Mapping[str, str]], list[Path]] = lambda env: []
    read_file: Callable[[Path], str] = read_key_file
    url_tails: tuple[str, ...] = ()
    console: str = ""
    name: str = ""


@dataclass(frozen=True)
class ProviderEntry:
    """One provider as the laptop knows it.

    ``name``: its ``ProviderName`` (also its ``[providers.<name>]`` config section, its pyproject
    extra and the agent's destroy kind for its boxes); ``title``: how prose names it; ``build``:
    the provider object from a ``SettingsView``; ``load``: its class (imported on call); ``settings``:
    its ``[providers.<name>]`` settings model, imported on call (``<folder>/settings.py``, pure data;
    ``gpuops.config`` builds ``Settings.providers`` from these, the help strings never load them).
    ``keys``: where its account key and API base come from (None: it needs no account).
    ``spot``/``billing``: whether the class has the ``Interruptible`` / ``HasBilling`` capability
    (stated here for the help strings, which cannot import the class; a test checks the two
    agree); ``volumes``: its ``HasVolumes`` service class, imported on call (None: no volumes),
    ``volume_region`` what ``gpuops volumes create --region`` means there. ``billing_increment_s``: the billing unit its documentation
    states, seconds (``[providers.<name>] billing_increment_seconds`` overrides it).
    ``sdk``: the import name of its SDK, if any (`gpuops check` shows its version).
    ``catalog_field`` / ``catalog_heading``: the ``gpuops.catalog.Card`` field holding its GPU
    name for a card, and that column's heading in `gpuops plan --cards`.
    ``agent_credential``: what the on-box agent destroys with (``onbox/agent.py``),
    ``agent_refused``: what it does when that credential is refused (shown by `gpuops check`).
    """

    name: ProviderName
    title: str
    build: Callable[[SettingsView], Provider]
    load: Callable[[], type[Provider]]
    settings: Callable[[], type[Section]]
    keys: KeySource | None = None
    spot: bool = False
    volumes: Callable[[], type[VolumeService]] | None = None
    volume_region: str = ""
    billing: bool = False
    billing_increment_s: float = 1.0
    sdk: str = ""
    catalog_field: str = ""
    catalog_heading: str = ""
    agent_credential: str = ""
    agent_refused: str = ""

    @property
    def section(self) -> str:
        """Its config section: ``settings.providers.<section>``."""
        return self.name.value

    @property
    def needs_key(self) -> bool:
        """Whether it rents on an account (an API key)."""
        return self.keys is not None

    @property
    def key_source(self) -> KeySource:
        """``keys`` of a marketplace. Raises ValueError for a provider that needs no key (``local``)."""
        if self.keys is None:
            raise ValueError(f"provider {self.name.value} needs no API key")
        return self.keys

    @property
    def volume_type(self) -> type[VolumeService]:
        """Its volume service class (``volumes()``). Raises ValueError for a provider without volumes."""
        if self.volumes is None:
            raise ValueError(f"provider {self.name.value} has no volumes")
        return self.volumes()

    @property
    def agent_destroy_kind(self) -> str:
        """``destroy.kind`` in the on-box agent's config for its boxes (``onbox/agent.py``)."""
        return self.name.value
