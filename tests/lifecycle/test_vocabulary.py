"""The vocabulary is one place and it is complete: every end reason and event kind in the enums is
written somewhere, the stage table covers every stage after intent, and members behave as their
plain strings (rows and JSON keep the same text)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpuops.teardown.lifecycle import FAILURE_BOOKS, STAGES, failure_reason
from onbox.vocabulary import END_REASONS, EndReason, EventKind, RowStatus, exit_status

REPO = Path(__file__).resolve().parents[2]
SOURCES = [p for d in ("gpuops", "ledger", "onbox") for p in (REPO / d).rglob("*.py") if p.name != "vocabulary.py"]


def _text() -> str:
    return "\n".join(p.read_text() for p in SOURCES)


def test_members_are_their_strings():
    assert EndReason.JOB_END == "job_end" and f"{EndReason.TTL}" == "ttl" and str(RowStatus.CLOSED) == "closed"
    assert json.dumps({"r": EndReason.IDLE}) == '{"r": "idle"}'
    assert "closed" in {EventKind.CLOSED} and {EndReason.MANUAL: 1}.get("manual") == 1
    assert EndReason.parse("preempted") is EndReason.PREEMPTED and EndReason.parse("x; rm -rf /") is None
    assert END_REASONS == tuple(r.value for r in EndReason)


def test_every_member_is_written_somewhere():
    text = _text()
    for kind in EventKind:
        assert re.search(rf"EventKind\.{kind.name}\b", text), (
            f"event kind {kind.value} is written nowhere: write it or remove it"
        )
    for reason in EndReason:
        # csvio (imports) still spells its one reason as a literal
        assert re.search(rf"EndReason\.{reason.name}\b", text) or f'"{reason.value}"' in text, (
            f"end reason {reason.value} is never booked"
        )
    # the box's policy decides these reasons; they are members of the enum
    for r in ("job_end", "job_failed", "idle", "ttl", "session_cap"):
        assert EndReason.parse(r) is not None


def test_failure_table_covers_every_renting_stage():
    after_intent = STAGES[STAGES.index("create") : STAGES.index("teardown")]
    assert set(FAILURE_BOOKS) == set(after_intent)
    from gpuops.errors import GpuopsError
    from gpuops.providers.base import ProviderError, ProviderErrorKind
    from gpuops.rental.launcher import Interrupted

    assert failure_reason("create", ProviderError(ProviderErrorKind.SERVER, "x"), None) == EndReason.PROVISION_FAILED
    assert failure_reason("ready", ProviderError(ProviderErrorKind.TIMEOUT, "x"), None) == EndReason.SSH_NEVER_READY
    assert failure_reason("job", GpuopsError("x"), None) == EndReason.JOB_FAILED
    assert failure_reason("job", RuntimeError("bug"), None) == EndReason.ERROR
    assert failure_reason("collect", OSError("copy-back"), EndReason.JOB_END) == EndReason.JOB_END
    for stage in after_intent:
        assert failure_reason(stage, KeyboardInterrupt(), EndReason.JOB_END) == EndReason.INTERRUPTED
        assert failure_reason(stage, Interrupted("SIGTERM"), None) == EndReason.INTERRUPTED


def test_exit_status_follows_the_row():
    assert [exit_status(r) for r in ("job_end", "interrupted", "manual", "job_failed", "nonsense")] == [0, 130, 3, 1, 1]


def test_no_getattr_probes_of_the_provider_contract():
    for p in SOURCES:
        if p.parts[-2] in ("gpuops", "providers"):
            assert not re.search(
                r"getattr\((provider|p|prov), \"(destroyed_at|box|supports_spot|find_by_label)\"", p.read_text()
            ), p
