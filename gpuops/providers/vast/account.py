"""Where Vast.ai's account key and REST base come from (``KEYS``, its registry entry's ``keys``).

Pure data and stdlib: the registry and the client read it alike."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gpuops.providers.entry import KeySource
from onbox.vocabulary import ProviderName


def key_files(env: Mapping[str, str]) -> list[Path]:
    """``$XDG_CONFIG_HOME/vastai/vast_api_key`` then ``~/.vast_api_key`` (vastai ``_resolve_api_key``)."""
    home = Path(env.get("HOME") or Path.home())
    xdg = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    return [xdg / "vastai" / "vast_api_key", home / ".vast_api_key"]


KEYS = KeySource(
    name=ProviderName.VAST,
    env_var="VAST_API_KEY",
    url_var="VAST_URL",
    default_url="https://console.vast.ai",
    files=key_files,
    console="cloud.vast.ai > Account > API Keys",
)
