"""The one retry policy (``gpuops.providers.retry``), a create's retry with its look-up by label
(``create_with_retries``), and the budgets of the call sites that use the policy outside the
provider clients: the launcher's look-up by label after a failed create, and a results copy's read
after a dropped connection (``end_rental``'s destroy: tests/lifecycle/test_end_time_rule.py; each
provider's create against its emulator: tests/providers/test_provider_contract.py)."""

from __future__ import annotations

import hashlib
import time
from types import SimpleNamespace

import pytest

from gpuops.providers import retry
from gpuops.providers.base import Instance, InstanceStatus, ProviderError, ProviderErrorKind
from gpuops.providers.retry import MAX_RETRY_AFTER_S, RetryPolicy, call_with_retries, create_with_retries
from gpuops.rental import launcher, results


def _failing(n: int, error: BaseException, then="ok"):
    """A call that raises ``error`` ``n`` times, then returns ``then``; ``calls`` counts them."""
    calls = []

    def fn():
        calls.append(1)
        if len(calls) <= n:
            raise error
        return then

    return fn, calls


def _server_error() -> ProviderError:
    return ProviderError(ProviderErrorKind.SERVER, "502 from the API")


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """The seconds the policy would have slept (nothing sleeps)."""
    got: list[float] = []
    monkeypatch.setattr(retry, "time", SimpleNamespace(sleep=got.append, monotonic=time.monotonic))
    return got


def test_backoff_doubles_from_wait_s_up_to_the_cap_and_attempts_bound_it(waits):
    fn, calls = _failing(10, _server_error())
    with pytest.raises(ProviderError, match="502"):
        call_with_retries(fn, RetryPolicy(attempts=6, wait_s=1.0, max_wait_s=10.0, budget_s=None))
    assert len(calls) == 6 and waits == [1.0, 2.0, 4.0, 8.0, 10.0]


def test_a_success_after_failures_returns_its_value(waits):
    fn, calls = _failing(2, _server_error(), then=42)
    assert call_with_retries(fn, RetryPolicy()) == 42
    assert (len(calls), waits) == (3, [1.0, 2.0])


def test_only_what_retry_on_accepts_is_retried(waits):
    fn, calls = _failing(5, ProviderError(ProviderErrorKind.AUTH, "401"))
    with pytest.raises(ProviderError, match="401"):
        call_with_retries(fn, RetryPolicy())
    assert (len(calls), waits) == (1, [])
    fn, calls = _failing(5, ValueError("a bug"))
    with pytest.raises(ValueError):
        call_with_retries(fn, RetryPolicy(), retry_on=lambda e: isinstance(e, ProviderError))
    assert len(calls) == 1


def test_retry_after_wins_over_a_shorter_backoff_up_to_its_cap_unless_turned_off(waits):
    e = ProviderError(ProviderErrorKind.RATE_LIMIT, "429")
    e.retry_after_s = 30.0
    fn, _ = _failing(1, e)
    call_with_retries(fn, RetryPolicy())
    e.retry_after_s = 600.0
    fn, _ = _failing(1, e)
    call_with_retries(fn, RetryPolicy())
    fn, _ = _failing(1, e)
    call_with_retries(fn, RetryPolicy(), retry_after=False)
    assert waits == [30.0, MAX_RETRY_AFTER_S, 1.0]


def test_a_deadline_stops_before_a_wait_that_would_end_past_it(waits):
    fn, calls = _failing(100, _server_error())
    now = 1000.0
    with pytest.raises(ProviderError):
        # each wait is checked against the clock, which the fake sleep does not move: 1 and 2 end by now+3.5, 4 would not
        call_with_retries(fn, RetryPolicy(attempts=None, budget_s=None), deadline=now + 3.5, clock=lambda: now)
    assert waits == [1.0, 2.0] and len(calls) == 3


def test_budget_s_bounds_the_seconds_of_trying():
    fn, calls = _failing(1000, _server_error())
    t0 = time.monotonic()
    with pytest.raises(ProviderError):
        call_with_retries(fn, RetryPolicy(attempts=None, wait_s=0.01, max_wait_s=0.01, budget_s=0.2))
    took = time.monotonic() - t0
    assert 0.2 <= took < 0.2 + 10.0 and 2 <= len(calls) <= 21  # a loaded machine only makes it fewer tries


def test_a_policy_with_no_bound_is_refused():
    with pytest.raises(ValueError, match="attempts, budget_s or a deadline"):
        call_with_retries(lambda: None, RetryPolicy(attempts=None, budget_s=None))


def test_hooks_see_every_failed_attempt_and_every_wait(waits):
    fn, _ = _failing(10, _server_error())
    after, before = [], []
    with pytest.raises(ProviderError):
        call_with_retries(
            fn,
            RetryPolicy(attempts=3, budget_s=None),
            after=lambda s: after.append(s.attempt_number),
            before_sleep=lambda s: before.append(s.upcoming_sleep),
        )
    assert (after, before, waits) == ([1, 2, 3], [1.0, 2.0], [1.0, 2.0])


def test_a_create_keeps_attempts_and_backoff_but_no_time_budget():
    p = RetryPolicy(attempts=4, wait_s=0.5, max_wait_s=4.0, budget_s=60.0, call_deadline_s=30.0)
    assert p.for_create() == RetryPolicy(attempts=4, wait_s=0.5, max_wait_s=4.0, budget_s=None, call_deadline_s=30.0)


def _finder(*found: Instance | None):
    """A look-up by label answering ``found`` in turn; ``asked`` holds the labels asked for."""
    answers, asked = list(found), []

    def find(label):
        asked.append(label)
        return answers.pop(0)

    return find, asked


_CREATE = RetryPolicy(attempts=3, wait_s=1.0, budget_s=None)


def test_a_create_that_failed_but_made_its_instance_returns_that_instance_and_is_not_tried_again(waits):
    fn, calls = _failing(5, _server_error())
    left = Instance(id="i-7", label="gpuops-s1", status=InstanceStatus.RUNNING, created_at=999.0)
    find, asked = _finder(left)
    assert create_with_retries(fn, find, "gpuops-s1", _CREATE, asked_at=1000.5) == (None, left)
    assert (len(calls), asked, waits) == (1, ["gpuops-s1"], [])
    assert left.extra == {"recovered_after": "502 from the API"} and left.created_at == 1000.5


def test_a_create_is_tried_again_only_after_the_look_up_found_nothing(waits):
    e = ProviderError(ProviderErrorKind.RATE_LIMIT, "429")
    e.retry_after_s = 30.0
    fn, calls = _failing(2, e, then="pod")
    find, asked = _finder(None, None)
    assert create_with_retries(fn, find, "gpuops-s1", _CREATE, asked_at=0.0) == ("pod", None)
    assert (len(calls), len(asked), waits) == (3, 2, [30.0, 30.0])  # the server's Retry-After, after each look-up


def test_a_refused_create_is_raised_at_once_without_a_look_up(waits):
    fn, calls = _failing(1, ProviderError(ProviderErrorKind.FUNDS, "402: add credit"))
    find, asked = _finder()
    with pytest.raises(ProviderError, match="402"):
        create_with_retries(fn, find, "gpuops-s1", _CREATE, asked_at=0.0)
    assert (len(calls), asked, waits) == (1, [], [])


def test_a_create_whose_look_ups_never_find_it_raises_the_last_error(waits):
    fn, calls = _failing(9, _server_error())
    find, asked = _finder(None, None, None)
    with pytest.raises(ProviderError, match="502"):
        create_with_retries(fn, find, "gpuops-s1", _CREATE, asked_at=0.0)
    assert (len(calls), len(asked), waits) == (3, 3, [1.0, 2.0])


def test_a_web_page_is_never_retried_but_a_create_answered_so_is_still_looked_up(waits):
    from gpuops.providers.provider_errors import unexpected_reply

    page = unexpected_reply("the API answered with something that is not JSON while trying to list")
    fn, calls = _failing(5, page)
    with pytest.raises(ProviderError, match="not JSON"):
        call_with_retries(fn, RetryPolicy())
    assert (len(calls), waits, page.kind) == (1, [], ProviderErrorKind.SERVER)
    fn, calls = _failing(5, page)
    find, asked = _finder(None)  # the create may have happened: looked up, not tried again
    with pytest.raises(ProviderError, match="not JSON"):
        create_with_retries(fn, find, "gpuops-s1", _CREATE, asked_at=0.0)
    assert (len(calls), asked, waits) == (1, ["gpuops-s1"], [])


# --- the launcher: the look-up by label after a failed create -------------------------------------


class _Books:
    def __init__(self):
        self.updates, self.events = [], []

    def update(self, sid, **kw):
        self.updates.append((sid, kw))

    def event(self, sid, kind, data):
        self.events.append((sid, getattr(kind, "value", kind), data))


class _Finder:
    def __init__(self, failures: int):
        self.failures, self.calls = failures, 0

    def find_by_label(self, label):
        self.calls += 1
        if self.calls <= self.failures:
            raise ProviderError(ProviderErrorKind.AUTH, "any provider error is tried again here")
        return Instance(id="pod-9", label=label, status=InstanceStatus.RUNNING, usd_per_hour=0.5, created_at=1000.0)


def _run():
    return SimpleNamespace(id="s1", label="gpuops-s1", offer=None, instance=None)


def test_the_launcher_looks_a_label_up_three_times_1_s_then_2_s_apart(waits):
    s, books, p = _run(), _Books(), _Finder(failures=2)
    launcher._adopt_by_label(s, p, books)
    assert (p.calls, waits) == (3, [1.0, 2.0])
    assert s.instance.id == "pod-9" and books.events == [
        ("s1", "create_left_instance", {"instance": "pod-9", "found_by": "label"})
    ]


def test_the_launcher_gives_the_label_up_after_three_failed_look_ups(waits):
    s, books, p = _run(), _Books(), _Finder(failures=3)
    launcher._adopt_by_label(s, p, books)
    assert (p.calls, waits, s.instance, books.events) == (3, [1.0, 2.0], None, [])


# --- a results copy: reconnect and read again until the copy's deadline ----------------------------


class _DroppingReader:
    """A results._Reader over bytes in memory whose reads fail (EOFError: a dropped connection)
    ``drops[i]`` times before the i-th chunk is read."""

    def __init__(self, data: bytes, drops: list[int]):
        self.data, self.drops, self.chunk, self.resets = data, list(drops), 0, 0
        self.box = None

    def read(self, remote_abs, offset, n):
        if self.chunk < len(self.drops) and self.drops[self.chunk] > 0:
            self.drops[self.chunk] -= 1
            raise EOFError("connection dropped")
        self.chunk += 1
        return self.data[offset : offset + n]

    def reset(self):
        self.resets += 1


def _fetch(tmp_path, reader, data, deadline):
    entry = results.Entry("f.bin", len(data), hashlib.sha256(data).hexdigest())
    rep = results.CopyReport()
    why = results._fetch_one(reader, "/box/f.bin", tmp_path / "f.bin", entry, deadline, rep)
    return why, rep


def test_a_copy_waits_half_a_second_doubling_to_8_s_and_starts_over_after_a_good_chunk(tmp_path, monkeypatch, waits):
    monkeypatch.setattr(results, "CHUNK", 4)
    data = b"0123456789ab"  # three chunks
    reader = _DroppingReader(data, drops=[6, 0, 1])
    why, rep = _fetch(tmp_path, reader, data, time.monotonic() + 600)
    assert why is None and (tmp_path / "f.bin").read_bytes() == data
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 0.5] and rep.reconnects == reader.resets == 7


def test_a_copy_stops_before_a_wait_that_would_end_past_its_deadline(tmp_path, waits):
    data = b"payload"
    reader = _DroppingReader(data, drops=[100])
    # the waits 0.5, 1, 2 end by the deadline (the fake sleep does not move the clock); 4 would not
    why, rep = _fetch(tmp_path, reader, data, time.monotonic() + 3.0)
    assert why == "connection lost and the copy deadline passed (EOFError)"
    assert waits == [0.5, 1.0, 2.0] and rep.reconnects == 3


def test_a_copy_does_not_retry_what_is_not_a_dropped_connection(tmp_path, waits):
    class Missing(_DroppingReader):
        def read(self, remote_abs, offset, n):
            raise FileNotFoundError("no such file")

    why, rep = _fetch(tmp_path, Missing(b"x", []), b"x", time.monotonic() + 600)
    assert why == "FileNotFoundError: no such file" and (waits, rep.reconnects) == ([], 0)
