#!/usr/bin/env python3
"""The peer on each kind of data: torch.optim.AdamW(fused=True), fp32, on the CPU and on CUDA, over the data
kinds of `twinflow bench --values` (core/optim/step_values.h):
  random     every gradient uniform in [-0.5, 0.5), m = v = 0 before the first step;
  half-zero  half the elements (at random) g = m = v = 0 (units that never had a gradient);
  subnormal  every gradient +-1e-20 (v = (1 - beta2) g^2 is subnormal);
  decayed    every g = 0 on subnormal states (m = +-1e-40, v = 1e-41).
Median of --iters steps after 2 warm-ups (wall clock on the CPU, CUDA events on the GPU); 28 B per element.

  python3 bench/peer/torch_adamw_values.py [--cpu-n N] [--cuda-n N] [--threads T] [--iters K] [--json F]
"""
import argparse
import json
import statistics
import time

import torch

KINDS = ("random", "half-zero", "subnormal", "decayed")


def make(kind, n, device):
    gen = torch.Generator(device=device).manual_seed(1)
    p = torch.nn.Parameter(torch.rand(n, device=device, generator=gen) * 2 - 1)
    g = torch.rand(n, device=device, generator=gen) - 0.5
    if kind == "subnormal":
        g = torch.where(g < 0, -1e-20, 1e-20).to(torch.float32)
    if kind in ("half-zero", "decayed"):
        mask = torch.rand(n, device=device, generator=gen) < 0.5 if kind == "half-zero" else torch.ones(
            n, dtype=torch.bool, device=device)
        g = torch.where(mask, torch.zeros_like(g), g)
    p.grad = g
    opt = torch.optim.AdamW([p], lr=1e-4, weight_decay=0.01, fused=True)
    opt.step()  # creates the states
    st = opt.state[p]
    if kind == "half-zero":
        st["exp_avg"].masked_fill_(mask, 0.0)
        st["exp_avg_sq"].masked_fill_(mask, 0.0)
    if kind == "decayed":
        sign = torch.where(torch.rand(n, device=device, generator=gen) < 0.5, -1.0, 1.0)
        st["exp_avg"].copy_(sign * 1e-40)
        st["exp_avg_sq"].fill_(1e-41)
    return opt


def time_steps(opt, iters, cuda):
    for _ in range(2):
        opt.step()
    out = []
    for _ in range(iters):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            opt.step()
            b.record()
            torch.cuda.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter()
            opt.step()
            out.append(time.perf_counter() - t)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu-n", type=int, default=1 << 26)
    ap.add_argument("--cuda-n", type=int, default=1 << 28)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    rows = []
    places = [("cpu", a.cpu_n)] + ([("cuda", a.cuda_n)] if torch.cuda.is_available() else [])
    for where, n in places:
        for kind in KINDS:
            s = time_steps(make(kind, n, where), a.iters, where == "cuda")
            rows.append({"where": where, "values": kind, "n": n, "median_s": s, "gparam_per_s": n / s / 1e9,
                         "gb_per_s": 28 * n / s / 1e9})
    base = {r["where"]: r["median_s"] for r in rows if r["values"] == "random"}
    print(f"torch {torch.__version__} fused AdamW, fp32 (CPU threads: {torch.get_num_threads()})")
    print(f"{'where':6}{'values':11}{'n':>12}{'ms':>10}{'Gparam/s':>10}{'GB/s':>9}{'x random':>10}")
    for r in rows:
        print(f"{r['where']:6}{r['values']:11}{r['n']:12d}{r['median_s'] * 1e3:10.3f}{r['gparam_per_s']:10.3f}"
              f"{r['gb_per_s']:9.1f}{r['median_s'] / base[r['where']]:10.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
