#!/usr/bin/env python3
"""Plain PyTorch Lloyd (what a user writes first): x @ c.T in row tiles, argmin, index_add_, bincount.

The baseline of bench/gpu (ANCHORS.md "plain PyTorch Lloyd"). ms/iter is the difference of a long and a short
run divided by the difference in iterations, so allocation and warm-up are excluded; data already on the GPU.
Prints one line per shape:  RESULT_TORCH dtype=fp16 n=... d=... k=... ms_per_iter=...
Usage: torch_lloyd.py [quick]
"""
import sys
import time

import torch


def lloyd_iter(x, c, tile):
    n, d = x.shape
    k = c.shape[0]
    labels = torch.empty(n, dtype=torch.int64, device=x.device)
    cn = (c.float() ** 2).sum(1)
    for s in range(0, n, tile):
        xt = x[s:s + tile]
        # ‖x‖² is constant per row: argmin of ‖c‖² − 2·x·c
        dist = cn[None, :] - 2 * (xt @ c.T).float()
        labels[s:s + tile] = dist.argmin(1)
    sums = torch.zeros(k, d, dtype=torch.float32, device=x.device)
    sums.index_add_(0, labels, x.float())
    counts = torch.bincount(labels, minlength=k).clamp_min(1).to(torch.float32)
    return (sums / counts[:, None]).to(x.dtype)


def bench(n, d, k, dtype, tile=1 << 18):
    torch.manual_seed(0)
    x = torch.randn(n, d, device="cuda", dtype=dtype)
    c = x[torch.randperm(n, device="cuda")[:k]].clone()

    def run(iters):
        nonlocal c
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            c = lloyd_iter(x, c, tile)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    run(1)
    short, long_ = 2, 7
    ts = run(short)
    tl = run(long_)
    ms = (tl - ts) / (long_ - short)
    name = {torch.float16: "fp16", torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype]
    print(f"RESULT_TORCH dtype={name} n={n} d={d} k={k} ms_per_iter={ms:.2f} tflops={2 * n * d * k / ms / 1e9:.1f}",
          flush=True)
    del x, c
    torch.cuda.empty_cache()


def main():
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 (the exact comparison)
    quick = len(sys.argv) > 1 and sys.argv[1] == "quick"
    shapes = [(1_000_000, 128, 1024, torch.float16)] if quick else [
        (10_000_000, 128, 1024, torch.float16),
        (10_000_000, 128, 1024, torch.float32),
        (8_000_000, 128, 1024, torch.float16),
        (1_000_000, 256, 4096, torch.float16),
        (1_000_000, 256, 4096, torch.float32),
    ]
    print(f"device: {torch.cuda.get_device_name()} torch {torch.__version__}", flush=True)
    for n, d, k, dt in shapes:
        bench(n, d, k, dt)


if __name__ == "__main__":
    main()
