"""Vast volumes (``HasVolumes``): the ``VolumeService`` of ``VastProvider``.

Vast, the vastai SDK 1.9.1 (vastai/api/storage.py, vastai/api/offers.py):
``show_volumes(type="local"|"network")`` -> ``GET /api/v0/volumes?owner=me&type=local_volume``
answering ``{"volumes": [{"id", "label", "disk_space", "machine_id", "geolocation",
"storage_cost", "start_date", ...}]}`` (display columns in vastai/cli/display.py
``volume_fields``); ``search_volumes(query, storage=GB)`` -> ``POST /api/v0/volumes/search/``
answering ``{"offers": [{"id", "machine_id", "disk_space", "storage_cost" (USD/GB/month),
"geolocation", ...}]}``; ``create_volume(offer_id, size, name)`` -> ``PUT /api/v0/volumes/`` with
``{"size", "id", "name"}`` answering ``{"success", "volume_name"}`` (the spec; its list rows
carry no name, so the new volume is the one listed after and not before, and its name is kept in
the data dir); ``delete_volume(id)`` -> ``DELETE /api/v0/volumes/?id=N``. Mount:
``create_instance(link_volume=id, mount_path=...)`` (``volume_info``); a Vast local volume lives
on one machine, so only offers on that ``machine_id`` can mount it.
"""

from __future__ import annotations

import builtins  # a method named list shadows the type in its class
import re
from dataclasses import replace
from pathlib import Path

from gpuops.errors import BadInput
from gpuops.providers.volumes import Volume, VolumeService, check_name, check_size

VAST_USD_PER_GB_MONTH = (
    0.10  # vastai 1.9.1 vastai/api/storage.py list_volume(price_disk=0.10): hosts' default volume price
)
VAST_MOUNT = "/gpuops-volume"  # Vast mounts a volume where the renter says (volume_info.mount_path)


class VastVolumes(VolumeService):
    """Vast volumes through ``provider`` (gpuops.providers.vast.VastProvider) and its SDK client.

    Vast's list reply documents no name for a volume (the spec's ``Volume``); its create answers a
    ``volume_name``. So the name a volume was created under is kept in ``<data dir>/vast-volumes.json``
    (id -> name, volume_name), and a list row's own ``label``/``name`` wins where Vast sends one."""

    BOOK = "vast-volumes.json"
    usd_per_gb_month = VAST_USD_PER_GB_MONTH
    price_source = "Vast hosts' default volume price (vastai 1.9.1 list_volume); live prices: `vastai search volumes`"
    example = "vast:12345"

    # -- the local name book ------------------------------------------------------------------------
    def _book_path(self):
        d = getattr(self.p, "data_dir", None)
        return None if d is None else Path(d) / self.BOOK

    def _book(self) -> dict:
        import json

        path = self._book_path()
        if path is None:
            return getattr(self.p, "_volume_book", {})
        try:
            got = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return got if isinstance(got, dict) else {}

    def _write_book(self, book: dict) -> None:
        import json
        import os

        path = self._book_path()
        if path is None:
            self.p._volume_book = book
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(book, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)

    def _volume(self, row: dict, kind: str, book: dict | None = None) -> Volume:
        size = float(row.get("disk_space") or row.get("size") or 0)
        cost = row.get("storage_cost")
        vid = str(int(row["id"]))
        own = row.get("label") or row.get("name") or row.get("volume_name")
        name = str(own) if own else str(((book or {}).get(vid) or {}).get("name") or "")
        return Volume(
            provider="vast",
            id=vid,
            name=name,
            size_gb=size,
            region=str(row.get("geolocation") or ""),
            usd_per_month=round(float(cost) * size, 4) if cost is not None else None,
            kind=kind,
            machine_id=str(row.get("machine_id") or ""),
            mount_path=VAST_MOUNT,
            raw=dict(row),
        )

    def list(self) -> list[Volume]:
        """Local and network volumes of the account (named from the row, else from the book). Raises ProviderError."""
        book = self._book()
        out = []
        for kind in ("local", "network"):
            rows = self.p._call(f"list {kind} volumes", lambda v, k=kind: v.show_volumes(type=k)) or []
            for row in rows:
                try:
                    out.append(self._volume(row, kind, book))
                except (KeyError, TypeError, ValueError):
                    continue
        return out

    def create(self, name: str, size_gb: float, region: str = "") -> Volume:
        """Create a ``size_gb`` GB volume named ``name`` on the cheapest Vast volume offer with room for it.

        Create a ``size_gb`` GB local volume named ``name`` on the cheapest volume offer (by
        ``storage_cost``, USD/GB/month) with room for it; ``region``: a two-letter country code
        (e.g. SE) or ``machine:<id>``, empty for any. The new volume is the one the list shows after
        the create and not before, named ``name`` or the answer's ``volume_name`` where the row
        carries a name, on the offer's machine; its name is booked locally. Raises BadInput or
        ProviderError (SERVER when Vast accepted it but it cannot be told apart)."""
        from gpuops.providers.base import ProviderError, ProviderErrorKind

        check_name(name)
        size = check_size(size_gb)
        query: dict = {"disk_space": {"gte": size}}
        if region.startswith("machine:") and region[8:].isdigit():
            query["machine_id"] = {"eq": int(region[8:])}
        elif re.fullmatch(r"[A-Z]{2}", region or ""):
            query["geolocation"] = {"eq": region}
        elif region:
            raise BadInput(
                f"Vast region {region!r} is not a country code or machine:<id>",
                "pass --region SE, or --region machine:12345",
            )
        offers = self.p._call(
            "search volume offers",
            lambda v: v.search_volumes(query=query, order=[["storage_cost", "asc"]], storage=size),
        )
        offers = [
            o for o in offers or [] if float(o.get("disk_space") or 0) >= size and o.get("storage_cost") is not None
        ]
        if not offers:
            raise ProviderError(
                ProviderErrorKind.NO_CAPACITY,
                f"no Vast volume offer has {size:g} GB free" + (f" in {region}" if region else ""),
                "try another --region or a smaller --size-gb",
            )
        best = min(offers, key=lambda o: float(o["storage_cost"]))
        before = {v.id for v in self.list()}
        res = self.p._call(
            f"create volume on offer {best['id']}",
            lambda v: v.create_volume(int(best["id"]), size=size, name=name),
            retries=False,
        )
        vname = str(res.get("volume_name") or "") if isinstance(res, dict) else ""
        new = [
            v
            for v in self.list()
            if v.id not in before and (not v.machine_id or v.machine_id == str(best.get("machine_id") or v.machine_id))
        ]
        named = [v for v in new if v.name and v.name in (name, vname)]
        pick = named[0] if len(named) == 1 else new[0] if len(new) == 1 else None
        if pick is None:
            raise ProviderError(
                ProviderErrorKind.SERVER,
                f"Vast accepted the volume {name!r} ({vname or 'no volume_name'}) but the list "
                f"shows {len(new)} new volumes",
                "run `gpuops volumes list --provider vast`",
            )
        book = self._book()
        book[pick.id] = {"name": name, "volume_name": vname}
        self._write_book(book)
        return replace(pick, name=name)

    def delete(self, volume_id: str) -> None:
        """Delete the volume (every instance using it must be destroyed first). Idempotent."""
        from gpuops.providers.base import ProviderError, ProviderErrorKind

        if not str(volume_id).isdigit():
            raise BadInput(f"Vast volume id {volume_id!r} is not a number", "see `gpuops volumes list --provider vast`")
        try:
            self.p._call(f"delete volume {volume_id}", lambda v: v.delete_volume(int(volume_id)))
        except ProviderError as e:
            if (
                e.kind not in (ProviderErrorKind.GONE, ProviderErrorKind.OFFER_GONE)
                and "not found" not in e.message.lower()
            ):
                raise
        book = self._book()
        if book.pop(str(volume_id), None) is not None:
            self._write_book(book)

    def mountable(self, volume: Volume, offers: builtins.list) -> builtins.list:
        """The offers that can mount ``volume``: those on its machine (a Vast local volume)."""
        if volume.kind != "local":
            raise BadInput(
                f"Vast network volume {volume.id} cannot be mounted by gpuops yet",
                "use a Vast local volume, or a RunPod network volume",
            )
        return [o for o in offers if getattr(o, "machine_id", "") == volume.machine_id]

    def where(self, volume: Volume) -> str:
        """A Vast local volume lives on one machine."""
        return f"machine {volume.machine_id}"
