#!/usr/bin/env python3
"""A bf16 GEMM back to back for many seconds: its rate against the time since the load began.

`twinflow calibrate` times each GEMM in bursts of a few ms, and a run of 8 steps lasts about a second; training runs for
hours. A GPU held at its power limit lowers its clocks after a while. This probe runs one GEMM shape (default: the
GPT-350M fc1 forward, 16384 x 4096 x 1024) on full-entropy operands continuously for --seconds, records a CUDA event
every --window-ms, and prints the rate in windows of time since the start; then it idles --rest-s and runs one short
burst again (how fast the rate comes back).

Prints one table and writes JSON (--json). Run on a GPU machine: python3 bench/peer/gemm_sustained.py
"""
import argparse
import json
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--m", type=int, default=16384)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--window-ms", type=float, default=10.0)
    ap.add_argument("--rest-s", type=float, default=2.0)
    ap.add_argument("--json", default="")
    a = ap.parse_args()

    dev = torch.device("cuda")
    x = (torch.rand(a.m, a.k, device=dev) * 2 - 1).to(torch.bfloat16)
    w = (torch.rand(a.n, a.k, device=dev) * 2 - 1).to(torch.bfloat16)
    y = torch.empty(a.m, a.n, device=dev, dtype=torch.bfloat16)
    flop = 2.0 * a.m * a.n * a.k

    def gemm():
        torch.matmul(x, w.t(), out=y)

    for _ in range(3):
        gemm()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        gemm()
    torch.cuda.synchronize()
    per_gemm_s = (time.perf_counter() - t0) / 20
    per_window = max(1, int(a.window_ms / 1e3 / per_gemm_s))
    time.sleep(a.rest_s)  # start from a GPU that rested

    def burst(seconds):
        windows = max(1, int(seconds / (per_window * per_gemm_s)))
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(windows + 1)]
        ev[0].record()
        for i in range(windows):
            for _ in range(per_window):
                gemm()
            ev[i + 1].record()
        torch.cuda.synchronize()
        out, t = [], 0.0
        for i in range(windows):
            ms = ev[i].elapsed_time(ev[i + 1])
            out.append({"t_ms": t, "ms": ms, "tflops": per_window * flop / (ms * 1e-3) / 1e12})
            t += ms
        return out

    load = burst(a.seconds)
    time.sleep(a.rest_s)
    again = burst(0.2)
    edges = [0, 50, 100, 200, 500, 1000, 2000, 5000, 1e9]
    rows = []
    for lo, hi in zip(edges, edges[1:]):
        sel = [r for r in load if lo <= r["t_ms"] < hi]
        if sel:
            total_ms = sum(r["ms"] for r in sel)
            rows.append({"from_ms": lo, "to_ms": min(hi, load[-1]["t_ms"] + load[-1]["ms"]),
                         "tflops": len(sel) * per_window * flop / (total_ms * 1e-3) / 1e12})
    name = torch.cuda.get_device_name()
    print(f"{name}: bf16 GEMM {a.m}x{a.n}x{a.k} back to back for {a.seconds} s ({per_window} GEMMs per window)")
    print(f"{'from ms':>9} {'to ms':>9} {'TFLOP/s':>9} {'vs first':>9}")
    for r in rows:
        print(f"{r['from_ms']:9.0f} {r['to_ms']:9.0f} {r['tflops']:9.1f} {r['tflops'] / rows[0]['tflops']:9.3f}")
    rate_again = sum(per_window * flop for _ in again) / (sum(r["ms"] for r in again) * 1e-3) / 1e12
    print(f"after {a.rest_s} s of rest, 200 ms again: {rate_again:.1f} TFLOP/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"gpu": name, "shape": [a.m, a.n, a.k], "per_window": per_window, "windows": load,
                       "summary": rows, "after_rest_tflops": rate_again}, f)


if __name__ == "__main__":
    main()
