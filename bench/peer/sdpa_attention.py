#!/usr/bin/env python3
"""torch's causal attention (scaled_dot_product_attention) forward and backward, timed per backend, as the peer of
`bench_decoder_kernels attention` at the same shapes (B, H, s, d; bf16).

FLOPs are counted as bench_decoder_kernels counts them (backends/cuda/attention.cu): the forward is half of
4·s²·d per (sample, head), causal; the backward 2.5x the forward. The backward is timed as autograd computes
it (dQ, dK, dV from dO, with the forward's saved statistics), without the forward.

Prints a table and writes JSON (--json). Run on a GPU machine: python3 bench/peer/sdpa_attention.py
"""
import argparse
import json
import statistics

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

# (name, B, H, s, d): the shapes bench_decoder_kernels times (GPT-2-124M, OPT-1.3B, the tutorial's GPT-350M)
SHAPES = [("gpt2-124m", 8, 12, 1024, 64), ("opt-1.3b", 8, 32, 1024, 64), ("gpt2-350m", 8, 16, 2048, 64)]
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def timed_ms(fn, warmup=3, iters=20):
    for _ in range(warmup):
        fn()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ev[0].record()
    for i in range(iters):
        fn()
        ev[i + 1].record()
    torch.cuda.synchronize()
    return statistics.median(ev[i].elapsed_time(ev[i + 1]) for i in range(iters))


def one(backend, B, H, s, d):
    g = torch.Generator(device="cuda").manual_seed(9)
    q, k, v = ((torch.rand(B, H, s, d, device="cuda", generator=g) * 4 - 2).to(torch.bfloat16).requires_grad_()
               for _ in range(3))
    do = (torch.rand(B, H, s, d, device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
    with sdpa_kernel([BACKENDS[backend]]):
        fwd = timed_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        bwd = timed_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
    f = 0.5 * 4.0 * s * s * d * B * H
    return {"forward_ms": fwd, "backward_ms": bwd, "forward_tflops": f / fwd / 1e9,
            "backward_tflops": 2.5 * f / bwd / 1e9}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    rows = []
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: causal SDPA, bf16, median of 20")
    print(f"{'shape':<28} {'backend':<10} {'fwd us':>9} {'TFLOP/s':>8} {'bwd us':>9} {'TFLOP/s':>8}")
    for name, B, H, s, d in SHAPES:
        for backend in BACKENDS:
            try:
                r = one(backend, B, H, s, d)
            except RuntimeError as e:  # a backend that does not take the shape on this GPU
                print(f"{name:<28} {backend:<10} not available: {str(e).splitlines()[0][:60]}")
                continue
            r.update({"shape": name, "B": B, "H": H, "s": s, "d": d, "backend": backend})
            rows.append(r)
            print(f"{name + f' B{B} H{H} s{s} d{d}':<28} {backend:<10} {r['forward_ms'] * 1e3:9.1f} "
                  f"{r['forward_tflops']:8.1f} {r['backward_ms'] * 1e3:9.1f} {r['backward_tflops']:8.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
