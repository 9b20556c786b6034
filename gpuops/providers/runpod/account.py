"""Where RunPod's account key and API host come from (``KEYS``, its registry entry's ``keys``).

Pure data and stdlib: the registry, the client and the compute module read it alike."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gpuops.providers.entry import KeySource
from onbox.vocabulary import ProviderName


def key_files(env: Mapping[str, str]) -> list[Path]:
    """``~/.runpod/config.toml``, where ``runpodctl config`` and the runpod SDK keep the key."""
    return [Path(env.get("HOME") or Path.home()) / ".runpod" / "config.toml"]


def read_key_file(path: Path) -> str:
    """The ``[default] api_key`` of a runpod config.toml (runpod SDK ``get_credentials``); "" if none."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return ""
    return str(data.get("default", {}).get("api_key", "") or "").strip()


KEYS = KeySource(
    name=ProviderName.RUNPOD,
    env_var="RUNPOD_API_KEY",
    url_var="RUNPOD_API_BASE_URL",
    default_url="https://api.runpod.io",
    files=key_files,
    read_file=read_key_file,
    url_tails=("/graphql", "/v2"),
    console="runpod.io > Settings > API Keys",
)
