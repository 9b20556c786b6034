"""Named mutations of the code that decides money, each run against the tests aimed at it.

Each mutation is one small change a real bug could make (the end time booked as "now", a guard
disabled, a rule off by one sample); the tests aimed at it must fail. The tree (the working tree,
or ``--ref REF``'s committed tree, e.g. ``--ref main`` for "caught before?") is copied to a scratch
directory, each mutation is applied there alone, its tests run, the file is restored. Prints one
line per mutation: caught or SURVIVED, failed/ran, the first failing test. Exit 1 when one survived.

    .venv/bin/python scripts/mutation_known.py                 # every mutation, this tree's tests
    .venv/bin/python scripts/mutation_known.py --ref main 3 14  # two of them, main's tests

Not part of CI (it runs end-to-end tests); scripts/mutation.sh runs it after the mutmut lane when
given ``--known``. A mutation whose text is no longer in its file is reported as STALE (the code
moved or changed: update it here).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOT_PG = ("-k", "not postgres")  # the SQLite parameter of the ledger tests: no PostgreSQL server to start


@dataclass
class Mutation:
    name: str
    module: str  # the file, by its path in the package (found by suffix if the package moved)
    edits: list[tuple[str, str]]  # (text, replacement), each must occur exactly once
    tests: list[str]
    args: tuple[str, ...] = ()
    count: bool = False  # run every test (no -x) and count the failures
    extra: dict = field(default_factory=dict)


END_TIME_E2E = [  # the end-to-end tests that compare a booked end time with the provider's record
    "tests/teardown/test_cli.py::test_up_stopped_during_job_agent_destroys_after_grace",
    "tests/teardown/test_cli.py::test_up_sigkilled_box_goes_and_watchdog_books_it",
    "tests/teardown/test_kill_up.py::test_sigkill_up_at_each_stage",  # 7 stages rent (-k below drops intent)
    "tests/teardown/test_watchdog.py::test_once_closes_row_of_box_the_agent_destroyed",
    "tests/teardown/test_watchdog.py::test_box_never_armed_is_destroyed_after_the_ready_deadline",
    "tests/teardown/test_watchdog.py::test_balance_floor_destroys_refuses_and_lifts",
    "tests/lifecycle/test_laptop_faults.py::test_output_gone_then_signal_still_tears_down_and_books_tokens",
    "tests/lifecycle/test_fault_matrix.py::test_fault_matrix_local",
]
END_TIME_E2E_K = (
    "-k",
    "not intent and (not test_output_gone or pipe) and (not test_fault_matrix or job-SIGTERM or teardown-SIGTERM)",
)

MUTATIONS = [
    Mutation(
        "end_rental skips the destroy but closes the row",
        "gpuops/teardown/lifecycle.py",
        [("            provider.destroy(iid)\n            again[0] = False", "            again[0] = False")],
        ["tests/lifecycle/test_end_rental.py", "tests/lifecycle/test_end_time_rule.py"],
    ),
    Mutation(
        "no destroy retries",
        "gpuops/teardown/lifecycle.py",
        [("replace(DESTROY_RETRY, attempts=attempts)", "replace(DESTROY_RETRY, attempts=1)")],
        ["tests/lifecycle/test_end_rental.py", "tests/lifecycle/test_end_time_rule.py"],
    ),
    Mutation(
        'the end time is "now" instead of the provider\'s record (19 e2e tests)',
        "gpuops/teardown/lifecycle.py",
        [
            ('            return float(t), "provider"', '            return now, "provider"'),
            ('        return float(inst.extra["ended_at"]), "provider"', '        return now, "provider"'),
        ],
        END_TIME_E2E,
        END_TIME_E2E_K,
        count=True,
    ),
    Mutation(
        "attribution gives a session wholly to its start month (Python)",
        "ledger/attribution.py",
        [
            (
                "    if end <= start:\n        return 1.0 if lo <= start < hi else 0.0",
                "    if True:\n        return 1.0 if lo <= start < hi else 0.0",
            )
        ],
        ["tests/books/test_attribution.py", "tests/books/test_reports.py"],
        NOT_PG,
    ),
    Mutation(
        "attribution gives a session wholly to its start month (SQL twin)",
        "ledger/attribution.py",
        [('        f"(CASE WHEN {_ENDED} <= {_BEGAN} THEN', '        f"(CASE WHEN 1 = 1 THEN')],
        ["tests/books/test_attribution.py", "tests/books/test_reports.py", "tests/teardown/test_budget.py"],
        NOT_PG,
    ),
    Mutation(
        "the idle rule needs one more sample",
        "onbox/policy.py",
        [("        if now - since >= window:", "        if now - since >= window + sample_s:")],
        ["tests/teardown/test_policy.py"],
    ),
    Mutation(
        "classify ignores GPU utilization",
        "onbox/policy.py",
        [
            (
                '    if any(g.get("util") is not None and g["util"] > util_percent for g in gpus):\n        return "busy"',
                '    if False:\n        return "busy"',
            )
        ],
        ["tests/teardown/test_policy.py"],
    ),
    Mutation(
        "unknown utilization counts as idle",
        "onbox/policy.py",
        [
            (
                '    if sample.get("error") or not gpus or any(g.get("util") is None for g in gpus):',
                '    if sample.get("error") or not gpus:',
            )
        ],
        ["tests/teardown/test_policy.py"],
    ),
    Mutation(
        "NaN passes the budget",
        "gpuops/teardown/budget.py",
        [
            (
                "        if v is not None and (not isinstance(v, (int, float)) or not math.isfinite(v)):",
                "        if v is not None and not isinstance(v, (int, float)):",
            )
        ],
        ["tests/teardown/test_budget.py"],
    ),
    Mutation(
        "offers sorted by price descending",
        "gpuops/planning/offers.py",
        [("key=lambda o: (effective_price(o), -o.reliability", "key=lambda o: (-effective_price(o), -o.reliability")],
        ["tests/providers/test_offer_selection.py", "tests/providers/test_offers_view.py"],
    ),
    Mutation(
        "the lm_head dropped from the parameter count",
        "gpuops/planning/architecture.py",
        [('    bd["lm_head"] = 0 if tied else h * vocab', '    bd["lm_head"] = 0')],
        ["tests/plan/test_memory.py", "tests/plan/test_seeds.py"],
    ),
    Mutation(
        "the KV cache sized with attention heads",
        "gpuops/planning/architecture.py",
        [("        layer_kv = 2 * kv_heads * head_dim", "        layer_kv = 2 * heads * head_dim")],
        ["tests/plan/test_memory.py", "tests/plan/test_seeds.py"],
    ),
    Mutation(
        "the CSV formula neutralizing removed",
        "ledger/csvio.py",
        [
            (
                """    return "'" + text if text.lstrip("'")[:1] in FORMULA_START and text[:1] else text""",
                "    return text",
            )
        ],
        ["tests/books/test_csv.py"],
        NOT_PG,
    ),
    Mutation(
        "end_rental's own refusal of another account's row disabled",
        "gpuops/teardown/lifecycle.py",
        [("        if held == OTHER:\n            return Ended(", "        if False:\n            return Ended(")],
        [
            "tests/lifecycle/test_end_time_rule.py",
            "tests/lifecycle/test_end_rental.py",
            "tests/team/test_two_accounts.py",
        ],
    ),
    Mutation(
        "standing() treats any held account as the owner",
        "gpuops/ownership.py",
        [
            (
                "    return HELD if held_account is not None and acct == held_account else OTHER",
                "    return HELD if held_account is not None else OTHER",
            )
        ],
        ["tests/team/test_ownership_rules.py", "tests/team/test_two_accounts.py"],
    ),
    Mutation(
        "`..` allowed in result names",
        "gpuops/rental/results.py",
        [('    if any(p in ("", ".", "..") or', '    if any(p in ("", ".") or')],
        ["tests/storage/test_results.py"],
    ),
    Mutation(
        "the reply size cap removed",
        "gpuops/providers/http_guard.py",
        [
            ("            if declared and declared.isdigit() and int(declared) > max_bytes:", "            if False:"),
            ("                    if len(body) > max_bytes:", "                    if False:"),
        ],
        ["tests/lifecycle/test_provider_deadline.py"],
    ),
    # -- the end-time rule's other branches (beyond those above) --
    Mutation(
        "a gone box's proof of life not clamped to [create, now]",
        "gpuops/teardown/lifecycle.py",
        [("    return min(max(float(t), start), now), src", "    return float(t), src")],
        [
            "tests/lifecycle/test_end_time_rule.py",
            "tests/lifecycle/test_session_limits.py::test_box_clock_skew_cannot_bend_an_unseen_end",
        ],
    ),
    Mutation(
        "a box just seen and destroyed booked at its last heartbeat, not at the confirmed destroy",
        "gpuops/teardown/lifecycle.py",
        [('    if not already_gone:\n        return now, "destroy"', '    if False:\n        return now, "destroy"')],
        ["tests/lifecycle/test_end_time_rule.py", "tests/lifecycle/test_end_rental.py"],
    ),
    Mutation(
        "every event counts as proof of life (the closer's own log_kept, this end's own events)",
        "gpuops/teardown/lifecycle.py",
        [("for e in ledger.events(session_id) if e.kind in PROOF_OF_LIFE)", "for e in ledger.events(session_id))")],
        [
            "tests/lifecycle/test_end_time_rule.py",
            "tests/teardown/test_emulated.py::test_watchdog_closing_a_pod_already_gone_books_its_last_proof_of_life_not_its_own_log_kept",
        ],
    ),
    Mutation(
        "a gone box's newest proof of life not compared: a heartbeat wins over a newer `live` event",
        "gpuops/teardown/lifecycle.py",
        [("    t, kind = max(got, key=lambda p: p[0])", "    t, kind = got[0]")],
        [
            "tests/lifecycle/test_end_time_rule.py",
            "tests/teardown/test_emulated.py::test_a_vast_spot_box_outbid_while_up_watched_books_its_gpu_time",
        ],
    ),
    # -- a run spends what its rentals cost; the agent's limits count from the create --
    Mutation(
        "the run's remaining money not decremented between rentals",
        "gpuops/rental/launcher.py",
        [
            (
                "nxt = runs.next_rental(req.max_hours, t.max_session_usd, spent_s, spent_usd, choice.offer.price)",
                "nxt = runs.next_rental(req.max_hours, t.max_session_usd, spent_s, 0.0, choice.offer.price)",
            )
        ],
        ["tests/lifecycle/test_spot_recover.py::test_a_run_spends_what_its_rentals_cost_by_the_providers_bill"],
    ),
    Mutation(
        "the agent's TTL counted from the agent's start, not the instance's create",
        "onbox/agent.py",
        [
            (
                "self.billed_at_arm_s = 0.0 if left is None else ttl_s - max(0.0, left)",
                "self.billed_at_arm_s = 0.0",
            )
        ],
        ["tests/teardown/test_agent_local.py::test_ttl_counts_from_the_create_when_the_agent_is_armed_late"],
    ),
    Mutation(
        "the agent's timeline anchored on the box's wall clock (not the laptop's arm time)",
        "onbox/agent.py",
        [
            (
                "    return (time.time() if armed_at is None else armed_at, box_mono)",
                "    return (time.time(), box_mono)",
            )
        ],
        [
            "tests/teardown/test_emulated.py::test_agent_armed_late_on_a_box_whose_clock_is_off_ends_the_pod_at_create_plus_ttl"
        ],
    ),
    Mutation(
        "the agent armed with the whole TTL, not what is left of it at the arm",
        "gpuops/agent/agentctl.py",
        [
            (
                '"ttl_seconds_left": max(0.0, float(config["max_hours"]) * 3600.0 - billed_s),',
                '"ttl_seconds_left": float(config["max_hours"]) * 3600.0,',
            )
        ],
        ["tests/teardown/test_agent_local.py::test_ttl_counts_from_the_create_when_the_agent_is_armed_late"],
    ),
    # -- ledger sync: a charge keyed by provider, account and instance id --
    Mutation(
        "ledger sync matches a charge by instance id alone, ignoring the provider",
        "ledger/billing.py",
        [
            (
                "by_instance.setdefault((s.provider, str(s.instance_id)), [])",
                "by_instance.setdefault(str(s.instance_id), [])",
            ),
            (
                "by_instance.get((c.provider, str(c.instance_id)), [])",
                "by_instance.get(str(c.instance_id), [])",
            ),
        ],
        ["tests/books/test_sync_month.py"],
        ("-k", "instance_id and not postgres"),
    ),
    Mutation(
        "ledger sync ignores the account a charge was read with",
        "ledger/billing.py",
        [
            (
                '            same = [s for s in cands if getattr(s, "account", None) == c.account]',
                "            same = cands",
            )
        ],
        ["tests/books/test_sync_month.py"],
        ("-k", "account and not postgres"),
    ),
]


def _tree(ref: str | None, into: Path) -> None:
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    if ref:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
        return
    files = (
        subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"], check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    for f in filter(None, files):
        src = REPO / f
        if src.is_file() and not src.is_symlink():
            (into / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, into / f)


def _locate(root: Path, module: str) -> Path | None:
    if (root / module).is_file():
        return root / module
    name = Path(module).name
    hits = [p for p in root.rglob(name) if "tests" not in p.relative_to(root).parts]
    return hits[0] if len(hits) == 1 else None


def run_one(root: Path, m: Mutation, timeout_s: float) -> tuple[str, str, str]:
    path = _locate(root, m.module)
    if path is None:
        return "STALE", "-", f"{m.module} not found"
    original = path.read_text()
    text = original
    for old, new in m.edits:
        if text.count(old) != 1:
            return "STALE", "-", f"text not found once in {path.relative_to(root)}: {old[:50]!r}"
        text = text.replace(old, new)
    tests = [t for t in m.tests if (root / t.split("::")[0]).exists()]
    missing = sorted(set(m.tests) - set(tests))
    if not tests:  # never a bare pytest: that is the whole suite
        return "NO TESTS", "-", f"none of its tests in this tree: {', '.join(missing)}"
    path.write_text(text)
    try:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", "--no-header", *m.args, *tests]
        if not m.count:
            cmd.insert(4, "-x")
        env = dict(os.environ, PYTHONPATH=str(root))
        try:
            out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s).stdout
        except subprocess.TimeoutExpired:
            return "TIMEOUT", "-", f"over {timeout_s:.0f} s"
    finally:
        path.write_text(original)
    failed = re.findall(r"^FAILED (\S+)", out, re.M)
    summary = (out.strip().splitlines() or [""])[-1]
    ran = sum(int(n) for n in re.findall(r"(\d+) (?:passed|failed)", summary))
    note = f" (absent here: {', '.join(missing)})" if missing else ""
    if re.search(r"\berror", summary) and not failed:
        return "ERROR", "-", summary + note
    verdict = "caught" if failed else "SURVIVED"
    return verdict, f"{len(failed)}/{ran} failed", (failed[0] if failed else "") + note


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which", nargs="*", type=int, help="mutation numbers (1-based; default: all)")
    ap.add_argument("--ref", help="run against this git ref's committed tree (code and tests), e.g. main")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per mutation (default 900)")
    ap.add_argument("--list", action="store_true", help="print the mutations and exit")
    a = ap.parse_args()
    if a.list:
        for i, m in enumerate(MUTATIONS, 1):
            print(f"{i:2d}. {m.name}  [{m.module}]  -> {' '.join(m.tests)}")
        return 0
    chosen = a.which or list(range(1, len(MUTATIONS) + 1))
    base = Path(os.environ.get("GPUOPS_MUTATION_DIR") or Path(tempfile.gettempdir()) / "gpuops-mutation")
    root = base / ("known-" + re.sub(r"[^A-Za-z0-9_.-]", "_", a.ref or "worktree"))
    _tree(a.ref, root)
    survived = 0
    print(f"tree: {a.ref or 'working tree'} ({root})")
    for i in chosen:
        m = MUTATIONS[i - 1]
        t0 = time.monotonic()
        verdict, tally, first = run_one(root, m, a.timeout)
        survived += verdict != "caught"
        print(f"{i:2d}. {verdict:8s} {tally:14s} {time.monotonic() - t0:6.0f} s  {m.name}  {first}", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
