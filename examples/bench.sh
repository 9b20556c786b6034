#!/usr/bin/env bash
# A memory-bound benchmark for a rented card:
#  1. memory bandwidth: a large elementwise copy, achieved GB/s;
#  2. synthetic batch-1 decode: read a weight matrix of WEIGHTS_MB once per "token" (memory-bound,
#     like decode), achieved tokens/s and its ratio to the bandwidth ceiling (GB/s / weight bytes).
# Uses torch on CUDA when present, numpy on the CPU otherwise (pure Python as a last resort).
# Appends {"tokens": N} to $GPUOPS_METRICS so gpuops books $/Mtoken.
# Knobs (environment): WEIGHTS_MB (default 256), TOKENS (default 200), COPY_MB (default 512); the
# same as arguments, which win: bench.sh --weights-mb 64 --tokens 50 --copy-mb 128
# (`gpuops up --job bench.sh -- --tokens 50`).
set -euo pipefail
while [ $# -gt 0 ]; do
  case "$1" in
    --weights-mb) export WEIGHTS_MB="${2:?--weights-mb needs a number}"; shift 2 ;;
    --tokens) export TOKENS="${2:?--tokens needs a number}"; shift 2 ;;
    --copy-mb) export COPY_MB="${2:?--copy-mb needs a number}"; shift 2 ;;
    *) echo "bench.sh: unknown argument $1 (--weights-mb N, --tokens N, --copy-mb N)" >&2; exit 2 ;;
  esac
done
exec python3 - <<'PY'
import json, os, time

weights_mb = int(os.environ.get("WEIGHTS_MB", "256"))
tokens = int(os.environ.get("TOKENS", "200"))
copy_mb = int(os.environ.get("COPY_MB", "512"))

def bench_torch(torch):
    dev = "cuda"
    n = copy_mb * 2**20 // 4
    src = torch.empty(n, dtype=torch.float32, device=dev).uniform_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    reps = 20
    t = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src)
    torch.cuda.synchronize()
    gbs = 2 * n * 4 * reps / (time.perf_counter() - t) / 1e9  # read + write
    rows = weights_mb * 2**20 // (4096 * 2)
    w = torch.empty(rows, 4096, dtype=torch.bfloat16, device=dev).uniform_()
    x = torch.empty(4096, 1, dtype=torch.bfloat16, device=dev).uniform_()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(tokens):
        x2 = w @ x
    torch.cuda.synchronize()
    return "torch-cuda " + torch.cuda.get_device_name(0), gbs, tokens / (time.perf_counter() - t), w.numel() * 2

def bench_numpy(np):
    n = copy_mb * 2**20 // 4
    src = np.random.default_rng(0).random(n, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    reps = 5
    t = time.perf_counter()
    for _ in range(reps):
        np.copyto(dst, src)
    gbs = 2 * n * 4 * reps / (time.perf_counter() - t) / 1e9
    rows = weights_mb * 2**20 // (4096 * 4)
    w = np.random.default_rng(1).random((rows, 4096), dtype=np.float32)
    x = np.random.default_rng(2).random(4096, dtype=np.float32)
    t = time.perf_counter()
    for _ in range(tokens):
        w @ x
    return "numpy-cpu", gbs, tokens / (time.perf_counter() - t), w.nbytes

def bench_python():
    n = min(copy_mb, 64) * 2**20
    src = bytearray(n)
    t = time.perf_counter()
    for _ in range(5):
        dst = bytes(src)
    gbs = 2 * n * 5 / (time.perf_counter() - t) / 1e9
    w = bytes(min(weights_mb, 64) * 2**20)
    t = time.perf_counter()
    for _ in range(tokens):
        w.count(b"\x01")  # one full read of the weights per token
    return "python-cpu", gbs, tokens / (time.perf_counter() - t), len(w)

backend = None
try:
    import torch
    if torch.cuda.is_available():
        backend = bench_torch(torch)
except ImportError:
    pass
if backend is None:
    try:
        import numpy as np
        backend = bench_numpy(np)
    except ImportError:
        backend = bench_python()

name, gbs, tok_s, weight_bytes = backend
ceiling = gbs * 1e9 / weight_bytes
print(f"backend            {name}")
print(f"copy bandwidth     {gbs:8.1f} GB/s (read+write)")
print(f"weights            {weight_bytes / 2**20:8.0f} MiB read per token")
print(f"decode             {tok_s:8.1f} tokens/s")
print(f"ceiling            {ceiling:8.1f} tokens/s = {gbs:.1f} GB/s / {weight_bytes / 1e9:.3f} GB")
print(f"ratio to ceiling   {tok_s / ceiling:8.2f}")
metrics = os.environ.get("GPUOPS_METRICS")
if metrics:
    with open(metrics, "a") as f:
        f.write(json.dumps({"tokens": tokens, "tokens_per_s": round(tok_s, 2), "bandwidth_gb_s": round(gbs, 2)}) + "\n")
PY
