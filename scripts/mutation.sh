#!/usr/bin/env bash
# The mutation lane (not part of CI: minutes, not seconds). mutmut (https://mutmut.readthedocs.io)
# changes the code that decides money one small edit at a time -- attribution, the idle/TTL/cap
# policy, the budget, ownership, the end-time rule, offer selection -- and runs the FAST unit tests
# of those modules against each mutant (in a fork, only the tests that call the mutated function,
# -x). Prints the kill rate and every surviving mutant; the target is >= 90 % killed, and every
# survivor is either killed by a test or listed in EQUIVALENT below with the reason.
#
#   bash scripts/mutation.sh            # the lane; resumes where a run stopped (cache in the work dir)
#   bash scripts/mutation.sh --fresh    # forget earlier results
#   bash scripts/mutation.sh --retest   # only the last run's survivors (after a test was added)
#   bash scripts/mutation.sh --known    # then the named mutations (scripts/mutation_known.py, e2e tests)
#
# GPUOPS_MUTATION_BUDGET_S: wall-clock budget of the mutmut run (default 1800 s; past it the run
# stops and what was tested is reported). GPUOPS_MUTATION_CHILDREN: parallel mutants (default 1: the
# machine is shared). GPUOPS_MUTATION_ONLY: a space-separated subset of MODULES. GPUOPS_MUTATION_DIR:
# where the tree is copied (default $TMPDIR/gpuops-mutation). GPUOPS_PYTHON: the interpreter (default
# .venv/bin/python, with the dev extra installed). Exit 1 below the target.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY="${GPUOPS_PYTHON:-$REPO/.venv/bin/python}"
BUDGET_S="${GPUOPS_MUTATION_BUDGET_S:-1800}"
CHILDREN="${GPUOPS_MUTATION_CHILDREN:-1}"
TARGET=90

# The modules that decide money, and the fast tests aimed at them (unit tests: no server, no
# subprocess; the ledger tests on SQLite only).
MODULES=(
  ledger/attribution.py       # which hour/day/month a dollar belongs to, and its SQL twin
  onbox/policy.py         # idle window, TTL, session cap, job end: when a box is destroyed
  gpuops/teardown/budget.py     # what `up` refuses before renting
  gpuops/ownership.py         # whose row a process may end
  gpuops/teardown/lifecycle.py  # end_rental and the end-time rule
  gpuops/planning/offers.py   # offer selection and the delivered-box check
)
TESTS=(
  tests/books/test_attribution.py
  tests/teardown/test_policy.py
  tests/teardown/test_policy_words.py
  tests/teardown/test_budget.py
  tests/team/test_ownership_rules.py
  tests/lifecycle/test_end_time_rule.py
  tests/lifecycle/test_end_rental_calls.py
  tests/lifecycle/test_vocabulary.py
  tests/providers/test_offer_selection.py
)
# Tests that read the source files themselves (not the behaviour): mutmut's rewritten files import
# mutmut, which is no box-side import. Left out of the lane, kept in CI.
SOURCE_READERS=(
  tests/teardown/test_policy.py::test_box_side_files_are_python_3_8_and_stdlib_only
)
# Surviving mutants that are equivalent (no test can tell them from the original), with the reason.
# Keyed by mutmut's name (module.x_function__mutmut_N); re-check the numbers when a function changes.
EQUIVALENT=(
  "gpuops.ownership.x_local_account__mutmut_7 encode('UTF-8') for 'utf-8': codec names are case-insensitive"
  "gpuops.teardown.lifecycle.x_failure_reason__mutmut_11 'or' for 'and': no FAILURE_BOOKS row has exactly one None entry"
  "gpuops.teardown.lifecycle.x_failure_reason__mutmut_19 'decided and ERROR': got is None only on a row with a None entry, and the only such row (collect) returned above"
  "gpuops.teardown.lifecycle.x_end_time__mutmut_5 t = '' for None: both falsy, the next 'if t:' skips both"
  "gpuops.teardown.lifecycle.x_end_rental__mutmut_4 ledger.get(None) is None, as the skipped call gives"
  "gpuops.teardown.lifecycle.x_last_proof_of_life__mutmut_16 the event source's name 'XXeventXX' is not in _SOURCE_OF either: both book ledger_event"
  "gpuops.teardown.lifecycle.x_last_proof_of_life__mutmut_17 the event source's name 'EVENT' is not in _SOURCE_OF either: both book ledger_event"
  "gpuops.teardown.lifecycle.x__destroy_confirmed__mutmut_5 again[0] None for False: both falsy, read only by 'if again[0]'"
  "gpuops.teardown.lifecycle.x__destroy_confirmed__mutmut_7 again[0] True after the destroy: every read-back that does not return sets again[0] itself before the next try"
  "gpuops.teardown.lifecycle.x__destroy_confirmed__mutmut_32 retry_after None for False: call_with_retries reads it only as 'if retry_after'"
  "gpuops.teardown.lifecycle.x__quick__mutmut_11 q(fn, None) for q(fn, default): every caller of _quick passes no default (None)"
  "gpuops.teardown.lifecycle.x__end__mutmut_6 legacy_err None for '': both falsy, read only by _not_our_instance's 'if looked_up'"
  "gpuops.teardown.lifecycle.x_requested_reason__mutmut_9 code '' or None: neither is 0, both book job_failed"
  "gpuops.teardown.budget.x_assert_not_refused__mutmut_11 owner '' or 'XXXX' for a missing owner: no refusal names either"
  "gpuops.planning.offers.x_rank__mutmut_1 need 1 byte instead of 0: screen drops VRAM <= 0, and any whole positive VRAM covers 1 byte"
  "gpuops.planning.offers.x__norm__mutmut_13 an empty name normalized to 'xxxx': no card has that name, and callers skip empty names"
  "gpuops.planning.offers.x_delivered__mutmut_23 card_of_gpu_name('None') is None: no card is named 'none'"
  "gpuops.planning.offers.x_check_delivered__mutmut_2 delivered() never reads its order argument"
  "gpuops.planning.offers.x_check_delivered__mutmut_34 ok None or False: both fail 'if not ok'"
  "ledger.attribution.x_fraction__mutmut_24 overlap >= 0: an overlap of 0 gives 0.0 either way"
  "ledger.attribution.x_accrued__mutmut_28 overlap >= 0: an overlap of 0 gives 0.0 either way"
  "ledger.attribution.x_split__mutmut_30 one bucket earlier ends at or before start: its overlap <= 0 is skipped"
  "ledger.attribution.x_split__mutmut_35 from bucket 0: every bucket before start has overlap <= 0, skipped"
  "ledger.attribution.x_split__mutmut_42 lo > end for lo >= end: lo == end has overlap 0 (skipped), the next lo breaks"
  "ledger.attribution.x_split__mutmut_43 return for break: nothing follows the loop in the generator"
  "ledger.attribution.x_split__mutmut_54 overlap >= 0: inside the loop the overlap is never 0 (lo < end; the first bucket holds start)"
  "onbox.policy.x_decide__mutmut_122 a missing no_job_seconds gives None or the default; both become NO_JOB_SECONDS"
  "onbox.policy.x_decide__mutmut_125 a missing no_job_seconds gives None or the default; both become NO_JOB_SECONDS"
  "onbox.policy.x_decide__mutmut_190 'no samples' is read only when there is no sample, where _keep_why answers first"
  "onbox.policy.x_decide__mutmut_191 'no samples' is read only when there is no sample, where _keep_why answers first"
  "onbox.policy.x_decide__mutmut_206 the idle decision's idle_since is set again right after (soft.idle_since = since)"
  "onbox.policy.x_decide__mutmut_210 the idle decision's idle_since is set again right after (soft.idle_since = since)"
  "onbox.policy.x_decide__mutmut_272 due always holds the TTL's time: never empty"
  "onbox.policy.x__keep_why__mutmut_13 what == idle means the newest sample is idle, so since is never None there"
)

fresh=0 known=0 retest=0
for a in "$@"; do
  case "$a" in
    --fresh) fresh=1 ;;
    --known) known=1 ;;
    --retest) retest=1 ;;
    *) echo "usage: bash scripts/mutation.sh [--fresh | --retest] [--known]" >&2; exit 2 ;;
  esac
done
[ -n "${GPUOPS_MUTATION_ONLY:-}" ] && read -r -a MODULES <<< "$GPUOPS_MUTATION_ONLY"
"$PY" -c "import mutmut" 2>/dev/null || { echo "error: mutmut is not installed: install the dev extra (requirements.lock)" >&2; exit 2; }

# A copy of the tree (tracked and new files, not ignored ones): mutmut writes mutants/ beside the
# code and the run must not touch the checkout. One fixed directory per checkout, so its results
# (and the shared bytecode cache) are reused, not grown, by the next run.
WORK="${GPUOPS_MUTATION_DIR:-${TMPDIR:-/tmp}/gpuops-mutation}/mutmut-$(basename "$REPO")"
mkdir -p "$WORK"
if [ "$fresh" = 1 ]; then rm -rf "$WORK/mutants"; fi
find "$WORK" -mindepth 1 -maxdepth 1 ! -name mutants -exec rm -rf {} +
git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do
  [ -f "$f" ] && [ ! -L "$f" ] && { mkdir -p "$WORK/$(dirname "$f")"; cp -p "$f" "$WORK/$f"; }
done

toml_list() { local out="" x; for x in "$@"; do out+="\"$x\", "; done; echo "[${out%, }]"; }
cat >> "$WORK/pyproject.toml" <<EOF

[tool.mutmut]
source_paths = ["gpuops", "ledger", "onbox"]
only_mutate = $(toml_list "${MODULES[@]}")
pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:xdist", "-x", "-q", "-k", "not postgres"$(printf ', "--deselect", "%s"' "${SOURCE_READERS[@]}")]
pytest_add_cli_args_test_selection = $(toml_list "${TESTS[@]}")
EOF

cd "$WORK"
echo "== mutmut over ${MODULES[*]} (budget ${BUDGET_S} s, ${CHILDREN} at a time, in $WORK)"
t0=$(date +%s)
names=()
if [ "$retest" = 1 ]; then  # the survivors of the last run, by name: mutmut re-tests only those
  mapfile -t names < <("$PY" -m mutmut results 2>/dev/null | sed -n 's/^ *\([^ ]*\): \(survived\|no tests\)$/\1/p')
  echo "== re-testing ${#names[@]} survivors of the last run"
fi
run_rc=0
PYTHONPATH="$WORK" timeout --signal=INT --kill-after=30 "$BUDGET_S" "$PY" -m mutmut run --max-children "$CHILDREN" "${names[@]}" \
  > "$WORK/mutmut-run.log" 2>&1 || run_rc=$?
echo "== mutmut run: $(( $(date +%s) - t0 )) s (exit $run_rc$([ "$run_rc" = 124 ] && echo ', stopped at the budget'); log: $WORK/mutmut-run.log)"
tail -n 3 "$WORK/mutmut-run.log" | tr '\r' '\n' | tail -n 2
"$PY" -m mutmut results --all true > "$WORK/mutmut-results.txt" 2>/dev/null || true

printf '%s\n' "${EQUIVALENT[@]}" > "$WORK/equivalent.txt"
rc=0
"$PY" - "$WORK/mutmut-results.txt" "$WORK/equivalent.txt" "$TARGET" "$PY" <<'EOF' || rc=1
import collections, sys
results, equivalent, target, py = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
why = {}
for line in open(equivalent):
    if line.strip():
        name, _, reason = line.strip().partition(" ")
        why[name] = reason.strip()
status = {}
for line in open(results):
    name, sep, st = line.strip().rpartition(": ")
    if sep:
        status[name] = st
count = collections.Counter(status.values())
tested = {n: s for n, s in status.items() if s not in ("not checked", "skipped")}
killed = [n for n, s in tested.items() if s in ("killed", "timeout", "caught by type check")]
left = sorted(n for n in tested if n not in killed)
equiv = [n for n in left if n in why]
alive = [n for n in left if n not in why]
stale = sorted(set(why) - set(left))
print("== mutants: " + ", ".join(f"{k} {v}" for k, v in sorted(count.items())))
rate = 100.0 * len(killed) / len(tested) if tested else 0.0
rate_eq = 100.0 * len(killed) / (len(tested) - len(equiv)) if len(tested) > len(equiv) else 0.0
print(f"== kill rate: {len(killed)}/{len(tested)} = {rate:.1f} % of the mutants tested; "
      f"{rate_eq:.1f} % without the {len(equiv)} equivalent ones (target {target:.0f} %)")
if count.get("not checked"):
    print(f"   {count['not checked']} not checked yet (the budget ran out): run again to resume")
if alive:
    print(f"   (a mutant's diff: cd {__import__('os').getcwd()} && {py} -m mutmut show NAME)")
for n in equiv:
    print(f"   equivalent  {n}  -- {why[n]}")
for n in alive:
    print(f"   SURVIVED    {n}  ({status[n]})")
for n in stale:
    print(f"   (listed as equivalent, but not a survivor now: {n})")
sys.exit(0 if tested and rate_eq >= target and not alive else 1)
EOF

if [ "$known" = 1 ]; then
  echo "== the named mutations (scripts/mutation_known.py)"
  (cd "$REPO" && "$PY" scripts/mutation_known.py) || rc=1
fi
exit "$rc"
