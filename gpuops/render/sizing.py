"""`gpuops plan`: run the planner and render its answer (rich tables, or JSON).

The CLI command is a thin wrapper around ``plan_command``; ``gpuops.planning.sizing`` and rich are imported
inside the functions so that `gpuops --help` stays fast.
"""

from __future__ import annotations

import sys
from typing import Any

ALL_MODELS = "all"
LIST_MODELS = "list"


def plan_command(model: str, args: dict[str, Any], fmt: str = "table") -> int:
    """Plan MODEL and print the answer as ``fmt``; returns the exit code.

    ``args``: ``planning.sizing.plan``'s keyword arguments, checked (``rental.request.plan_args``).

    Plan MODEL (or every built-in model with ``--model all``) and print the answer to stdout as
    ``fmt`` (table, json, or csv: one row per model and card); warnings go to stderr. Returns the
    exit code (0). Raises BadInput (exit 2) for bad input."""
    from gpuops.errors import BadInput
    from gpuops.planning import sizing as P
    from gpuops.planning.models import model_catalog
    from gpuops.planning.quant import quantization
    from gpuops.render.progress import waiting

    if model.strip().lower() == LIST_MODELS:
        render_catalog(fmt)
        return 0
    if model.strip().lower() == ALL_MODELS:
        plans, unsplit = [], []
        with waiting("planning every built-in model on every card"):
            for m in model_catalog():
                try:
                    plans.append(P.plan(m, **{**args, "dtype": None} if quantization(m.config) else args))
                except P.TensorParallelRefused:  # one model's heads do not split over --gpu-count: the others still do
                    unsplit.append(m.name)
        if unsplit and not plans:
            raise BadInput(
                f"vLLM cannot split any built-in model's attention heads over --gpu-count {args['gpu_count']}",
                "e.g. --gpu-count 2",
            )
        if unsplit:
            sys.stderr.write(
                f"warning: left out {', '.join(unsplit)}: vLLM cannot split their attention heads over "
                f"--gpu-count {args['gpu_count']} (tensor parallelism needs a count that divides them)\n"
            )
        _emit([p.as_json() for p in plans], fmt, lambda: render_matrix(plans))
        return 0
    with waiting(f"sizing {model} (a Hugging Face repo id is read from the hub)"):
        p = P.plan(model, **args)
    for w in p.warnings:
        sys.stderr.write(f"warning: {w}\n")
    _emit([p.as_json()], fmt, lambda: render(p), one=True)
    return 0


def card_records(plans: list[dict]) -> list[dict]:
    """CSV rows of plans (``Plan.as_json()``).

    One per model and card, the model's scalar fields first, then the card's (nested objects as
    ``parent_child`` columns)."""
    out = []
    for d in plans:
        head = {k: v for k, v in d.items() if k != "cards" and not isinstance(v, (list, dict))}
        out += [{**head, **{f"card_{k}" if k in head else k: v for k, v in c.items()}} for c in d["cards"]]
    return out


def _emit(plans: list[dict], fmt: str, table, one: bool = False) -> None:
    from gpuops.render import emit

    emit.emit(plans[0] if one else plans, fmt, table, csv_records=card_records(plans))


def _console():
    """The terminal's width (``COLUMNS`` when piped; rich's default 80).

    Tables fit it by the one table rule (``gpuops.render.tables``), folding columns into continuation
    tables, never cutting."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


def _n(x: float) -> str:
    """6.74e9 -> '6.74B', 131072000 -> '131.1M'."""
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(x) >= div:
            return f"{x / div:.2f}{unit}" if div >= 1e9 else f"{x / div:.1f}{unit}"
    return f"{x:g}"


def _gb(b: float) -> str:
    return f"{b / 1e9:,.2f} GB"


def _gib(b: float) -> str:
    return f"{b / 2**30:,.2f} GiB"


def _kib(b: float) -> str:
    return f"{b / 1024:,.1f} KiB" if b < 2**20 else f"{b / 2**20:,.2f} MiB"


def _usd(v: float | None) -> str:
    return "-" if v is None else (f"{v:,.2f}" if v >= 1 else f"{v:.3f}")


def memory_rows(p) -> list[tuple[str, str, str, str]]:
    """(item, GB, GiB, formula) rows of the memory breakdown, for the table and for tests."""
    from gpuops.planning.memory import (
        TRAIN_BYTES_PER_PARAM,
        VLLM_SAMPLER_BYTES_PER_LOGIT,
        mamba_state_bytes,
        vllm_batch_defaults,
    )
    from gpuops.planning.quant import DTYPE_BYTES, KV_DTYPE_BYTES, default_kv_dtype

    a = p.arch
    bd = a.breakdown
    parts = " + ".join(f"{k} {_n(v)}" for k, v in bd.items() if v)
    rows = [
        (
            "params",
            _n(p.params),
            "",
            f"{parts}" + (f"; active per token {_n(p.active_params)}" if p.active_params != p.params else ""),
        )
    ]
    if p.mode == "train":
        rows.append(
            (
                "weights+grads+Adam",
                _gb(p.weights_bytes),
                _gib(p.weights_bytes),
                f"{_n(p.params)} params x {TRAIN_BYTES_PER_PARAM} B (bf16 w 2 + g 2, fp32 master 4 + m 4 + v 4)",
            )
        )
    else:
        rows.append(
            (
                "weights",
                _gb(p.weights_bytes),
                _gib(p.weights_bytes),
                p.weights_source + ("" if p.weights_verified else " [UNVERIFIED]"),
            )
        )
        kvb = KV_DTYPE_BYTES[p.kv_dtype]
        n_att = len(a.layer_kv_elems)
        of = " attention" if a.mamba_layers else ""
        if a.mla and a.sparse_mla and kvb == 1:
            f = f"{n_att} layers x (656 B fp8_ds_mla latent + {a.index_head_dim + a.index_head_dim // 128 * 4} B indexer)"
        elif a.mla:
            f = f"{n_att} layers x (kv_lora_rank + qk_rope_head_dim = {a.layer_kv_elems[0]}) x {kvb:g} B (MLA latent)"
            if a.sparse_mla:
                f += f" + {a.index_head_dim + a.index_head_dim // 128 * 4} B indexer per layer"
        else:
            f = f"2 x {n_att}{of} layers x {a.kv_heads} kv_heads x {a.head_dim} head_dim x {kvb:g} B"
        if a.kv_shared_layers:
            f += f" ({a.kv_shared_layers} more layers read an earlier layer's cache)"
        if not a.layout_verified:
            f += " [UNVERIFIED layout]"
        rows.append(("KV / token", _kib(p.kv_bytes_per_token), "", f))
        if a.mamba_layers:
            st = mamba_state_bytes(a, p.dtype)
            rows.append(
                (
                    "state / request",
                    _kib(st),
                    "",
                    f"{a.mamba_layers} {a.mamba.kind} layers x conv + temporal state "
                    f"({a.mamba.source}) x {DTYPE_BYTES[default_kv_dtype(p.dtype)]:g} B, fixed per request",
                )
            )
        win = sum(1 for w in a.layer_window if w)
        wnote = (
            f"; {win} of {n_att} layers keep <= {max(w for w in a.layer_window if w)} tokens (sliding window)"
            if win
            else ""
        )
        if p.engine == "vllm":
            lay = p.kv_layout
            kinds: dict[str, int] = {}
            for g in lay.groups:
                kinds[g.kind] = kinds.get(g.kind, 0) + 1
            grp = (
                f"; {len(lay.groups)} KV cache groups of {lay.group_size} layers ("
                + ", ".join(f"{n} {k}" for k, n in kinds.items())
                + (f", {lay.padding_layers} padding layers" if lay.padding_layers else "")
                + ")"
                if len(lay.groups) > 1
                else ""
            )
            unified = (
                f"; {', '.join(lay.unified)} layers cached as full attention (hybrid KV cache manager off)"
                if lay.unified
                else ""
            )
            rows.append(
                (
                    "KV cache",
                    _gb(p.kv_cache_bytes),
                    _gib(p.kv_cache_bytes),
                    f"batch {p.batch} x one request of {p.seq} tokens in blocks of {lay.block_size}{wnote}{grp}{unified}"
                    + (" (admitted at min(window - 1 + 2 x max_num_batched_tokens, seq) + 1 block)" if win else ""),
                )
            )
        else:
            rows.append(
                (
                    "KV cache",
                    _gb(p.kv_cache_bytes),
                    _gib(p.kv_cache_bytes),
                    f"KV/token x batch {p.batch} x seq {p.seq}{wnote}",
                )
            )
    if p.engine == "vllm":
        ref = vllm_batch_defaults(p.cards[0].card) if len(p.cards) == 1 else (2048, 256)
        mnbt, mns = p.max_num_batched_tokens or ref[0], max(p.max_num_seqs or ref[1], p.batch)
        rows.append(
            (
                "activation peak / GPU",
                _gb(p.activation_bytes),
                _gib(p.activation_bytes),
                f"profiling run: {mnbt:,} tokens x (3 x {a.act_width:,} / TP + 4 x {a.hidden:,}) x 2 B + {mns} seqs x vocab {a.vocab:,} x {VLLM_SAMPLER_BYTES_PER_LOGIT} B"
                + (
                    f" + encoder cache {max(mnbt, a.vision_tokens):,} tokens x {a.hidden:,} x 2 B"
                    if a.vision_tokens
                    else ""
                )
                + (
                    ""
                    if len(p.cards) == 1
                    else " (defaults of most cards; >= 70 GiB cards but the A100: 8192 tokens, 1024 seqs)"
                ),
            )
        )
        rows.append(
            (
                "non-torch / GPU",
                _gb(p.overhead_bytes),
                _gib(p.overhead_bytes),
                "0.25 GiB" + (" + NCCL 1.85 GiB (TP >= 2)" if p.gpu_count > 1 else " (one GPU, no NCCL)"),
            )
        )
        rows.append(
            (
                "CUDA graphs / GPU",
                _gb(p.cuda_graph_bytes),
                _gib(p.cuda_graph_bytes),
                "captured batch sizes (vLLM log 'Graph capturing ... took ~0.8 GiB')",
            )
        )
        tot_f = "weights + KV + (activations + non-torch + graphs) x GPUs"
        rows.append(("total", _gb(p.total_bytes), _gib(p.total_bytes), tot_f))
        return rows
    if p.mode == "train":
        af = f"{p.batch * p.seq:,} tokens x (34 x hidden {a.hidden} x {a.layers} layers + 4 x vocab {a.vocab}) B (no recomputation)"
    else:
        af = f"{p.batch * p.seq:,} tokens x widest intermediate {a.act_width:,} x {4 if p.dtype == 'fp32' else 2} B (one layer, whole-batch prefill)"
    rows.append(("activations", _gb(p.activation_bytes), _gib(p.activation_bytes), af))
    rows.append(
        (
            "overhead / GPU",
            _gb(p.overhead_bytes),
            _gib(p.overhead_bytes),
            "CUDA context + allocator slack + library workspaces (assumed 1.5 GB)",
        )
    )
    tot_f = "weights + KV + activations + overhead" + (f" x {p.gpu_count} GPUs" if p.gpu_count > 1 else "")
    rows.append(("total", _gb(p.total_bytes), _gib(p.total_bytes), tot_f))
    if p.gpu_count > 1:
        per = p.per_gpu_bytes()
        rows.append(
            (
                "per GPU",
                _gb(per),
                _gib(per),
                f"tensor parallel over {p.gpu_count}: weights, KV (by KV head) and activations split; overhead replicated",
            )
        )
    return rows


def render(p, console=None) -> None:
    """Print the memory breakdown and the per-card table of one plan, and (vllm) the engine command."""
    from rich.text import Text

    from gpuops.planning.memory import VLLM_VERSION
    from gpuops.render.tables import ID, NAME, NUM, TEXT, Col, print_table

    con = console or _console()
    kv = f", KV {p.kv_dtype}" if p.mode == "infer" else ""
    con.print(f"[bold]{p.model}[/] ({p.arch.family}; {p.source})")
    eng = {
        "vllm": f"engine vllm: follows vLLM {VLLM_VERSION} (V1) defaults, gpu_memory_utilization {p.headroom:g}",
        "hf": f"engine hf (transformers generate), headroom {p.headroom:.0%}",
        "train": f"engine train, headroom {p.headroom:.0%}",
    }[p.engine]
    q = f" ({p.quant.label})" if p.quant is not None else ""
    con.print(f"{p.mode}: {p.dtype} weights{q}{kv}, batch {p.batch} x seq {p.seq}, {p.gpu_count} GPU(s); {eng}")
    from rich.markup import escape

    if not p.weights_verified:
        con.print(
            "[bold red]UNVERIFIED[/] weights: nothing confirms the weight count; every fit below is a guess "
            "(`up --model` refuses without --allow-unverified)"
        )
    if not p.arch.layout_verified:
        con.print(
            f"[bold red]UNVERIFIED[/] KV plan: {escape(p.arch.layout_note)}; every fit below is a guess "
            "(`up --model` refuses without --allow-unverified)"
        )
    print_table(
        con,
        "memory (GB = 10^9 B, GiB = 2^30 B)",
        [Col("item", NAME), Col("GB"), Col("GiB"), Col("how", TEXT)],
        [list(r) for r in memory_rows(p)],
    )

    vendors = sorted({c.card.vendor for c in p.cards})
    vtext = "NVIDIA" if vendors == ["nvidia"] else ("AMD" if vendors == ["amd"] else "NVIDIA and AMD")
    vtext += "; AMD cards when asked: --vendor amd" if vendors == ["nvidia"] else ""
    title = (
        f"cards ({vtext}; {p.gpu_count} GPU(s) each; fit = need per GPU <= {p.headroom:.0%} of the engine-visible GiB)"
    )
    cols = [
        ("card", "left"),
        ("VRAM GiB", "right"),
        ("visible GiB", "right"),
        ("budget GiB", "right"),
        ("need/GPU GiB", "right"),
        ("fits", "center"),
    ]
    if p.mode == "infer":
        cols += [("KV pool GiB", "right"), (f"max conc. @{p.seq}", "right")]
    cols += [(f"max batch @{p.seq}", "right")]
    if p.mode == "infer":
        cols += [
            ("decode tok/s b1 (BW/weights)", "right"),
            ("ridge FLOP/B", "right"),
            ("compute-bound batch", "right"),
            ("tok/s @max batch", "right"),
            ("USD/h", "right"),
            ("$/Mtok ceiling", "right"),
            ("$/Mtok b1", "right"),
            ("$/Mtok max batch", "right"),
        ]
    else:
        cols += [("ridge FLOP/B", "right"), ("USD/h", "right")]
    rows = []
    for c in p.cards:
        fits = (
            "[green]yes[/]"
            if c.fits
            else f"[red]no[/] (-{c.missing_bytes / 2**30:.1f})"
            if c.missing_bytes
            else "[red]no[/]"
        )
        guess = "~" if c.unverified else ""
        if c.unverified:  # not a confident "yes": the weights it rests on are a guess
            fits = ("[yellow]guess: yes[/]" if c.fits else fits) + " [red](unverified)[/]"
        name = c.card.display + (f" ({c.card.vendor.upper()})" if c.card.vendor != "nvidia" else "")
        row = [
            name,
            f"{c.card.vram_bytes / 2**30:g}",
            f"{c.card.engine_visible_bytes / 2**30:.2f}",
            f"{c.budget_bytes / 2**30:.2f}",
            f"{guess}{c.need_bytes_per_gpu / 2**30:.2f}",
            fits,
        ]
        if p.mode == "infer":
            row += [f"{guess}{c.kv_pool_bytes / 2**30:.2f}", f"{guess}{c.max_concurrency:,.2f}"]
        row += [str(c.max_batch)]
        if p.mode == "infer":
            speed, usd = c.shown_speed  # a card that does not fit shows no speed and no $/Mtok ("-")
            u = usd or {}
            row += [
                "-" if speed is None else f"{speed:,.1f}",
                f"{c.ridge_flop_per_byte:,.0f}",
                "-" if speed is None else f"{c.compute_bound_batch:,.0f}",
                "-" if speed is None or not c.max_batch_tok_s else f"{c.max_batch_tok_s:,.0f}",
                f"{c.usd_per_hour:.2f}",
                _usd(u.get("ceiling")),
                _usd(u.get("batch_1")),
                _usd(u.get("max_batch")),
            ]
        else:
            row += [f"{c.ridge_flop_per_byte:,.0f}", f"{c.usd_per_hour:.2f}"]
        rows.append([Text.from_markup(x) if i == 5 else x for i, x in enumerate(row)])
    # Every column is a number the reader came for: columns that do not fit go to a continuation
    # table keyed by the card, never cut.
    kinds = {"card": NAME, "fits": ID}
    print_table(
        con,
        title,
        [Col(h, kinds.get(h, NUM), justify="center" if h == "fits" else None) for h, _ in cols],
        rows,
        fold=True,
    )
    notes: dict[str, list[str]] = {}
    for c in p.cards:
        if c.note:
            notes.setdefault(c.note, []).append(c.card.display)
    for note, names in notes.items():
        con.print(f"{', '.join(names)}: {note}", markup=False)
    if p.engine == "vllm":
        best = min((c for c in p.cards if c.fits), key=lambda c: c.usd_per_hour, default=None)
        if best is not None:
            con.print(f"engine command ({best.card.display}, cheapest that fits):")
            con.print(f"  {best.engine_command}", markup=False, soft_wrap=True)  # one line: copied as it is
    if p.mode == "infer":
        con.print(
            "decode ceiling = N x bandwidth / weight bytes read per token (not the embedding table; MoE: routed experts only); "
            "tok/s @max batch = batch / max(bytes read / bandwidth, 2 x active params x batch / FLOP/s), "
            "KV of a full --seq context read each step; $/Mtok = USD/h / (tok/s x 3600) x 1e6 at the catalog's "
            "reference price (simulated, not an offer); a card that does not fit shows no speed and no $/Mtok (-).",
            style="dim",
        )


def render_matrix(plans: list, console=None) -> None:
    """Every model (rows) on every card (columns): max batch at --seq, or '-' when it does not fit."""
    from gpuops.render.tables import NAME, Col, print_table

    con = console or _console()
    if not plans:
        return
    p0 = plans[0]
    dtypes = sorted({p.dtype for p in plans})
    dt = dtypes[0] if len(dtypes) == 1 else "each checkpoint's dtype"
    title = f"max batch at seq {p0.seq} ({p0.engine}, {dt}, {p0.gpu_count} GPU(s), utilization {p0.headroom:.0%}); '-' = does not fit"
    cols = [Col("model", NAME), Col("params"), Col("weights GB")] + [Col(c.card.name) for c in p0.cards]
    rows = [
        [
            p.model,
            _n(p.params),
            f"{p.weights_bytes / 1e9:.1f}",
            *[str(c.max_batch) if c.max_batch else "-" for c in p.cards],
        ]
        for p in plans
    ]
    # Cards are columns: those that do not fit the width go to continuation tables keyed by model.
    print_table(con, title, cols, rows, fold=True)


def render_catalog(fmt: str = "table", console=None) -> None:
    """The built-in models (name, family, params, context, source) and cards (VRAM, bandwidth, TFLOP/s)."""
    from gpuops.catalog import cards
    from gpuops.planning.architecture import architecture
    from gpuops.planning.models import model_catalog
    from gpuops.render.tables import ID, NAME, TEXT, Col, print_table

    models: list[dict[str, Any]] = []
    for m in model_catalog():
        a = architecture(m.config)
        models.append(
            {
                "name": m.name,
                "family": a.family,
                "params": a.params,
                "active_params": a.active_params,
                "context": a.max_context,
                "source": m.source,
            }
        )
    from gpuops.providers import REGISTRY

    named = [e for e in REGISTRY.values() if e.catalog_field]  # each provider's name for a card: its column
    card_rows = [
        {
            "card": c.name,
            "vendor": c.vendor,
            "family": c.family,
            "aliases": list(c.aliases),
            "vram_bytes": c.vram_bytes,
            "bandwidth_bytes_s": c.bandwidth_bytes_s,
            "bf16_flops": c.bf16_flops,
            "fp8_flops": c.fp8_flops,
            **{e.catalog_field: getattr(c, e.catalog_field) for e in named},
        }
        for c in cards()
    ]
    if fmt != "table":
        from gpuops.render import emit

        # CSV: the models (the cards are `--format json`'s second list)
        emit.emit({"models": models, "cards": card_rows}, fmt, csv_records=models)
        return
    con = console or _console()
    print_table(
        con,
        "built-in models",
        [Col("name", NAME), Col("family", ID), Col("params"), Col("active"), Col("context"), Col("source", TEXT)],
        [
            [m["name"], m["family"], _n(m["params"]), _n(m["active_params"]), str(m["context"] or "-"), m["source"]]
            for m in models
        ],
        fold=True,
    )
    cols = [
        Col("card", ID),
        Col("vendor", ID),
        Col("family", ID),
        Col("aliases", TEXT),
        Col("VRAM GiB"),
        Col("GB/s"),
        Col("bf16 TFLOP/s"),
        Col("fp8 TFLOP/s"),
        *(Col(e.catalog_heading, NAME) for e in named),
    ]
    print_table(
        con,
        "cards (TFLOP/s dense; GB/s = 10^9 B/s)",
        cols,
        [
            [
                c["card"],
                c["vendor"],
                c["family"],
                ", ".join(c["aliases"]),
                f"{c['vram_bytes'] / 2**30:g}",
                f"{c['bandwidth_bytes_s'] / 1e9:,.0f}",
                f"{c['bf16_flops'] / 1e12:g}",
                f"{c['fp8_flops'] / 1e12:g}" if c["fp8_flops"] else "-",
                *(c[e.catalog_field] or "-" for e in named),
            ]
            for c in card_rows
        ],
        fold=True,
    )
