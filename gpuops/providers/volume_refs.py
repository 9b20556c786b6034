"""A volume reference (``<provider>:<id or name>``) read against the provider registry.

``parse_ref`` checks one, ``service`` is a provider's volume service, ``resolve`` the volume a
reference names on a provider, ``mountable`` the offers that can mount it (`up --volume`). This
module sits above the registry (``gpuops.providers``), which the volume services below it never
import: what they share is ``gpuops.providers.volumes``.
"""

from __future__ import annotations

from gpuops.errors import BadInput
from gpuops.providers import NAMES, REGISTRY, WITH_VOLUMES, choices
from gpuops.providers.volumes import VOLUME_NAME, Volume


def parse_ref(ref: str) -> tuple[str, str]:
    """``"<provider>:<id or name>"`` -> (provider, id or name). Raises BadInput naming the fix."""
    have = WITH_VOLUMES
    prov, sep, ident = (ref or "").strip().partition(":")
    if sep and prov not in have and prov in NAMES:  # a real provider without volumes
        raise BadInput(
            f"volume {ref!r}: the {prov} provider has no persistent volumes (only {', '.join(have)} do)",
            f"drop --volume for a {prov} run, or rent on --provider {choices(have, ' / ')}",
        )
    if not sep or prov not in have or not ident or not VOLUME_NAME.match(ident):
        examples = [REGISTRY[n].volume_type.example for n in have[:2]]
        eg = f"--volume {examples[0]}" + (f' or [storage] volume = "{examples[1]}"' if len(examples) > 1 else "")
        raise BadInput(f"volume {ref!r} is not <provider>:<id or name>", f"e.g. {eg}; see `gpuops volumes list`")
    return prov, ident


def service(provider):
    """The provider's volume service (``Provider.volumes()``). Raises BadInput when it has none."""
    svc = provider.volumes()
    if svc is None:
        have = WITH_VOLUMES
        raise BadInput(f"provider {provider.name!r} has no volumes", f"volumes exist on {' and '.join(have)}")
    return svc


def resolve(provider, ref: str) -> Volume:
    """The volume ``ref`` (``<provider>:<id or name>``) names, on ``provider``.

    Raises BadInput when the provider differs, or no volume (or more than one) has that id or name."""
    prov, ident = parse_ref(ref)
    if prov != provider.name:
        raise BadInput(
            f"volume {ref!r} is on {prov}, but `up` rents on {provider.name}",
            f"add --provider {prov}, or pick a {provider.name} volume",
        )
    vols = service(provider).list()
    found = [v for v in vols if v.id == ident] or [v for v in vols if v.name == ident]
    if not found:
        names = ", ".join(f"{v.name or v.id}" for v in vols[:5]) or "none"
        raise BadInput(
            f"no {prov} volume with id or name {ident!r} (yours: {names})",
            "create it with `gpuops volumes create`, or fix [storage] volume",
        )
    if len(found) > 1:
        raise BadInput(f"{len(found)} {prov} volumes are named {ident!r}", "name it by id (see `gpuops volumes list`)")
    return found[0]


def mountable(provider, volume: Volume, offers: list) -> list:
    """``offers`` narrowed to those that can mount ``volume`` (RunPod: Secure Cloud, its datacenter; Vast: its machine).

    Raises BadInput when none can."""
    ok = service(provider).mountable(volume, offers)
    if offers and not ok:
        where = service(provider).where(volume)
        raise BadInput(
            f"no offer can mount volume {volume.name or volume.id} ({where})",
            "try another --card, or drop --volume (weights are then fetched on the box)",
        )
    return ok
