"""``gpuops volumes list|create|delete``: persistent volumes (gpuops.volumes). Light at import:
SDKs and rich load inside the commands."""

from __future__ import annotations

import json
from typing import Optional

import typer

from gpuops.errors import BadInput

volumes_app = typer.Typer(help="Persistent volumes that survive the destroy (RunPod network volumes, Vast volumes).",
                          no_args_is_help=True)

CONFIG_OPT = typer.Option(None, "--config", help="infra.toml to read (default: ./infra.toml, then the user config dir).")
JSON_OPT = typer.Option(False, "--json", help="Print JSON instead of a table.")


def _provider(name: str, config: Optional[str]):
    from gpuops.config import load_settings
    from gpuops.providers import get_provider
    from gpuops.volumes import PROVIDERS

    if name not in PROVIDERS:
        raise BadInput(f"provider {name!r} has no volumes", f"use --provider {' or '.join(PROVIDERS)}")
    return get_provider(name, load_settings(config))


def _print(vols: list, json_out: bool, notes: list[str]) -> None:
    if json_out:
        print(json.dumps({"volumes": [v.as_json() for v in vols], "notes": notes}, indent=1))
        return
    from rich.table import Table

    from gpuops import ui

    t = Table(box=None, pad_edge=False)
    for col, just in (("provider", "left"), ("id", "left"), ("name", "left"), ("size GB", "right"), ("region", "left"),
                      ("USD/month", "right"), ("mount", "left")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for v in vols:
        cost = f"{v.usd_per_month:.2f}" if v.usd_per_month is not None else "?"
        where = v.region + (f" (machine {v.machine_id})" if v.machine_id else "")
        t.add_row(v.provider, v.id, v.name, f"{v.size_gb:g}", where, cost, v.mount_path)
    con = ui.console()
    con.print(t) if vols else con.print("no volumes")
    total = sum(v.usd_per_month or 0.0 for v in vols)
    if vols:
        con.print(f"total {total:.2f} USD/month, billed whether or not a box is running")
    for n in notes:
        con.print(f"note: {n}")


@volumes_app.command("list")
def volumes_list(provider: Optional[str] = typer.Option(None, "--provider", help="runpod | vast (default: every provider with a key)."),
                 config: Optional[str] = CONFIG_OPT, json_out: bool = JSON_OPT) -> None:
    """Your volumes: size (GB), region/datacenter, monthly cost (USD)."""
    from gpuops.config import load_settings
    from gpuops.providers import configured, get_provider
    from gpuops.providers.base import ProviderError
    from gpuops.volumes import service

    settings = load_settings(config)
    names = [provider] if provider else configured(settings)
    if provider:
        _provider(provider, config)  # validates the name
    vols, notes = [], []
    if not names:
        notes.append("no RunPod or Vast key found: set RUNPOD_API_KEY or VAST_API_KEY")
    for name in names:
        try:
            vols += service(get_provider(name, settings)).list()
        except ProviderError as e:
            if provider:
                raise
            notes.append(f"{name}: {e}")
    _print(vols, json_out, notes)


@volumes_app.command("create")
def volumes_create(provider: str = typer.Option(..., "--provider", help="runpod | vast."),
                   name: str = typer.Option(..., "--name", help="Volume name (letters, digits, . _ -)."),
                   size_gb: float = typer.Option(..., "--size-gb", help="Size in GB (10^9 bytes)."),
                   region: str = typer.Option("", "--region", help="RunPod datacenter (e.g. EU-RO-1, required); Vast country code or machine:<id>."),
                   config: Optional[str] = CONFIG_OPT, json_out: bool = JSON_OPT) -> None:
    """Create a volume; it bills per GB-month until `gpuops volumes delete`."""
    from gpuops.volumes import check_name, check_size, service

    check_name(name)
    check_size(size_gb)
    if provider == "runpod" and not region:
        raise BadInput("a RunPod network volume lives in one datacenter", "add --region, e.g. --region EU-RO-1")
    vol = service(_provider(provider, config)).create(name, size_gb, region)
    _print([vol], json_out, [f"mount it with: gpuops up --volume {vol.provider}:{vol.name or vol.id} (or [storage] volume)"])


@volumes_app.command("delete")
def volumes_delete(ref: str = typer.Argument(..., help="<provider>:<id or name>"),
                   yes: bool = typer.Option(False, "--yes", help="Really delete: the data on it is lost."),
                   config: Optional[str] = CONFIG_OPT, json_out: bool = JSON_OPT) -> None:
    """Delete a volume and everything on it (weights, caches, kept results)."""
    from gpuops.volumes import parse_ref, resolve, service

    prov, _ = parse_ref(ref)
    p = _provider(prov, config)
    vol = resolve(p, ref)
    if not yes:
        raise BadInput(f"deleting {ref} loses its {vol.size_gb:g} GB (weights, caches, kept results)", "add --yes to delete it")
    service(p).delete(vol.id)
    if json_out:
        print(json.dumps({"deleted": vol.as_json()}))
    else:
        print(f"deleted {vol.provider} volume {vol.id} ({vol.name}, {vol.size_gb:g} GB, saves {vol.usd_per_month or 0:.2f} USD/month)")
