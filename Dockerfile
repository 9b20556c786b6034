# The always-on watchdog for a team: `gpuops watchdog` beside the team's PostgreSQL ledger.
# Build: docker build -t gpuops-watchdog .   Run: see README, "Keeping the watchdog running".
# Configured only from the environment: GPUOPS_* (GPUOPS_LEDGER_URL, GPUOPS_USER_NAME,
# GPUOPS_TEARDOWN_MONTHLY_CAP_USD, ...) and the provider keys (RUNPOD_API_KEY, VAST_API_KEY);
# nothing secret is baked into the image. Notifications: GPUOPS_NOTIFY_URLS (apprise URLs, comma-
# separated; they carry tokens: pass them like the keys, e.g. `docker run --env-file` of a 0600
# file, never as a build argument), GPUOPS_NOTIFY_DEADMAN_URL (pinged by every pass) and the rest
# of [notify] as GPUOPS_NOTIFY_*. `gpuops watchdog --install` writes the same variables into its
# 0600 env file on a laptop.
# Python 3.11: the version requirements-runtime.lock was resolved for (its markers depend on it).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GPUOPS_DATA_DIR=/data \
    GPUOPS_SPOOL_DIR=/data/spool

# The runtime lock: the package with its runpod, vast and postgres extras, no test packages
# (derived from requirements.lock with uv; tests/core/test_container.py keeps the pins equal).
COPY requirements-runtime.lock /tmp/requirements-runtime.lock
RUN pip install --no-deps -r /tmp/requirements-runtime.lock

WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpuops ./gpuops
COPY ledger ./ledger
COPY onbox ./onbox
RUN pip install --no-deps . && rm -rf /src

# An unprivileged user; its data dir is the volume: the books without GPUOPS_LEDGER_URL, the spool
# of writes the ledger refused (GPUOPS_SPOOL_DIR above: a restarted container still replays them,
# where HOME's cache would be lost with the container), the settings snapshot, SSH keys, logs.
RUN useradd --create-home --uid 10001 gpuops && mkdir -p /data && chown gpuops /data && chmod 700 /data
USER gpuops
WORKDIR /home/gpuops
VOLUME ["/data"]

ENTRYPOINT ["gpuops", "watchdog"]
CMD ["--interval", "30", "--verbose"]
