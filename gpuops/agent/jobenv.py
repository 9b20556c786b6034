"""The job's environment on a box: gpuops' own variables, one function for the job and `gpuops exec`.

``job_env`` is what `up` gives the job it starts (beside the user's ``[job] env`` / ``up --env``
values, which live only in `up`'s memory and the job's 0600 env file, so `exec` cannot have them)
and what `gpuops exec` gives its command, so a second command on a live box sees the same
``GPUOPS_SESSION``, ``GPUOPS_WORKDIR``, cache folders and run variables as the job.
"""

from __future__ import annotations

from gpuops.agent.bootstrap_config import BOX_DIR, cache_env

METRICS = f"{BOX_DIR}/metrics.jsonl"  # under the box root: the job appends its metrics lines here
RESUME = f"{BOX_DIR}/resume"  # under the box root: a run's resume folder when [job] results is blank


def resume_dir(root: str, results: str, volume_path: str | None, run_id: str) -> str:
    """Where a run's job keeps its checkpoints (``GPUOPS_RESUME_DIR``), an absolute path on the box.

    With a volume: ``<volume>/gpuops/runs/<run>`` (it outlives every box). Without: the results
    folder ``results`` (``[job] results``, else ``RESUME``) under the box root ``root``."""
    if volume_path:
        return f"{volume_path.rstrip('/')}/gpuops/runs/{run_id}"
    return f"{root.rstrip('/')}/{results.strip('/') or RESUME}"


def job_env(
    *,
    session: str,
    experiment: str,
    root: str,
    workdir: str | None,
    cache_dir: str,
    run: tuple[str, int, str] | None = None,
) -> dict[str, str]:
    """gpuops' own variables for a command on the box whose session directory is ``root``.

    ``GPUOPS_SESSION``, ``GPUOPS_EXPERIMENT``, ``GPUOPS_METRICS`` (absolute); ``GPUOPS_WORKDIR``
    when ``workdir`` (the folder `up --workdir` filled, relative to ``root``) is given; the cache
    variables of ``cache_dir`` (``bootstrap_config.cache_env``); and for a run's rental ``run`` =
    (run id, attempt 1.., resume dir): ``GPUOPS_RUN``, ``GPUOPS_ATTEMPT``, ``GPUOPS_RESUME_DIR``."""
    base = root.rstrip("/")
    env = {"GPUOPS_SESSION": session, "GPUOPS_EXPERIMENT": experiment, "GPUOPS_METRICS": f"{base}/{METRICS}"}
    if workdir is not None:
        env["GPUOPS_WORKDIR"] = f"{base}/{workdir}"
    env.update(cache_env(cache_dir))
    if run is not None:
        run_id, attempt, where = run
        env.update({"GPUOPS_RUN": run_id, "GPUOPS_ATTEMPT": str(attempt), "GPUOPS_RESUME_DIR": where})
    return env
