"""Waiting for a rented instance to publish its SSH endpoint, with a deadline.

Outcomes, as ProviderError kinds (the caller destroys the instance and closes its ledger row with
``error.kind.value`` as the reason):
- GONE: the instance vanished mid-wait (deleted from the console, reclaimed by the host);
- PREEMPTED: an interruptible instance was outbid while we waited;
- UNSUPPORTED: the instance runs but will never be reachable over SSH (``extra["no_ssh"]`` says
  why: RunPod's port 22 on a private address only, or no 22/tcp at all), at once, not at the deadline;
- TIMEOUT: the deadline passed: still provisioning/loading, running without port 22, or an
  unknown status string (kept in the message; never raised on by itself).
Rate limits and 5xx while polling are tolerated until the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpuops.providers.base import Instance, InstanceStatus, Provider, ProviderError, ProviderErrorKind


def wait_for_ssh(
    provider: Provider,
    instance_id: str,
    timeout_s: float,
    poll_s: float = 5.0,
    on_poll: Callable[[Instance | None], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Instance:
    """Poll ``provider.get(instance_id)`` every ``poll_s`` seconds until the instance is RUNNING with an SSH endpoint.

    Return that Instance. ``timeout_s``: deadline in seconds from now.

    ``on_poll`` sees every observation (None when the provider no longer knows the instance).
    Raises ProviderError (GONE, PREEMPTED, UNSUPPORTED, TIMEOUT; AUTH/BAD_REQUEST pass through at once).
    """
    deadline = clock() + timeout_s
    last: Instance | None = None
    last_error: ProviderError | None = None
    from gpuops.providers.http_guard import guard

    while True:
        try:
            # The poll itself ends by the wait's deadline (a trickling API cannot hold `up` past it).
            with guard(f"{provider.name}: read instance {instance_id}", max(0.001, deadline - clock())):
                inst = provider.get(instance_id)
            last_error = None
        except ProviderError as e:
            if e.kind == ProviderErrorKind.TIMEOUT and clock() >= deadline:
                raise ProviderError(
                    ProviderErrorKind.TIMEOUT,
                    _timeout_message(provider.name, instance_id, timeout_s, last, e),
                    f"raise [up] ready_timeout_seconds (now {timeout_s:g} s) or try another offer",
                    instance_id=instance_id,
                ) from None
            if not e.retryable:
                raise
            inst, last_error = last, e
        else:
            if on_poll is not None:
                on_poll(inst)
            if inst is None or inst.status == InstanceStatus.GONE:
                raise ProviderError(
                    ProviderErrorKind.GONE,
                    f"{provider.name} instance {instance_id} disappeared while waiting for SSH (deleted from the console or reclaimed)",
                    "nothing to destroy; check the provider console, then run `gpuops up` again",
                    instance_id=instance_id,
                )
            if inst.status in (InstanceStatus.STOPPED, InstanceStatus.EXITED):
                preempted = bool(inst.extra.get("preempted"))
                kind = ProviderErrorKind.PREEMPTED if preempted else ProviderErrorKind.GONE
                why = (
                    "was outbid (interruptible instance stopped)"
                    if preempted
                    else f"stopped before SSH was ready (status {inst.raw_status or inst.status.value})"
                )
                raise ProviderError(
                    kind,
                    f"{provider.name} instance {instance_id} {why}",
                    "raise the bid or use --on-demand" if preempted else "try another offer",
                    instance_id=instance_id,
                )
            if inst.status == InstanceStatus.RUNNING and inst.ssh is not None:
                return inst
            if inst.status == InstanceStatus.RUNNING and inst.extra.get("no_ssh"):
                raise ProviderError(
                    ProviderErrorKind.UNSUPPORTED,
                    f"{provider.name} instance {instance_id} runs without a public SSH port: {inst.extra['no_ssh']}",
                    "try another offer (the box must publish 22/tcp on a public address)",
                    instance_id=instance_id,
                )
            last = inst
        now = clock()
        if now >= deadline:
            raise ProviderError(
                ProviderErrorKind.TIMEOUT,
                _timeout_message(provider.name, instance_id, timeout_s, last, last_error),
                f"raise [up] ready_timeout_seconds (now {timeout_s:g} s) or try another offer",
                instance_id=instance_id,
            )
        sleep(max(0.0, min(poll_s, deadline - now)))


def _timeout_message(
    name: str, instance_id: str, timeout_s: float, last: Instance | None, err: ProviderError | None
) -> str:
    head = f"{name} instance {instance_id} had no SSH endpoint after {timeout_s:g} s"
    if last is None:
        return f"{head}: never answered ({err.kind.value if err else 'no reply'})"
    if last.status == InstanceStatus.RUNNING:
        return f"{head}: running but it never published port 22"
    if last.status == InstanceStatus.UNKNOWN:
        return f"{head}: stuck in status {last.raw_status!r}, which gpuops does not know"
    return f"{head}: stuck in {last.status.value} (provider status {last.raw_status!r})"
