"""``gpuops volumes list|create|delete``: persistent volumes (gpuops.providers.volumes).

Light at import: SDKs and rich load inside the commands."""

from __future__ import annotations

import sys
from contextlib import contextmanager, nullcontext

import typer

from gpuops.cli.group import Group
from gpuops.cli.options import CONFIG_OPT, number, output_options
from gpuops.errors import BadInput
from gpuops.providers import WITH_VOLUMES, choices, titles  # names only: no provider class is imported


def _region_help() -> str:
    """``--region``'s help: what each provider with volumes calls a region (the registry's ``volume_region``)."""
    from gpuops.providers import REGISTRY

    return "; ".join(f"{REGISTRY[n].title}: {REGISTRY[n].volume_region}" for n in WITH_VOLUMES) + "."


volumes_app = typer.Typer(
    cls=Group, help=f"Persistent volumes that survive the destroy ({titles(WITH_VOLUMES, ', ')}).", no_args_is_help=True
)

# Columns left out first to last when the terminal is too narrow (provider, id, size, price stay).
DROP_ORDER = ("mount", "region", "name")


def _provider(name: str, config: str | None):
    from gpuops.config import load_settings
    from gpuops.providers import WITH_VOLUMES, get_provider

    if name not in WITH_VOLUMES:
        raise BadInput(f"provider {name!r} has no volumes", f"use --provider {' or '.join(WITH_VOLUMES)}")
    return get_provider(name, load_settings(config))


@contextmanager
def _input_errors():
    """A provider refusal that means "fix your input" exits 2 like `up`'s, not 1.

    Such a refusal is no or a rejected key, an unsupported request, a 400: nothing was created."""
    from gpuops.providers.base import ProviderError, ProviderErrorKind

    try:
        yield
    except ProviderError as e:
        if e.kind in (ProviderErrorKind.AUTH, ProviderErrorKind.UNSUPPORTED, ProviderErrorKind.BAD_REQUEST):
            raise BadInput(e.message, e.fix) from None
        raise


def _print(vols: list, fmt: str, notes: list[str]) -> None:
    from gpuops.providers.volumes import VOLUME_COLUMNS
    from gpuops.render import emit

    if fmt != "table":
        emit.emit(
            {"volumes": [v.as_json() for v in vols], "notes": notes},
            fmt,
            csv_records=[v.as_json() for v in vols],
            csv_columns=VOLUME_COLUMNS,
        )
        return
    from gpuops.render import ui
    from gpuops.render.tables import ID, NAME, NUM, TEXT, Col, print_table, ranked

    con = ui.console()
    if vols:
        cols = [
            Col("provider", ID),
            Col("id", ID),
            Col("name", NAME),
            Col("size GB", NUM),
            Col("region", NAME),
            Col("USD/month", NUM),
            Col("mount", TEXT),
        ]
        print_table(
            con,
            None,
            ranked(cols, DROP_ORDER),
            [
                [
                    v.provider,
                    v.id,
                    v.name,
                    f"{v.size_gb:g}",
                    v.region + (f" (machine {v.machine_id})" if v.machine_id else ""),
                    f"{v.usd_per_month:.2f}" if v.usd_per_month is not None else "?",
                    v.mount_path,
                ]
                for v in vols
            ],
        )
    else:
        con.print("no volumes")
    total = sum(v.usd_per_month or 0.0 for v in vols)
    if vols:
        con.print(f"total {total:.2f} USD/month, billed whether or not a box is running")
    for n in notes:
        con.print(f"note: {n}")


@volumes_app.command("list")
@output_options()
def volumes_list(
    provider: str | None = typer.Option(
        None, "--provider", help=f"{choices(WITH_VOLUMES)} (default: every provider with a key)."
    ),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Your volumes: size (GB), region/datacenter, monthly cost (USD)."""
    from gpuops.config import load_settings
    from gpuops.providers import MARKETPLACES, REGISTRY, WITH_VOLUMES, configured, get_provider, titles
    from gpuops.providers.base import ProviderError
    from gpuops.providers.volume_refs import service

    settings = load_settings(config)
    names = [provider] if provider else [n for n in configured(settings) if n in WITH_VOLUMES]
    if provider:
        _provider(provider, config)  # validates the name
    vols, notes = [], []
    if not names:
        keyed = [n for n in MARKETPLACES if n in WITH_VOLUMES]
        notes.append(f"no {titles(keyed)} key found: set {' or '.join(REGISTRY[n].key_source.env_var for n in keyed)}")
    for name in names:
        try:
            from gpuops.render.progress import waiting

            with waiting(f"asking {name} for its volumes"), _input_errors() if provider else nullcontext():
                vols += service(get_provider(name, settings)).list()
        except ProviderError as e:
            if provider:
                raise
            notes.append(f"{name}: {e}")
    _print(vols, fmt, notes)


@volumes_app.command("create")
@output_options()
def volumes_create(
    provider: str = typer.Option(..., "--provider", help=f"{choices(WITH_VOLUMES)}."),
    name: str = typer.Option(..., "--name", help="Volume name (letters, digits, . _ -)."),
    size_gb: float = number(..., "--size-gb", help="Size in GB (10^9 bytes).", example="100", unit="GB"),
    region: str = typer.Option("", "--region", help=_region_help()),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Create a volume; it bills per GB-month until `gpuops volumes delete`."""
    from gpuops.providers import REGISTRY, WITH_VOLUMES
    from gpuops.providers.volume_refs import service
    from gpuops.providers.volumes import check_name, check_size

    check_name(name)
    check_size(size_gb)
    with _input_errors():
        p = _provider(provider, config)
    entry = REGISTRY[provider]
    if p.account is None and entry.needs_key:  # no key: said before anything else is asked for
        from gpuops.providers.keys import missing_key_fix

        raise BadInput(f"no {entry.title} API key found", missing_key_fix(entry.key_source))
    need = entry.volume_type.region_required if provider in WITH_VOLUMES else None
    if need and not region:
        raise BadInput(*need)
    with _input_errors():
        vol = service(p).create(name, size_gb, region)
    _print([vol], fmt, [f"mount it with: gpuops up --volume {vol.provider}:{vol.name or vol.id} (or [storage] volume)"])


@volumes_app.command("delete")
@output_options()
def volumes_delete(
    ref: str = typer.Argument(..., help="<provider>:<id or name>"),
    yes: bool = typer.Option(False, "--yes", help="Really delete: the data on it is lost."),
    config: str | None = CONFIG_OPT,
    fmt: str = "table",
) -> None:
    """Delete a volume and everything on it (weights, caches, kept results)."""
    from gpuops.providers.volume_refs import parse_ref, resolve, service

    prov, _ = parse_ref(ref)
    with _input_errors():
        p = _provider(prov, config)
        vol = resolve(p, ref)
    if not yes:
        what = f"deleting {ref} loses its {vol.size_gb:g} GB (weights, caches, kept results)"
        if not _on_terminal():  # a script, a pipe: nobody to ask
            raise BadInput(what, "add --yes to delete it")
        if not typer.confirm(f"{what}. Delete it?", default=False, err=True):
            sys.stderr.write("not deleted\n")
            raise typer.Exit(1)
    service(p).delete(vol.id)
    if fmt != "table":
        from gpuops.render import emit

        emit.emit({"deleted": vol.as_json()}, fmt, csv_records=[vol.as_json()])
    else:
        print(
            f"deleted {vol.provider} volume {vol.id} ({vol.name}, {vol.size_gb:g} GB, saves {vol.usd_per_month or 0:.2f} USD/month)"
        )


def _on_terminal() -> bool:
    """True when a person can answer a question: stdin and stderr are terminals."""
    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
