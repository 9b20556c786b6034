"""``[bootstrap]`` settings -> the ``bootstrap.json`` that ``onbox/bootstrap.py`` runs on the box.

Layout on the box, relative to the session directory (the Box's ``root``)::

    .gpuops/onbox/        the runner and the job wrapper, shipped byte for byte
    .gpuops/bootstrap.json    the config built here
    .gpuops/requirements.txt  the user's requirements file, when one is named
    .gpuops/bootstrap-state/  step fingerprints (what makes a re-run skip unchanged steps)
    code/                     the git checkout, when ``repo`` is set

Steps, in order: system, secrets, deps, code, weights (one per source), verify, commands, raw
steps; the runner runs deps, code and weights at once (bootstrap.py: CONCURRENT). Secrets travel as the bootstrap run's environment (``BootstrapPlan.env``), which the Box
writes to a 0600 file; the config holds only their names.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpuops.errors import BadInput

BOX_DIR = ".gpuops"
RUNNER_DIR = f"{BOX_DIR}/onbox"
CONFIG_PATH = f"{BOX_DIR}/bootstrap.json"
STATE_DIR = f"{BOX_DIR}/bootstrap-state"
REQUIREMENTS_PATH = f"{BOX_DIR}/requirements.txt"
RUNNER_SOURCE = Path(__file__).resolve().parents[2] / "onbox"  # shipped to RUNNER_DIR
BOOTSTRAP_PIDFILE = f"{BOX_DIR}/bootstrap.pid"  # the agent reads it (agentctl.agent_config: bootstrap_pidfile)


@dataclass
class BootstrapPlan:
    """What `up` ships and runs.

    ``config``: the bootstrap.json document; ``files``: (local path, path relative to the box root)
    to put before running; ``env``: secret values by name, for ``Box.run(env=...)`` only (never
    logged); ``timeout``: seconds for the whole run."""

    config: dict
    files: list[tuple[Path, str]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 1800.0

    def command(self, python: str = "python3") -> str:
        """The shell command that runs the bootstrap in the box root.

        It records its pid where the on-box agent looks (``bootstrap_command``): while it runs, the
        box is not idle, however long a download keeps the GPU at 0 %."""
        return bootstrap_command(CONFIG_PATH, state_dir=STATE_DIR, python=python)


def bootstrap_command(config_path: str, state_dir: str = ".gpuops/bootstrap-state", python: str = "python3") -> str:
    """The shell command that runs bootstrap so that the agent sees it running.

    Its pid in ``.gpuops/bootstrap.pid``; ``exec`` keeps the pid."""
    q = shlex.quote
    return (
        f"echo $$ > {q(BOOTSTRAP_PIDFILE)} && exec {q(python)} {RUNNER_DIR}/bootstrap.py "
        f"--config {q(config_path)} --state-dir {q(state_dir)}"
    )


def _weights_name(source: str, i: int) -> str:
    """``weights:org/model`` for hf://, else ``weights:<file name>`` (step names are ledger rows)."""
    scheme, _, rest = source.partition("://")
    tail = rest.split("@", 1)[0].strip("/") if scheme == "hf" else rest.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return f"weights:{re.sub(r'[^A-Za-z0-9._/-]+', '_', tail)[:60] or i + 1}"


def cache_dir_for(settings, volume_path: str | None) -> str:
    """The on-box cache directory.

    ``[bootstrap] cache_dir``, else ``<volume>/.cache/gpuops`` when a persistent volume is mounted,
    else "" (the runner's default, ~/.cache/gpuops, lost with the box)."""
    return settings.bootstrap.cache_dir or (volume_path.rstrip("/") + "/.cache/gpuops" if volume_path else "")


def cache_env(cache_dir: str) -> dict[str, str]:
    """The job's cache variables for ``cache_dir`` (the same places the bootstrap fills).

    HF_HOME, UV_CACHE_DIR, PIP_CACHE_DIR; empty when there is no cache dir."""
    if not cache_dir:
        return {}
    c = cache_dir.rstrip("/")
    return {"HF_HOME": f"{c}/huggingface", "UV_CACHE_DIR": f"{c}/pip/uv", "PIP_CACHE_DIR": f"{c}/pip/pip"}


def build_bootstrap_plan(
    settings,
    *,
    card=None,
    volume_path: str | None = None,
    environ: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
) -> BootstrapPlan:
    """Build the bootstrap plan from ``settings`` (gpuops.config.Settings).

    ``card``: the rented card (gpuops.catalog.Card) whose catalog figures ``verify`` compares
    against (bandwidth in GB/s = 10^9 B/s, bf16 dense TFLOP/s); None skips the comparison.
    ``volume_path``: the provider's persistent volume mount on the box (e.g. ``/workspace``);
    caches and weights go under ``<volume>/.cache/gpuops`` unless ``[bootstrap] cache_dir`` says.
    ``environ``: where secret values are read (default ``os.environ``).
    Raises BadInput (before anything is rented) for a missing requirements file or secret.
    """
    b = settings.bootstrap
    environ = os.environ if environ is None else environ
    base_dir = base_dir or Path.cwd()
    steps: list[dict] = [{"name": "system", "kind": "system"}]
    plan = BootstrapPlan(config={}, timeout=b.timeout_seconds)
    plan.files.append((RUNNER_SOURCE, RUNNER_DIR))
    cache_dir = cache_dir_for(settings, volume_path)

    if b.secrets:
        missing = [n for n in b.secrets if not environ.get(n)]
        if missing:
            raise BadInput(
                f"secret {', '.join(missing)} is not set in this shell's environment",
                f"export {missing[0]}=... before `gpuops up`, or remove it from [bootstrap] secrets",
            )
        plan.env = {n: environ[n] for n in b.secrets}
        steps.append({"name": "secrets", "kind": "secrets", "env": list(b.secrets)})

    if b.requirements or b.packages:
        deps: dict = {"name": "deps", "kind": "deps", "installer": b.installer}
        if b.requirements:
            req = Path(b.requirements).expanduser()
            req = req if req.is_absolute() else base_dir / req
            if not req.is_file():
                raise BadInput(
                    f"[bootstrap] requirements file {b.requirements} not found",
                    "fix the path (relative to where you run gpuops)",
                )
            plan.files.append((req, REQUIREMENTS_PATH))
            deps["requirements"] = REQUIREMENTS_PATH
        if b.packages:
            deps["packages"] = list(b.packages)
        if b.wheelhouse:
            deps["wheelhouse"] = b.wheelhouse
        if b.venv:
            deps["venv"] = b.venv
        steps.append(deps)

    if b.repo:
        code = {"name": "code", "kind": "code", "repo": b.repo, "dest": "code"}
        if b.ref:
            code["ref"] = b.ref
        steps.append(code)
    elif b.ref:
        raise BadInput("[bootstrap] ref is set but repo is not", "set [bootstrap] repo, or remove ref")

    for i, w in enumerate(b.weights):
        name = _weights_name(w.source, i)
        if any(x["name"] == name for x in steps):
            name = f"{name} ({i + 1})"
        step = {"name": name, "kind": "weights", "source": w.source}
        if w.sha256:
            step["sha256"] = w.sha256
        if w.dest:
            step["dest"] = w.dest
        if w.allow_patterns:
            step["allow_patterns"] = list(w.allow_patterns)
        if b.venv and w.source.startswith("hf://"):
            step["python"] = f"{b.venv.rstrip('/')}/bin/python"  # huggingface_hub is installed there by deps
        steps.append(step)

    if b.verify:
        verify: dict = {"name": "verify", "kind": "verify", "strict": b.verify_strict}
        if card is not None:
            verify["expect"] = {
                "card": card.name,
                "bandwidth_gb_s": card.bandwidth_bytes_s / 1e9,
                "bf16_tflops": card.bf16_flops / 1e12,
            }
        steps.append(verify)

    for i, cmd in enumerate(b.commands, 1):
        steps.append({"name": f"command {i}", "kind": "run", "command": cmd})
    steps.extend(dict(s) for s in b.steps)

    names = [s.get("name") or s.get("kind") for s in steps]
    dup = sorted({n for n in names if names.count(n) > 1}, key=str)
    if dup:
        raise BadInput(f"[bootstrap] steps repeat the name {dup[0]!r}", "give every raw step a unique name")
    plan.config = {"steps": steps}
    if cache_dir:
        plan.config["cache_dir"] = cache_dir
    return plan


@dataclass
class BootstrapResult:
    """``rc``: the runner's exit status (0 ok, 1 a step failed, 2 bad config).

    ``steps``: its step lines (``{"step", "status", "seconds", "detail"}``); ``summary``: its last
    line (``{"total_seconds", "slowest"[, "failed"]}``), empty when the runner died first."""

    rc: int
    steps: list[dict]
    summary: dict

    @property
    def failed(self) -> str | None:
        return self.summary.get("failed") or next((s["step"] for s in self.steps if s.get("status") == "failed"), None)


def parse_line(line: str) -> dict | None:
    """A runner JSON line as a dict, or None for a log line (those never start with ``{``)."""
    import json

    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def run_bootstrap_plan(
    box, plan: BootstrapPlan, *, python: str = "python3", on_step=None, on_line=None
) -> BootstrapResult:
    """Ship the runner, config and files to ``box`` and run the bootstrap there, streaming.

    ``on_step(dict)`` gets each step line as it arrives, ``on_line(str)`` every other output
    line. Raises TimeoutError after ``plan.timeout`` seconds, and whatever the Box raises for a
    lost connection (gpuops.box.ssh.ConnectionLost).
    """
    import json
    import tempfile

    for local, remote in plan.files:
        box.put(local, remote)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp, "bootstrap.json")
        cfg.write_text(json.dumps(plan.config, indent=1, sort_keys=True))
        box.put(cfg, CONFIG_PATH)
    steps: list[dict] = []
    summary: dict = {}

    def handle(line: str) -> None:
        obj = parse_line(line)
        if obj is None:
            if on_line:
                on_line(line)
        elif "step" in obj:
            steps.append(obj)
            if on_step:
                on_step(obj)
        elif "total_seconds" in obj:
            summary.update(obj)

    rc = box.run(plan.command(python), timeout=plan.timeout, env=plan.env or None, on_line=handle)
    return BootstrapResult(rc=rc, steps=steps, summary=summary)
