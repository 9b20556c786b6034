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
#   bash scripts/mutation.sh --known    # then the named mutations (scripts/mutation_known.py, e2e tests)
#
# GPUOPS_MUTATION_BUDGET_S: wall-clock budget of the mutmut run (default 1800 s; past it the run
# stops and what was tested is reported). GPUOPS_MUTATION_CHILDREN: parallel mutants (default 1: the
# machine is shared). GPUOPS_MUTATION_ONLY: a space-separated subset of MODULES. GPUOPS_MUTATION_DIR:
# where the tree is copied (default $TMPDIR/gpuops-mutation). Exit 1 below the target.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY="$REPO/.venv/bin/python"
BUDGET_S="${GPUOPS_MUTATION_BUDGET_S:-1800}"
CHILDREN="${GPUOPS_MUTATION_CHILDREN:-1}"
TARGET=90

# The modules that decide money, and the fast tests aimed at them (unit tests: no server, no
# subprocess; the ledger tests on SQLite only).
MODULES=(
  ledger/attribution.py       # which hour/day/month a dollar belongs to, and its SQL twin
  bootstrap/policy.py         # idle window, TTL, session cap, job end: when a box is destroyed
  gpuops/rental/budget.py     # what `up` refuses before renting
  gpuops/ownership.py         # whose row a process may end
  gpuops/rental/lifecycle.py  # end_rental and the end-time rule
  gpuops/planning/offers.py   # offer selection and the delivered-box check
)
TESTS=(
  tests/books/test_attribution.py
  tests/teardown/test_policy.py
  tests/teardown/test_policy_words.py
  tests/teardown/test_budget.py
  tests/team/test_ownership_rules.py
  tests/lifecycle/test_end_time_rule.py
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
)

fresh=0 known=0
for a in "$@"; do
  case "$a" in
    --fresh) fresh=1 ;;
    --known) known=1 ;;
    *) echo "usage: bash scripts/mutation.sh [--fresh] [--known]" >&2; exit 2 ;;
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
source_paths = ["gpuops", "ledger", "bootstrap"]
only_mutate = $(toml_list "${MODULES[@]}")
pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:xdist", "-x", "-q", "-k", "not postgres"$(printf ', "--deselect", "%s"' "${SOURCE_READERS[@]}")]
pytest_add_cli_args_test_selection = $(toml_list "${TESTS[@]}")
EOF

cd "$WORK"
echo "== mutmut over ${MODULES[*]} (budget ${BUDGET_S} s, ${CHILDREN} at a time, in $WORK)"
t0=$(date +%s)
run_rc=0
PYTHONPATH="$WORK" timeout --signal=INT --kill-after=30 "$BUDGET_S" "$PY" -m mutmut run --max-children "$CHILDREN" \
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
