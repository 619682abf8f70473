#!/usr/bin/env python3
"""The peer figures: torch.optim.AdamW(fused=True) throughput on CUDA and on the CPU (fp32).

CUDA: n = 2^26 and 2^28 fp32 parameters, as one flat tensor and as 64 equal tensors; median over
--iters steps timed with CUDA events (each step's own launches included). Also a 1 GiB
device-to-device tensor copy, as the bandwidth yardstick. CPU: n = 2^26 (--n) with one thread per CPU
this process may use (--threads; run it under taskset to give it a rank's share), median of
wall-clock steps.

  python3 bench/peer/torch_adamw.py --json out.json [--iters 20] [--no-cpu | --cpu-only] [--threads T] [--n N]
                                    [--start-at EPOCH_S]
Throughput counts 28 bytes per parameter (grad read, param/exp_avg/exp_avg_sq read and written).
"""
import argparse
import json
import os
import statistics
import time

import torch

BYTES_PER_PARAM = 28


def make_params(n, tensors, device):
    numel = n // tensors
    gen = torch.Generator(device=device).manual_seed(0)
    params = []
    for _ in range(tensors):
        p = torch.nn.Parameter(torch.rand(numel, device=device, generator=gen) * 2 - 1)
        p.grad = torch.rand(numel, device=device, generator=gen) - 0.5
        params.append(p)
    return params


def row(where, n, tensors, seconds, steps):
    return {
        "where": where,
        "n": n,
        "tensors": tensors,
        "steps_timed": steps,
        "median_s": seconds,
        "gparam_per_s": n / seconds / 1e9,
        "gb_per_s": BYTES_PER_PARAM * n / seconds / 1e9,
    }


def cuda_adamw(n, tensors, iters):
    params = make_params(n, tensors, "cuda")
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2, fused=True)
    for _ in range(3):  # warm-up; creates exp_avg / exp_avg_sq
        opt.step()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, stop in ev:
        start.record()
        opt.step()
        stop.record()
    torch.cuda.synchronize()
    sec = statistics.median(a.elapsed_time(b) for a, b in ev) / 1e3
    del opt, params
    torch.cuda.empty_cache()
    return row("cuda", n, tensors, sec, iters)


def cuda_copy_gbps(nbytes, iters):
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(7)
    b = torch.empty_like(a)
    for _ in range(2):
        b.copy_(a)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, stop in ev:
        start.record()
        b.copy_(a)
        stop.record()
    torch.cuda.synchronize()
    sec = statistics.median(x.elapsed_time(y) for x, y in ev) / 1e3
    del a, b
    torch.cuda.empty_cache()
    return 2 * nbytes / sec / 1e9


def cpu_adamw(n, iters, threads=None, start_at=None):
    """start_at: wall-clock time (time.time()) at which the timed steps begin, after the set-up and the
    warm-up, so that several processes time the same window; the window's wall-clock ends are recorded
    (window_t0 / window_t1) so that a report can check that they overlapped."""
    torch.set_num_threads(threads or len(os.sched_getaffinity(0)))
    params = make_params(n, 1, "cpu")
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-2, fused=True)
    for _ in range(3):
        opt.step()
    late = None
    if start_at is not None:
        wait = start_at - time.time()
        late = max(0.0, -wait)
        if wait > 0:
            time.sleep(wait)
    sec = []
    window_t0 = time.time()
    for _ in range(iters):
        t0 = time.perf_counter()
        opt.step()
        sec.append(time.perf_counter() - t0)
    window_t1 = time.time()
    r = row("cpu", n, 1, statistics.median(sec), iters)
    r["threads"] = torch.get_num_threads()
    r["step_s"] = sec
    r["window_t0"], r["window_t1"] = window_t0, window_t1
    if late is not None:
        r["late_s"] = late  # > 0: set-up outlasted --start-at, the windows may not overlap
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", required=True, help="write the results here")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--no-cpu", action="store_true")
    ap.add_argument("--cpu-only", action="store_true", help="skip the CUDA rows")
    ap.add_argument("--threads", type=int, help="CPU threads (default: the CPUs this process may use)")
    ap.add_argument("--n", type=int, default=1 << 26, help="CPU parameters (default 2^26)")
    ap.add_argument("--start-at", type=float,
                    help="CPU: begin the timed steps at this wall-clock time (time.time()), for processes run at once")
    args = ap.parse_args()

    out = {"torch": torch.__version__, "bytes_per_param": BYTES_PER_PARAM, "rows": []}
    if torch.cuda.is_available() and not args.cpu_only:
        out["device"] = torch.cuda.get_device_name(0)
        out["copy_gbps_1GiB"] = cuda_copy_gbps(1 << 30, args.iters)
        print(f"torch {torch.__version__} on {out['device']}: D2D copy 1 GiB {out['copy_gbps_1GiB']:.1f} GB/s")
        for n in (1 << 26, 1 << 28):
            for tensors in (1, 64):
                r = cuda_adamw(n, tensors, args.iters)
                out["rows"].append(r)
                print(f"cuda fused AdamW n=2^{n.bit_length() - 1} tensors={tensors}: {r['median_s'] * 1e3:.3f} ms "
                      f"{r['gparam_per_s']:.1f} Gparam/s {r['gb_per_s']:.0f} GB/s "
                      f"({100 * r['gb_per_s'] / out['copy_gbps_1GiB']:.1f}% of copy)", flush=True)
    else:
        print("no CUDA device: CUDA rows skipped")
    if not args.no_cpu:
        r = cpu_adamw(args.n, max(5, args.iters // 2), args.threads, args.start_at)
        r["cpus"] = sorted(os.sched_getaffinity(0))
        out["rows"].append(r)
        print(f"cpu fused AdamW n={args.n} threads={r['threads']}: {r['median_s'] * 1e3:.1f} ms "
              f"{r['gparam_per_s']:.2f} Gparam/s {r['gb_per_s']:.0f} GB/s", flush=True)
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
