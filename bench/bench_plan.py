"""Time planning the whole catalog: every built-in model on every catalog card.

Run: PYTHONPATH=. python bench/bench_plan.py [--repeat 20]

Prints the wall time of one full pass (17 models x 16 cards), per (model, card) pair, and the cold
cost of the first pass (TOML parsing included). Not a pass/fail test; numbers go in the notes.
"""

from __future__ import annotations

import argparse
import statistics
import time


def one_pass() -> int:
    from gpuops import plan as P

    pairs = 0
    for m in P.model_catalog():
        p = P.plan(m, seq=4096, batch=1)
        pairs += len(p.cards)
    return pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20, help="timed passes after the first (cold) one")
    args = ap.parse_args()

    t0 = time.perf_counter()
    import gpuops.plan  # noqa: F401  (import cost is part of a cold CLI call)

    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    pairs = one_pass()
    t_cold = time.perf_counter() - t0
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        one_pass()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"catalog: {pairs} (model, card) pairs")
    print(f"import gpuops.plan: {t_import * 1e3:.1f} ms")
    print(f"first pass (loads models.toml, cards.toml): {t_cold * 1e3:.1f} ms")
    print(f"warm pass, median of {args.repeat}: {med * 1e3:.1f} ms ({med / pairs * 1e6:.0f} us per pair); "
          f"min {min(times) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
