"""Model sources: the built-in catalog, a local ``config.json`` or directory, or a Hugging Face repo.

The catalog is ``catalog/models.toml``; ``huggingface_hub`` is imported lazily; safetensors headers
are counted per dtype."""

from __future__ import annotations

import json
import re
import struct
import sys
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from gpuops.errors import BadInput
from gpuops.planning.quant import norm_dtype

_MODELS_FILE = Path(__file__).resolve().parents[1] / "catalog" / "models.toml"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


# -- model catalog and loading --------------------------------------------------------------------
SAFETENSORS_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "U16": 2,
    "U32": 4,
    "BOOL": 1,
    "F4": 0.5,
    "F6_E2M3": 0.75,
}


@dataclass(frozen=True)
class ModelSource:
    """A model's config as read.

    ``weights_total_size``: the checkpoint's stored bytes, from safetensors headers (exact) or the
    index's ``metadata.total_size``; ``weights_size_source`` says which. ``params_by_dtype``:
    tensor elements per safetensors dtype (headers only). ``stored_dtype``: config ``torch_dtype``.
    """

    name: str
    config: dict
    source: str
    params_published: int | None = None
    weights_total_size: int | None = None
    stored_dtype: str | None = None
    weights_size_source: str = ""
    params_by_dtype: dict | None = None
    hf_id: str = ""


@lru_cache(maxsize=1)
def _models_data() -> dict:
    return tomllib.loads(_MODELS_FILE.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def model_catalog() -> tuple[ModelSource, ...]:
    """The built-in models of ``catalog/models.toml``, in file order."""
    out = []
    for m in _models_data()["models"]:
        hf = next((a for a in m.get("aliases", ()) if "/" in a), "")
        ts = m.get("total_size")
        out.append(
            ModelSource(
                name=m["name"],
                config=dict(m["config"]),
                source=m["source"],
                params_published=m.get("params_published"),
                stored_dtype=_stored_dtype(m["config"]),
                hf_id=hf,
                weights_total_size=int(ts) if ts else None,
                weights_size_source="safetensors index total_size (catalog)" if ts else "",
            )
        )
    return tuple(out)


@lru_cache(maxsize=1)
def _model_names() -> dict[str, str]:
    out: dict[str, str] = {}
    for m in _models_data()["models"]:
        for n in (m["name"], m.get("display", ""), *m.get("aliases", ())):
            if n:
                out[n.strip().lower()] = m["name"]
    return out


def builtin_model(name: str) -> ModelSource | None:
    """The built-in model called ``name`` (catalog name, display name or alias, any case), or None."""
    key = _model_names().get(name.strip().lower())
    if key is None:
        return None
    return next(m for m in model_catalog() if m.name == key)


def _as_asked(builtin: ModelSource, asked: str) -> ModelSource:
    """``builtin`` served as the repository id that was asked for (its alias as the catalog spells it).

    `--model meta-llama/Llama-3.1-8B-Instruct` serves the instruct checkpoint, not the catalog's
    first repository (the base model): same shapes, another repository."""
    if not _REPO_ID.match(asked):
        return builtin
    entry = next(m for m in _models_data()["models"] if m["name"] == builtin.name)
    repo = next((a for a in entry.get("aliases", ()) if a.lower() == asked.lower()), asked)
    return replace(builtin, hf_id=repo)


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise BadInput(f"cannot read {what} {path}: {e.strerror or e}", "pass a readable config.json") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{what} {path} is not valid JSON ({e})", "pass the model's config.json as published") from None
    if not isinstance(data, dict):
        raise BadInput(f"{what} {path} is not a JSON object", "pass the model's config.json as published")
    return data


def _index_total_size(index: Path) -> int | None:
    """``metadata.total_size`` of a safetensors index (bytes), or None when it has none.

    (then the shapes, or the shard headers, give the size)."""
    data = _read_json(index, "safetensors index")
    size = (data.get("metadata") or {}).get("total_size")
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0:
        return None
    return int(size)


def _stored_dtype(config: dict) -> str | None:
    raw = config.get("torch_dtype") or config.get("dtype")
    if not isinstance(raw, str) and isinstance(config.get("text_config"), dict):
        raw = config["text_config"].get("torch_dtype") or config["text_config"].get("dtype")
    if not isinstance(raw, str):
        return None
    try:
        return norm_dtype(raw)
    except BadInput:
        return None


def _header_counts(header: dict, counts: dict[str, int]) -> None:
    for name, t in header.items():
        if name == "__metadata__" or not isinstance(t, dict):
            continue
        n = 1
        for d in t.get("shape") or []:
            n *= int(d)
        counts[str(t.get("dtype"))] = counts.get(str(t.get("dtype")), 0) + n


def safetensors_bytes(params_by_dtype: dict[str, int]) -> int:
    """Stored bytes of tensors counted per safetensors dtype (``{"BF16": n, "F8_E4M3": m, ...}``)."""
    return int(sum(n * SAFETENSORS_DTYPE_BYTES.get(dt, 2) for dt, n in params_by_dtype.items()))


def _local_safetensors(directory: Path) -> dict[str, int] | None:
    """Elements per dtype from the headers of ``*.safetensors`` in ``directory``, or None.

    Elements per dtype read from the headers of ``*.safetensors`` in ``directory`` (the first 8
    bytes give the header length; no tensor data is read), or None when there are none or one is
    unreadable."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    counts: dict[str, int] = {}
    try:
        for f in files:
            with f.open("rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                if n > 100 * 2**20:
                    return None
                _header_counts(json.loads(fh.read(n)), counts)
    except (OSError, ValueError, struct.error):
        return None
    return counts


def _hub_reachable(endpoint: str) -> bool:
    """Whether the Hub's host name resolves.

    Without it huggingface_hub retries with back-off for ~25 s before failing; with it we go
    straight to the local cache."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint)
    try:
        socket.getaddrinfo(parts.hostname or "", parts.port or 443)
    except (OSError, UnicodeError):
        return False
    return True


def _hf_endpoint() -> str:
    """The Hub URL: ``HF_ENDPOINT`` as set now (huggingface_hub reads it once, at import)."""
    import os

    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def _hf_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or not _hub_reachable(_hf_endpoint())


def _hf_download(repo_id: str, filename: str) -> str:
    """Path of ``filename`` from the Hub (or its cache when offline); the one place that downloads.

    The hub's own retry warnings are silenced: the caller turns failures into one line."""
    import logging

    from huggingface_hub import hf_hub_download

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    return hf_hub_download(repo_id, filename, local_files_only=_hf_offline(), etag_timeout=10, endpoint=_hf_endpoint())


def _hf_safetensors_counts(repo_id: str) -> dict[str, int] | None:
    """Elements per dtype from the repo's safetensors headers, or None offline or without safetensors.

    Elements per dtype from the repo's safetensors headers (HTTP Range reads of the first 100 kB of
    each shard through ``huggingface_hub.get_safetensors_metadata``; no weights downloaded), or None
    offline or when the repo has no safetensors."""
    if _hf_offline():
        return None
    from huggingface_hub import HfApi
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # one line of output per problem, no bars on stderr
    try:
        meta = HfApi(endpoint=_hf_endpoint()).get_safetensors_metadata(repo_id)
    except Exception:  # noqa: BLE001 - any failure here only costs the exact count; the index or shapes remain
        return None
    counts: dict[str, int] = {}
    for fm in meta.files_metadata.values():
        for dt, n in (fm.parameter_count or {}).items():
            counts[dt] = counts.get(dt, 0) + int(n)
    return counts or None


def _load_hf(repo_id: str) -> ModelSource:
    local = "download its config.json and pass the path: gpuops plan --model ./config.json"
    try:
        import huggingface_hub.errors as hf_errors
    except ImportError:
        raise BadInput(
            f"{repo_id!r} looks like a Hugging Face repo id, but huggingface_hub is not installed",
            f"pip install 'gpuops[hf]', or {local}",
        ) from None
    try:
        cfg_path = _hf_download(repo_id, "config.json")
    except hf_errors.GatedRepoError:
        raise BadInput(
            f"Hugging Face repo {repo_id} is gated", f"accept its licence and set HF_TOKEN, or {local}"
        ) from None
    except hf_errors.RepositoryNotFoundError:
        raise BadInput(
            f"Hugging Face repo {repo_id} not found (or private)", f"check the name, set HF_TOKEN, or {local}"
        ) from None
    except hf_errors.LocalEntryNotFoundError:
        raise BadInput(
            f"cannot reach the Hugging Face Hub for {repo_id} (offline, and config.json not cached)", local
        ) from None
    except hf_errors.EntryNotFoundError:
        raise BadInput(f"Hugging Face repo {repo_id} has no config.json", local) from None
    except (hf_errors.HfHubHTTPError, OSError) as e:
        raise BadInput(
            f"cannot fetch config.json of {repo_id}: {str(e).splitlines()[0] if str(e) else type(e).__name__}", local
        ) from None
    config = _read_json(Path(cfg_path), "config")
    counts = _hf_safetensors_counts(repo_id)
    total, how = None, ""
    if counts:
        total, how = safetensors_bytes(counts), "safetensors headers"
    else:
        try:
            total = _index_total_size(Path(_hf_download(repo_id, "model.safetensors.index.json")))
            how = "safetensors index total_size" if total else ""
        except (hf_errors.EntryNotFoundError, hf_errors.HfHubHTTPError, OSError, BadInput):
            total = None  # single-file checkpoints have no index: fall back to the shape count
    return ModelSource(
        name=repo_id,
        config=config,
        source=f"https://huggingface.co/{repo_id}",
        weights_total_size=total,
        stored_dtype=_stored_dtype(config),
        weights_size_source=how,
        params_by_dtype=counts,
        hf_id=repo_id,
    )


def load_model(model: str) -> ModelSource:
    """Resolve ``--model`` to a ModelSource.

    Resolve ``--model``: a built-in name, a path to config.json or to a directory holding one, or a
    Hugging Face repo id (config.json and safetensors headers; needs huggingface_hub and the
    network, or its cache for the config).

    The checkpoint's byte count comes from the safetensors headers beside the config (exact, per
    dtype) or from ``model.safetensors.index.json`` (``metadata.total_size``; an index without it
    falls back to the shapes). Raises BadInput with the fix for anything unreadable.
    """
    if not model or not model.strip():
        raise BadInput("--model is empty", "pass a built-in name (e.g. llama-3-8b), a config.json path or a HF repo id")
    builtin = builtin_model(model)
    if builtin is not None:
        return _as_asked(builtin, model.strip())
    path = Path(model).expanduser()
    if path.exists():
        if path.is_dir():
            cfg = path / "config.json"
            if not cfg.is_file():
                raise BadInput(
                    f"{path} has no config.json", "pass the model directory that holds config.json, or the file itself"
                )
        else:
            cfg = path
        config = _read_json(cfg, "config")
        counts = _local_safetensors(cfg.parent)
        total, how = None, ""
        if counts:
            total, how = safetensors_bytes(counts), "safetensors headers"
        else:
            index = cfg.parent / "model.safetensors.index.json"
            total = _index_total_size(index) if index.is_file() else None
            how = "safetensors index total_size" if total else ""
        return ModelSource(
            name=str(model),
            config=config,
            source=str(cfg),
            weights_total_size=total,
            stored_dtype=_stored_dtype(config),
            weights_size_source=how,
            params_by_dtype=counts,
            hf_id=str(cfg.parent),
        )
    if model.endswith(".json") or model.startswith((".", "/", "~")):
        raise BadInput(f"model config {model} not found", "check the path to config.json")
    if _REPO_ID.match(model):
        return _load_hf(model)
    import difflib

    close = difflib.get_close_matches(model.strip().lower(), list(_model_names()), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise BadInput(
        f"unknown model {model!r}",
        f"{hint}pass a built-in name (`gpuops plan --model list` shows them), a config.json path or a HF repo id (org/name)",
    )
