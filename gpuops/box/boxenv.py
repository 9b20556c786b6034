"""The environment a local-provider box's processes (bootstrap, job, agent) start with.

An allow-list of this machine's variables, never the whole of it.

A rented box never sees the laptop's environment; a local box must not either: the job's log would
show ``RUNPOD_API_KEY``/``VAST_API_KEY``, and the bootstrap's ``secrets`` step would write into the
user's real ``~/.netrc`` and ``~/.cache/huggingface/token``. So:

* ``HOME`` is the box's own directory (its root), as on a rented box; ``~`` inside the box, and the
  secrets step's ``~/.netrc``, ``~/.cache/huggingface/token``, ``~/.config/gpuops/secrets.env``
  are the box's; ``HF_HOME`` is ``$HOME/.cache/huggingface``.
* Passed through when set: ``ALLOWED`` names (PATH, LANG, LANGUAGE, TZ, TERM, USER, LOGNAME,
  SHELL, TMPDIR, LD_LIBRARY_PATH) and names starting with ``ALLOWED_PREFIXES`` (LC_, CUDA_,
  NVIDIA_, HF_HUB_, HF_ENDPOINT, UV_, PIP_, PYTHON).
* Never: any ``GPUOPS_*`` setting of this machine (``GPUOPS_DATA_DIR``, ``GPUOPS_LEDGER_URL``,
  ``GPUOPS_SPOOL_DIR``, ``GPUOPS_CONFIG``...: they point at gpuops' own data -- a job that ran
  ``rm "$GPUOPS_DATA_DIR"/ledger.db*`` took the books with it -- or hold a password); the box's own
  ``GPUOPS_SESSION``/``_EXPERIMENT``/``_METRICS``/``_LOCAL_BOX`` are set by the box, as on a rented
  one (and ``GPUOPS_LOCAL_CONTAIN``, what the job wrapper hides from a contained job, which the
  wrapper takes out before the job starts). Nor a name containing KEY, TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL or AUTH (HF_TOKEN,
  PIP_INDEX_URL's cousins that carry a password are named so); nor ``HF_HOME`` and ``XDG_*`` (they
  point into the user's own dirs).
* A secret the user listed in ``[bootstrap] secrets`` reaches the bootstrap explicitly (the
  ``extra`` the Box is given for that run), exactly as on a rented box.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

ALLOWED = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "SHELL", "TMPDIR", "LD_LIBRARY_PATH"})
ALLOWED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "HF_HUB_", "HF_ENDPOINT", "UV_", "PIP_", "PYTHON")
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
NEVER = ("GPUOPS_",)


def allowed(name: str) -> bool:
    """True when variable ``name`` of this machine may reach a local box."""
    if SECRET_NAME.search(name) or name.startswith(NEVER):
        return False
    return name in ALLOWED or name.startswith(ALLOWED_PREFIXES)


def local_box_env(environ: Mapping[str, str], box_home: str) -> dict[str, str]:
    """The allow-listed subset of ``environ`` with ``HOME=box_home`` (module doc)."""
    env = {k: v for k, v in environ.items() if allowed(k)}
    env["HOME"] = box_home
    env["HF_HOME"] = box_home + "/.cache/huggingface"  # the box's, as huggingface_hub would default under HOME
    return env
