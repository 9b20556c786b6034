"""The provider registry (gpuops/providers/__init__.py) is the one list of providers on the laptop
side: what derives from it agrees with it (the ``[providers.<name>]`` settings tables included),
and what cannot import it (the box's standard-library files, infra.example.toml, the pyproject
extras, the catalog's columns) is checked against it here. docs/adding-a-provider.md names these checks."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

from gpuops.errors import BadInput
from gpuops.providers import ACCOUNTLESS, MARKETPLACES, NAMES, REGISTRY, SPOT, WITH_BILLING, WITH_VOLUMES, entry
from gpuops.providers.base import HasBilling, HasVolumes, Interruptible, Provider
from gpuops.providers.volumes import VolumeService
from onbox.vocabulary import PROVIDER_NAMES, ProviderName

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_the_box_vocabulary_names_the_registry_providers():
    assert set(PROVIDER_NAMES) == set(NAMES) == {p.value for p in ProviderName}, (
        "onbox/vocabulary.py ProviderName: one per entry"
    )
    assert NAMES[0] == "local"  # the default provider comes first (help strings, `offers` without keys)


def test_the_agent_destroys_a_box_of_every_registered_provider():
    sys.path.insert(0, str(ROOT / "onbox"))
    try:
        import onbox.agent as agent
    finally:
        sys.path.pop(0)
    assert set(agent.MARKET_DESTROYS) == set(MARKETPLACES), (
        "onbox/agent.py MARKET_DESTROYS: one destroy per marketplace"
    )
    assert {REGISTRY[n].agent_destroy_kind for n in NAMES} == set(NAMES)
    for name in NAMES:
        assert REGISTRY[name].agent_credential, name  # `gpuops check` says what the box destroys itself with


def test_the_config_takes_exactly_the_registered_names():
    from gpuops.config import load_settings

    for name in NAMES:
        s = load_settings(None, {"up": {"provider": name}})
        assert s.up.provider == name
    with pytest.raises(BadInput):
        load_settings(None, {"up": {"provider": "nope"}})


def test_the_providers_tables_are_the_entries_settings_models():
    """``[providers]`` is built from the entries: one table per provider, in registry order, of the
    model its folder's ``settings.py`` declares; config.py names no provider."""
    import msgspec

    from gpuops.config import Settings, _env_names
    from gpuops.settings_base import Section

    providers = Settings().providers
    assert tuple(providers.__struct_fields__) == NAMES
    for name, e in REGISTRY.items():
        model = e.settings()
        assert issubclass(model, Section), (
            f"gpuops/providers/{name}/settings.py: a Section subclass, loaded by ENTRY.settings"
        )
        assert model.__module__ == f"gpuops.providers.{name}.settings", model
        assert type(getattr(providers, e.section)) is model
        for key in msgspec.structs.fields(model):
            assert _env_names()[f"GPUOPS_PROVIDERS_{name.upper()}_{key.name.upper()}"] == ("providers", name, key.name)
    config = (ROOT / "gpuops" / "config.py").read_text(encoding="utf-8")
    assert not [e.settings().__name__ for e in REGISTRY.values() if e.settings().__name__ in config], (
        "config.py names no provider's model"
    )


def test_infra_example_has_one_section_per_provider():
    doc = tomllib.loads((ROOT / "infra.example.toml").read_text(encoding="utf-8"))
    assert tuple(doc["providers"]) == NAMES, "infra.example.toml: one [providers.<name>] section per entry, in order"
    for name in MARKETPLACES:
        assert {"url", "api_key", "billing_increment_seconds"} <= set(doc["providers"][name]), name
        assert doc["providers"][name]["billing_increment_seconds"] == REGISTRY[name].billing_increment_s


def test_each_sdk_is_the_extra_named_after_its_provider():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    for name, e in REGISTRY.items():
        if not e.sdk:  # no SDK: its extra, if any, is the one HTTP client the project has, never an SDK
            assert name not in extras or extras[name] == ["requests>=2.31"], (name, extras.get(name))
            continue
        assert name in extras, f"pyproject.toml: an extra named {name} with its SDK pinned (and in requirements.lock)"
        reqs = [re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in extras[name]]
        assert e.sdk in reqs, (name, extras[name])
        assert name in extras["all"][0], extras["all"]  # gpuops[all] installs every provider


def test_the_registry_flags_agree_with_the_classes():
    for name, e in REGISTRY.items():
        cls = e.load()
        assert issubclass(cls, Provider) and cls.name == name
        assert not cls.__abstractmethods__, (name, cls.__abstractmethods__)
        assert cls.supports_spot == e.spot == issubclass(cls, Interruptible), name
        assert issubclass(cls, HasVolumes) == (e.volumes is not None), name
        assert issubclass(cls, HasBilling) == e.billing, name
        if e.volumes is not None:
            svc = e.volumes()
            assert issubclass(svc, VolumeService) and not svc.__abstractmethods__, name
            assert svc.example.startswith(f"{name}:") and svc.usd_per_gb_month > 0 and svc.price_source, name
    assert SPOT == tuple(n for n in NAMES if REGISTRY[n].spot)
    assert WITH_VOLUMES and WITH_BILLING and set(MARKETPLACES) | set(ACCOUNTLESS) == set(NAMES)


def test_every_call_of_an_http_provider_is_guarded():
    """What ``__init_subclass__`` once did silently: every contract call a provider defines runs
    under the call guard (one deadline, one reply cap). ``@guarded`` says so at the definition."""
    for name, e in REGISTRY.items():
        cls = e.load()
        if not cls.http_calls:
            continue
        for meth in Provider.GUARDED:
            fn = getattr(cls, meth)
            if fn is getattr(Provider, meth):  # the base's default: it calls guarded methods only
                continue
            assert getattr(fn, "guarded", False), f"{name}.{meth} is not @guarded"


def test_a_class_missing_a_required_method_cannot_be_made():
    class Half(Provider):
        name = "half"

        def offers(self, query):
            return []

    with pytest.raises(TypeError, match="abstract"):
        Half()


def test_accounts_keys_and_catalog_columns_come_from_the_entries():
    from gpuops.catalog import Card
    from gpuops.providers.keys import missing_key_fix

    fields = {f.name for f in dataclasses.fields(Card)}
    for name in MARKETPLACES:
        e = REGISTRY[name]
        assert e.keys is not None and e.catalog_heading, name
        assert e.catalog_field in fields, (
            f"gpuops/catalog: a Card field {e.catalog_field} (and its column in cards.toml)"
        )
        fix = missing_key_fix(e.keys)
        assert e.keys.name == name and e.keys.env_var in fix and f"[providers.{name}]" in fix
    for name in ACCOUNTLESS:
        assert REGISTRY[name].keys is None
    with pytest.raises(BadInput, match="unknown provider"):
        entry("nope")


def test_help_strings_list_the_registered_providers(cli):
    for argv in (("up", "--help"), ("offers", "--help"), ("check", "--help")):
        text = " ".join(cli(*argv, env={"COLUMNS": "200"}).stdout.split())
        assert " | ".join(NAMES) in text, argv
    text = " ".join(cli("volumes", "create", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert " | ".join(WITH_VOLUMES) in text


# Two or more quoted provider names in one bracket, or a Literal of them: a second list of providers.
_LIST_OF_NAMES = re.compile(
    r"[\(\[\{][^()\[\]{}\n]*(%s)[^()\[\]{}\n]*(%s)" % (("|".join(f'"{n}"' for n in NAMES),) * 2)
)


def test_no_second_list_of_providers_on_the_laptop_side():
    """Outside the provider folders, nothing lists provider names: it asks the registry."""
    own = {ROOT / "gpuops" / "providers" / "__init__.py"}  # the registry itself
    found = []
    for path in sorted((ROOT / "gpuops").rglob("*.py")):
        rel = (
            path.relative_to(ROOT / "gpuops" / "providers")
            if path.is_relative_to(ROOT / "gpuops" / "providers")
            else None
        )
        if path in own or (rel is not None and len(rel.parts) > 1 and rel.parts[0] in NAMES):
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _LIST_OF_NAMES.search(line.split("#", 1)[0]):
                found.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert not found, "\n".join(found)


def test_runpods_spot_fix_names_every_provider_with_spot():
    # runpod/compute.py reads its siblings' entries (it may not import the registry): this keeps
    # that list in step with the registry's; a new provider with spot is added there too.
    from gpuops.providers import SPOT, flags
    from gpuops.providers.runpod.compute import _spot_fix

    assert _spot_fix().startswith(f"use {flags(n for n in SPOT if n != 'runpod')} for interruptible offers")
