"""Time planning the whole catalog, and hold the vLLM memory model against vLLM's own numbers.

Run: PYTHONPATH=. python bench/bench_plan.py [--repeat 20] [--table-only]

Prints the wall time of one full pass (every built-in model on every card), per (model, card)
pair, and the cold cost of the first pass (TOML parsing included); then a table of gpuops' figure
next to what vLLM reported (bench/vllm_reference.toml), with the ratio per row (target: within
0.95-1.05); then the newer kinds (MXFP4, hybrid KV, shared experts) against the engine's rule worked by hand
(bench/engine_rules.toml). Not a pass/fail test; numbers go in the notes.
"""

from __future__ import annotations

import argparse
import statistics
import time


def one_pass() -> int:
    from gpuops.planning import sizing as P
    from gpuops.planning.models import model_catalog

    pairs = 0
    for m in model_catalog():
        p = P.plan(m, seq=4096, batch=1)
        pairs += len(p.cards)
    return pairs


def _figure(row: dict) -> float:
    """gpuops' value for one reference row (see vllm_reference.toml for the metrics)."""
    import json
    from pathlib import Path

    from gpuops.planning import models, sizing as P

    if "config" in row:
        path = Path(__file__).resolve().parent.parent / "tests" / "plan" / "data" / f"{row['config']}.config.json"
        config = json.loads(path.read_text())
        model = models.ModelSource(
            name=row["config"], config=config, source=str(path), stored_dtype=models._stored_dtype(config)
        )
    else:
        model = row["model"]
    p = P.plan(
        model,
        card=row["card"],
        headroom=row["utilization"],
        seq=row["seq"],
        dtype=row.get("dtype"),
        gpu_count=row.get("gpu_count", 1),
    )
    c = p.cards[0]
    return {
        "kv_pool_gib": c.kv_pool_bytes / 2**30,
        "max_concurrency": c.max_concurrency,
        "weights_gib": p.weights_bytes / 2**30,
        "weights_gb": p.weights_bytes / 1e9,
        "params_b": p.params / 1e9,
    }[row["metric"]]


def vllm_table() -> None:
    """gpuops vs vLLM's published figures, one row each, with the ratio."""
    import sys
    from pathlib import Path

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    from gpuops.planning.memory import VLLM_VERSION

    rows = tomllib.loads((Path(__file__).with_name("vllm_reference.toml")).read_text())["rows"]
    print(f"\ngpuops plan --engine vllm (vLLM {VLLM_VERSION} defaults) vs vLLM's own figures (ratio target 0.95-1.05)")
    head = f"{'model':<16} {'card':<14} {'util':>4} {'seq':>6}  {'what':<28} {'gpuops':>9} {'vLLM':>9} {'ratio':>6}"
    print(head)
    print("-" * len(head))
    for r in rows:
        ours = _figure(r)
        print(
            f"{r.get('model', r.get('config')):<16} {r['card']:<14} {r['utilization']:>4.2f} {r['seq']:>6}  {r['what']:<28} "
            f"{ours:>9.2f} {r['measured']:>9.2f} {ours / r['measured']:>6.3f}"
        )


def _rule_figure(row: dict) -> float:
    """gpuops' value for one engine_rules.toml row."""
    import json
    from pathlib import Path

    from gpuops.planning import models, sizing as P

    path = Path(__file__).resolve().parent.parent / "tests" / "plan" / "data" / f"{row['config']}.config.json"
    config = json.loads(path.read_text())
    model = models.ModelSource(
        name=row["config"], config=config, source=str(path), stored_dtype=models._stored_dtype(config)
    )
    p = P.plan(
        model,
        card=row["card"],
        seq=row["seq"],
        gpu_count=row.get("gpu_count", 1),
        chunked_hybrid=row.get("chunked_hybrid", False),
    )
    c = p.cards[0]
    return {
        "weights_gb": p.weights_bytes / 1e9,
        "params_b": p.params / 1e9,
        "request_kv_mib": c.per_request_bytes / 2**20,
        "weights_loaded_gib": (c.fixed_bytes - c.overhead_bytes - c.activation_bytes - c.cuda_graph_bytes) / 2**30,
    }[row["metric"]]


def rules_table() -> None:
    """gpuops vs the engine's rule worked by hand (bench/engine_rules.toml), with gpuops at 86593ec."""
    import sys
    from pathlib import Path

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    rows = tomllib.loads((Path(__file__).with_name("engine_rules.toml")).read_text())["rows"]
    print("\nnew kinds: gpuops vs the engine's rule by hand (ratio target 1.000; 'before' = gpuops at 86593ec)")
    head = (
        f"{'model':<22} {'card':<9} {'seq':>6}  {'what':<32} {'before':>9} {'gpuops':>10} {'engine':>10} {'ratio':>6}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        ours = _rule_figure(r)
        card = r["card"] + (f" x{r['gpu_count']}" if r.get("gpu_count", 1) > 1 else "")
        print(
            f"{r['config']:<22} {card:<9} {r['seq']:>6}  {r['what']:<32} {r['before']:>9.3f} {ours:>10.3f} {r['engine']:>10.3f} "
            f"{ours / r['engine']:>6.3f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20, help="timed passes after the first (cold) one")
    ap.add_argument("--table-only", action="store_true", help="only the gpuops-vs-vLLM table")
    args = ap.parse_args()
    if args.table_only:
        vllm_table()
        rules_table()
        return

    t0 = time.perf_counter()
    import gpuops.planning.sizing  # noqa: F401  (import cost is part of a cold CLI call)

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
    print(f"import gpuops.planning.sizing: {t_import * 1e3:.1f} ms")
    print(f"first pass (loads models.toml, cards.toml): {t_cold * 1e3:.1f} ms")
    print(
        f"warm pass, median of {args.repeat}: {med * 1e3:.1f} ms ({med / pairs * 1e6:.0f} us per pair); "
        f"min {min(times) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms"
    )
    vllm_table()
    rules_table()


if __name__ == "__main__":
    main()
