#!/usr/bin/env python3
"""Does a memory-bound optimizer kernel run slower right after a long burst of GEMMs than on an idle GPU?

The engine runs its GPU optimizer right after the backward pass (hundreds of ms of bf16 GEMMs at the tensor
cores' limit); calibrate times the optimizer kernel on its own. This probe times torch's fused AdamW (fp32
parameters, gradients and states: 16 B read + 12 B written per element) in pairs, alternating:
  - alone: after IDLE_MS of an idle GPU;
  - after: right after GEMM_MS of back-to-back bf16 GEMMs (SIZE^3), on the same stream, no gap.
It also times the GEMMs at the start and at the end of each burst (the first and last GEMMS of it), so a
sustained burst that slows down (power or clocks) shows as a lower rate at its end.

Prints one table and writes JSON (--json). Run on a GPU machine: python3 bench/peer/gemm_then_optimizer.py
"""
import argparse
import json
import statistics
import time

import torch


def timed(fn, stream=None):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(stream)
    fn()
    b.record(stream)
    return a, b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1 << 30, help="AdamW elements (default 2^30)")
    ap.add_argument("--size", type=int, default=8192, help="GEMM m = n = k (default 8192)")
    ap.add_argument("--gemm-ms", type=float, default=300.0, help="GEMM burst before an 'after' sample (ms)")
    ap.add_argument("--idle-ms", type=float, default=300.0, help="idle time before an 'alone' sample (ms)")
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--edge", type=int, default=5, help="GEMMs timed at each end of a burst")
    ap.add_argument("--json", default="")
    a = ap.parse_args()

    dev = torch.device("cuda")
    p = torch.nn.Parameter(torch.randn(a.n, device=dev) * 0.02)
    p.grad = torch.randn(a.n, device=dev) * 1e-3
    opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=0.01, fused=True)
    x = torch.rand(a.size, a.size, device=dev, dtype=torch.bfloat16)
    w = torch.rand(a.size, a.size, device=dev, dtype=torch.bfloat16)
    y = torch.empty(a.size, a.size, device=dev, dtype=torch.bfloat16)
    gemm_flop = 2.0 * a.size ** 3
    opt_bytes = 28.0 * a.n

    def adamw():
        opt.step()

    def gemm():
        torch.matmul(x, w, out=y)

    for _ in range(3):
        adamw()
        gemm()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        gemm()
    torch.cuda.synchronize()
    per_gemm_ms = (time.perf_counter() - t0) * 1e3 / 10
    burst = max(2 * a.edge, int(a.gemm_ms / per_gemm_ms))

    alone, after, first, last = [], [], [], []
    for _ in range(a.pairs):
        time.sleep(a.idle_ms / 1e3)
        e = timed(adamw)
        torch.cuda.synchronize()
        alone.append(e[0].elapsed_time(e[1]))

        head = [timed(gemm) for _ in range(a.edge)]
        for _ in range(burst - 2 * a.edge):
            gemm()
        tail = [timed(gemm) for _ in range(a.edge)]
        e = timed(adamw)
        torch.cuda.synchronize()
        after.append(e[0].elapsed_time(e[1]))
        first.append(statistics.median(s.elapsed_time(t) for s, t in head))
        last.append(statistics.median(s.elapsed_time(t) for s, t in tail))

    med = statistics.median
    res = {
        "n": a.n, "gemm_size": a.size, "burst_gemms": burst, "burst_ms": burst * per_gemm_ms,
        "idle_ms": a.idle_ms, "pairs": a.pairs, "device": torch.cuda.get_device_name(0),
        "adamw_alone_ms": alone, "adamw_after_ms": after,
        "adamw_alone_gbps": opt_bytes / med(alone) / 1e6, "adamw_after_gbps": opt_bytes / med(after) / 1e6,
        "after_over_alone": med([b / c for b, c in zip(after, alone)]),
        "gemm_first_tflops": gemm_flop / med(first) / 1e9, "gemm_last_tflops": gemm_flop / med(last) / 1e9,
    }
    print(f"{res['device']}: AdamW (torch fused, fp32, 28 B/element) over {a.n} elements, {a.pairs} pairs;"
          f" bursts of {burst} bf16 GEMMs {a.size}^3 ({res['burst_ms']:.0f} ms)")
    print(f"{'':28}{'median ms':>10}{'GB/s':>9}")
    print(f"{'alone (after idle)':28}{med(alone):10.3f}{res['adamw_alone_gbps']:9.0f}")
    print(f"{'right after the GEMM burst':28}{med(after):10.3f}{res['adamw_after_gbps']:9.0f}")
    print(f"pairs' median after / alone: {res['after_over_alone']:.3f}")
    print(f"GEMM TFLOP/s at the burst's start {res['gemm_first_tflops']:.1f}, at its end {res['gemm_last_tflops']:.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
