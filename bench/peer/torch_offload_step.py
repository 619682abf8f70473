#!/usr/bin/env python3
"""The PyTorch peer of the Twin-Flow optimizer step: the same parameter split, updated "in the usual way".

A rank's shard of N parameters is cut into L equal tensors (layers). `ratio` moves the LAST
n_cpu = round(ratio * N / align) * align elements to the CPU (the engine's core::split_shard rule,
element-granular: the boundary may cut a layer tensor in two); the first n_gpu = N - n_cpu stay on
the GPU. The model's bf16 parameters and bf16 gradients of the whole shard live on the GPU.
AdamW: lr 1e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1.

Timed region of one "optimizer step": it starts when every bf16 gradient is on the GPU (after
torch.cuda.synchronize()) and ends when every updated bf16 parameter is back on the GPU
(torch.cuda.synchronize()). Wall clock (time.perf_counter), since the step is half CPU work.

  GPU share (same in both variants, launched FIRST on the current stream so that it runs while the
  host does the CPU share): bf16 grads -> fp32 grads (one cast kernel over the flat share),
  torch.optim.AdamW(fused=True) over fp32 CUDA master tensors (one per layer piece, views of one
  flat buffer), fp32 master -> bf16 model params (one cast kernel).
  CPU share, variant `plain` (how existing frameworks do it, e.g. a flat ZeRO-Offload partition):
  D2H of all its bf16 grads into a pinned buffer on a side stream (non_blocking), sync that stream;
  bf16 -> fp32 grads on the CPU; one torch.optim.AdamW(fused=True) step over the CPU fp32 master
  tensors; fp32 master -> bf16 into a pinned buffer; H2D (non_blocking) on another side stream.
  CPU share, variant `chunked` (the best "usual" overlap): the CPU share is cut into chunks (each
  layer piece, or pieces of at most --chunk-elems); all chunk D2H copies are queued at once on the
  d2h stream, each followed by an event; for each chunk in order: wait for its event, cast its
  grads to fp32, step its own AdamW(fused=True), cast master to bf16 into pinned memory and queue
  its H2D on the h2d stream. D2H of chunk i+1 overlaps the CPU work on chunk i, and the H2D of
  chunk i overlaps the CPU work on chunk i+1.
Each variant is also timed, interleaved with the full step in the same loop, as gpu_share_only (the
GPU share alone) and cpu_share_only (that variant's CPU share with its copies alone), so the peer's
own overlap bound max(gpu, cpu) is printed beside it.

Usage (on the GPU machine; torch with CUDA):
  python3 bench/peer/torch_offload_step.py --params 4e9 --layers 32 --ratios 0.1,0.25,0.5,1 \\
      --iters 10 --warmup 2 --json torch_offload.json --check
Smoke test without CUDA (ONLY a syntax/logic test: the "GPU share" also runs on the CPU, copies are
plain CPU copies, nothing is pinned and the times mean nothing):
  python3 bench/peer/torch_offload_step.py --device cpu --params 1e6 --iters 2 --check

Memory: the GPU holds 4 B/param for the shard (bf16 params + grads) plus 16 B per GPU-share param
(fp32 master, fp32 grads, exp_avg, exp_avg_sq). The host holds 16 B per CPU-share param (the same
four fp32 tensors) plus two pinned bf16 staging buffers (torch's pinned allocator rounds each to a
power of two). Each ratio allocates its own state and frees it before the next; a ratio that does
not fit (predicted from free memory, or an out-of-memory error at run time) is skipped with a line
saying so. The first step of each variant creates the optimizer state: --warmup >= 1 keeps that out.
--check [N] afterwards runs a few steps of both variants on a small shard (N, default 2^20) and
compares the peer's fp32 masters (CPU and GPU share) with torch.optim.AdamW(foreach=False) in fp32 on
the device over the same bf16 grads; the process exits non-zero if they disagree.
"""
import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import shlex
import statistics
import sys
import time

import torch

LR, BETAS, EPS, WEIGHT_DECAY = 1e-4, (0.9, 0.95), 1e-8, 0.1
FIELDS = ["ratio", "n_gpu", "n_cpu", "variant", "median_ms", "min_ms", "gparam_per_s", "gpu_share_only_ms",
          "cpu_share_only_ms"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def parse_count(s):
    v = float(s)
    if not math.isfinite(v) or v < 1 or v != math.floor(v):
        raise argparse.ArgumentTypeError(f"{s!r} is not a positive whole number")
    return int(v)


def parse_ratios(s):
    out = []
    for tok in s.split(","):
        r = float(tok)
        if not 0.0 <= r <= 1.0:
            raise argparse.ArgumentTypeError(f"ratio {tok!r} is out of [0, 1]")
        out.append(r)
    return out


def pow2ceil(n):
    return 1 << max(0, (n - 1).bit_length())


def mem_available_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def is_oom(e):
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    msg = str(e).lower()
    return isinstance(e, RuntimeError) and ("out of memory" in msg or "can't allocate memory" in msg)


class Split:
    """The shard [0, n): layers [i*n//L, (i+1)*n//L); GPU share [0, n_gpu), CPU share [n_gpu, n)."""

    def __init__(self, n, layers, ratio, align, chunk_elems):
        self.n, self.layers, self.ratio = n, layers, ratio
        units = math.floor(ratio * n / align + 0.5)  # std::round of a non-negative value
        # the engine pads its shard to a multiple of align, so there ratio 1 is the whole shard: keep that here
        self.n_cpu = n if ratio == 1.0 else min(n, units * align)
        self.n_gpu = n - self.n_cpu
        bounds = [(i * n // layers, (i + 1) * n // layers) for i in range(layers)]
        # pieces as (begin, end) shard offsets; a layer cut by the boundary gives one piece to each side
        self.gpu_pieces = [(a, min(b, self.n_gpu)) for a, b in bounds if a < self.n_gpu]
        cpu_pieces = [(max(a, self.n_gpu), b) for a, b in bounds if b > self.n_gpu]
        self.cpu_chunks = []  # the CPU share's optimizer tensors; `chunked` steps them one at a time
        for a, b in cpu_pieces:
            step = chunk_elems if chunk_elems > 0 else b - a
            for c in range(a, b, step):
                self.cpu_chunks.append((c, min(b, c + step)))


class Dev:
    """CUDA streams/events, or (smoke mode) the same calls as no-ops on the CPU."""

    def __init__(self, kind):
        self.cuda = kind == "cuda"
        self.device = torch.device(kind)
        self.d2h = torch.cuda.Stream() if self.cuda else None
        self.h2d = torch.cuda.Stream() if self.cuda else None

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def on(self, stream):
        return torch.cuda.stream(stream) if self.cuda else contextlib.nullcontext()

    def stream_sync(self, stream):
        if self.cuda:
            stream.synchronize()

    def event(self):
        return torch.cuda.Event() if self.cuda else None

    def record(self, ev, stream):
        if self.cuda:
            ev.record(stream)

    def wait_host(self, ev):
        if self.cuda:
            ev.synchronize()

    def host_empty(self, n, dtype):
        return torch.empty(n, dtype=dtype, pin_memory=self.cuda)

    def free_caches(self):
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            if hasattr(torch._C, "_host_emptyCache"):  # pinned blocks cached by torch's host allocator
                torch._C._host_emptyCache()


class Shard:
    """What the model holds on the GPU for the whole shard: (n,) bf16 params and (n,) bf16 grads."""

    def __init__(self, dev, n, seed):
        self.gen = torch.Generator(device=dev.device).manual_seed(seed)
        self.param = torch.empty(n, dtype=torch.bfloat16, device=dev.device).normal_(0.0, 1.0, generator=self.gen)
        self.grad = torch.empty(n, dtype=torch.bfloat16, device=dev.device)
        self.new_grads()

    def new_grads(self):
        self.grad.normal_(0.0, 1e-3, generator=self.gen)


def adamw(params, impl):
    kw = {"fused": True} if impl == "fused" else {"foreach": True}
    return torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, **kw)


def view_param(master, grad, a, b):
    p = torch.nn.Parameter(master[a:b])  # shares the flat buffer's storage
    p.grad = grad[a:b]
    return p


class OffloadState:
    """One ratio's optimizer state: GPU share on the device, CPU share in host memory."""

    def __init__(self, dev, shard, split, cpu_impl):
        self.dev, self.shard, self.split, self.cpu_impl = dev, shard, split, cpu_impl
        ng, nc = split.n_gpu, split.n_cpu
        self.g_opt = None
        if ng:
            self.g_master = shard.param[:ng].float()  # (n_gpu,) fp32, device
            self.g_grad = torch.empty(ng, dtype=torch.float32, device=dev.device)  # (n_gpu,) fp32, device
            g_params = [view_param(self.g_master, self.g_grad, a, b) for a, b in split.gpu_pieces]
            self.g_opt = adamw(g_params, "fused" if dev.cuda else cpu_impl)
        self.c_opts = []
        if nc:
            self.pin_g = dev.host_empty(nc, torch.bfloat16)  # (n_cpu,) bf16, pinned: grads landing from D2H
            self.pin_p = dev.host_empty(nc, torch.bfloat16)  # (n_cpu,) bf16, pinned: params leaving by H2D
            self.c_master = torch.empty(nc, dtype=torch.float32)  # (n_cpu,) fp32, host
            self.c_grad = torch.empty(nc, dtype=torch.float32)  # (n_cpu,) fp32, host
            self.pin_p.copy_(shard.param[ng:])  # master starts as the model's bf16 params
            self.c_master.copy_(self.pin_p)
            self.c_params = [view_param(self.c_master, self.c_grad, a - ng, b - ng) for a, b in split.cpu_chunks]
            self.events = [dev.event() for _ in split.cpu_chunks]

    def set_variant(self, variant):
        """Fresh CPU optimizer(s) for a variant (the previous variant's moments are freed first)."""
        self.c_opts = []
        gc.collect()
        if self.split.n_cpu:
            if variant == "plain":
                self.c_opts = [adamw(self.c_params, self.cpu_impl)]
            else:
                self.c_opts = [adamw([p], self.cpu_impl) for p in self.c_params]

    def gpu_share(self):
        if self.g_opt is None:
            return
        ng = self.split.n_gpu
        self.g_grad.copy_(self.shard.grad[:ng])  # bf16 -> fp32 on the GPU
        self.g_opt.step()
        self.shard.param[:ng].copy_(self.g_master)  # fp32 -> bf16 model params

    def cpu_share_plain(self):
        if not self.split.n_cpu:
            return
        dev, ng = self.dev, self.split.n_gpu
        with dev.on(dev.d2h):
            self.pin_g.copy_(self.shard.grad[ng:], non_blocking=True)
        dev.stream_sync(dev.d2h)
        self.c_grad.copy_(self.pin_g)  # bf16 -> fp32 on the CPU
        self.c_opts[0].step()
        self.pin_p.copy_(self.c_master)  # fp32 -> bf16 into pinned memory
        with dev.on(dev.h2d):
            self.shard.param[ng:].copy_(self.pin_p, non_blocking=True)

    def cpu_share_chunked(self):
        if not self.split.n_cpu:
            return
        dev, ng = self.dev, self.split.n_gpu
        with dev.on(dev.d2h):  # queue every chunk's D2H now: the copy engine runs ahead of the CPU
            for (a, b), ev in zip(self.split.cpu_chunks, self.events):
                self.pin_g[a - ng:b - ng].copy_(self.shard.grad[a:b], non_blocking=True)
                dev.record(ev, dev.d2h)
        for (a, b), ev, opt in zip(self.split.cpu_chunks, self.events, self.c_opts):
            dev.wait_host(ev)
            self.c_grad[a - ng:b - ng].copy_(self.pin_g[a - ng:b - ng])
            opt.step()
            self.pin_p[a - ng:b - ng].copy_(self.c_master[a - ng:b - ng])
            with dev.on(dev.h2d):
                self.shard.param[a:b].copy_(self.pin_p[a - ng:b - ng], non_blocking=True)

    def step(self, variant):
        """The whole optimizer step: GPU share launched first, then the CPU share."""
        self.gpu_share()
        (self.cpu_share_plain if variant == "plain" else self.cpu_share_chunked)()


def time_variant(dev, st, variant, iters, warmup):
    st.set_variant(variant)
    cpu = st.cpu_share_plain if variant == "plain" else st.cpu_share_chunked
    modes = {"full": lambda: st.step(variant), "gpu": st.gpu_share, "cpu": cpu}
    sec = {k: [] for k in modes}
    for it in range(warmup + iters):
        for k, fn in modes.items():  # interleaved, so that drift hits all three alike
            dev.sync()
            t0 = time.perf_counter()
            fn()
            dev.sync()
            if it >= warmup:
                sec[k].append(time.perf_counter() - t0)
    return sec


def predicted_bytes(dev, split):
    host = 16 * split.n_cpu + (2 * pow2ceil(2 * split.n_cpu) if dev.cuda and split.n_cpu else 4 * split.n_cpu)
    gpu = 16 * split.n_gpu
    return host, gpu


def check_fit(dev, split):
    """A reason the ratio will not fit, or None."""
    host, gpu = predicted_bytes(dev, split)
    if not dev.cuda:
        host += 16 * split.n_gpu
    avail = mem_available_bytes()
    margin = 2 << 30
    if avail is not None and host + margin > avail:
        return f"host needs ~{host / 1e9:.1f} GB (+2 GiB margin), {avail / 1e9:.1f} GB available"
    if dev.cuda:
        free, _ = torch.cuda.mem_get_info()
        if gpu + (1 << 30) > free:
            return f"GPU needs ~{gpu / 1e9:.1f} GB (+1 GiB margin), {free / 1e9:.1f} GB free"
    return None


def detect_cpu_impl():
    p = torch.nn.Parameter(torch.zeros(64))
    p.grad = torch.ones(64)
    try:
        adamw([p], "fused").step()
        return "fused"
    except (RuntimeError, TypeError, ValueError) as e:
        print(f"note: torch {torch.__version__} has no fused CPU AdamW ({e}); the CPU share uses foreach=True")
        return "foreach"


def ms(x):
    return None if x is None else x * 1e3


def run_ratio(args, dev, shard, ratio, cpu_impl, meta):
    split = Split(args.params, args.layers, ratio, args.align, args.chunk_elems)
    base = {"ratio": ratio, "ratio_actual": split.n_cpu / split.n, "n_gpu": split.n_gpu, "n_cpu": split.n_cpu,
            "params": split.n, "layers": split.layers, "cpu_chunks": len(split.cpu_chunks), "align": args.align,
            "iters": args.iters, "warmup": args.warmup}
    rows = []

    def skipped(reason, where=""):
        line = f"SKIP ratio {ratio}{where}: {reason}"
        print(line, flush=True)
        log(line)
        return [dict(base, variant=v, median_ms=None, min_ms=None, gparam_per_s=None, gpu_share_only_ms=None,
                     cpu_share_only_ms=None, bound_ms=None, vs_bound=None, skipped=reason, **meta)
                for v in args.variants]

    reason = check_fit(dev, split)
    if reason:
        return skipped("does not fit: " + reason)
    st, where = None, " (allocating its state)"
    try:
        if dev.cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        st = OffloadState(dev, shard, split, cpu_impl)
        log(f"[ratio {ratio}] n_gpu={split.n_gpu} n_cpu={split.n_cpu} cpu_chunks={len(split.cpu_chunks)}: "
            f"state allocated in {time.perf_counter() - t0:.1f} s")
        for variant in args.variants:
            where = f" ({variant} and what follows)"
            sec = time_variant(dev, st, variant, args.iters, args.warmup)
            med = statistics.median(sec["full"])
            g = statistics.median(sec["gpu"])
            c = statistics.median(sec["cpu"])
            bound = max(g, c)
            row = dict(base, variant=variant, median_ms=ms(med), min_ms=ms(min(sec["full"])),
                       gparam_per_s=split.n / med / 1e9, gpu_share_only_ms=ms(g), cpu_share_only_ms=ms(c),
                       gpu_share_only_min_ms=ms(min(sec["gpu"])), cpu_share_only_min_ms=ms(min(sec["cpu"])),
                       bound_ms=ms(bound), vs_bound=med / bound if bound > 0 else None,
                       times_ms=[ms(x) for x in sec["full"]], skipped=None, **meta)
            if dev.cuda:
                row["gpu_peak_bytes"] = torch.cuda.max_memory_allocated()
            rows.append(row)
            log(f"[ratio {ratio}] {variant}: median {ms(med):.2f} ms (min {ms(min(sec['full'])):.2f}); "
                f"gpu_share_only {ms(g):.2f} ms, cpu_share_only {ms(c):.2f} ms, bound {ms(bound):.2f} ms, "
                f"step/bound {row['vs_bound']:.2f}" if bound > 0 else f"[ratio {ratio}] {variant}: {ms(med):.2f} ms")
    except Exception as e:  # noqa: BLE001 -- only out-of-memory is absorbed
        if not is_oom(e):
            raise
        reason = f"out of memory at run time: {type(e).__name__}: {str(e).splitlines()[0]}"
        done = {r["variant"] for r in rows}
        st = None
        rows += [r for r in skipped(reason, where) if r["variant"] not in done]
    finally:
        if st is not None:
            st.c_opts = []
        del st
        dev.free_caches()
    return rows


def run_check(args, dev, cpu_impl):
    """A few steps of each variant on a small shard vs torch.optim.AdamW(foreach=False) in fp32 on the device."""
    n, steps, ratio, layers = args.check, 3, 0.3, 5  # the boundary at 0.7 n cuts layer 3 in two
    split = Split(n, layers, ratio, 1, max(1, n // 16))
    results, ok = {}, True
    for variant in args.variants:
        shard = Shard(dev, n, seed=1234)
        ref = torch.nn.Parameter(shard.param.float())  # (n,) fp32, device
        init = ref.detach().clone()
        ref_opt = torch.optim.AdamW([ref], lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, foreach=False)
        st = OffloadState(dev, shard, split, cpu_impl)
        st.set_variant(variant)
        for s in range(steps):
            if s:
                shard.new_grads()
            dev.sync()
            st.step(variant)
            dev.sync()
            ref.grad = shard.grad.float()
            ref_opt.step()
        ng = split.n_gpu
        want = ref.detach()
        c_err = (st.c_master - want[ng:].cpu()).abs()
        g_err = (st.g_master - want[:ng]).abs()
        tol_c = 1e-9 + 1e-6 * want[ng:].cpu().abs()
        tol_g = 1e-9 + 1e-6 * want[:ng].abs()
        masters = torch.cat([st.g_master.cpu(), st.c_master])
        copy_mismatch = int((shard.param.cpu() != masters.bfloat16()).sum())
        bf16_vs_ref = int((shard.param.cpu() != want.cpu().bfloat16()).sum())
        moved = float((want - init).abs().max())
        r = {"n": n, "n_gpu": ng, "n_cpu": split.n_cpu, "steps": steps,
             "cpu_share_max_abs_err": float(c_err.max()), "gpu_share_max_abs_err": float(g_err.max()),
             "cpu_share_within_tol": bool((c_err <= tol_c).all()), "gpu_share_within_tol": bool((g_err <= tol_g).all()),
             "bf16_params_vs_own_master_mismatches": copy_mismatch, "bf16_params_vs_reference_mismatches": bf16_vs_ref,
             "max_update": moved}
        r["pass"] = r["cpu_share_within_tol"] and r["gpu_share_within_tol"] and copy_mismatch == 0 and moved > 0
        ok = ok and r["pass"]
        results[variant] = r
        print(f"check {variant}: n={n} (n_gpu {ng}, n_cpu {split.n_cpu}), {steps} steps vs torch.optim.AdamW "
              f"(foreach=False, fp32, {dev.device.type}): "
              f"CPU-share master max abs err {r['cpu_share_max_abs_err']:.3g}, "
              f"GPU-share master max abs err {r['gpu_share_max_abs_err']:.3g} (tol 1e-9 + 1e-6|x|; largest update "
              f"{moved:.3g}); bf16 params != own master in {copy_mismatch}, != reference in {bf16_vs_ref} elements: "
              f"{'PASS' if r['pass'] else 'FAIL'}", flush=True)
        st.c_opts = []
        del st, shard, ref, ref_opt, init
        dev.free_caches()
    return results, ok


def print_table(rows):
    head = ["ratio", "n_gpu", "n_cpu", "variant", "median ms", "min ms", "Gparam/s", "gpu_share_only ms",
            "cpu_share_only ms", "bound ms", "step/bound"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        if r["skipped"]:
            print(f"| {r['ratio']} | {r['n_gpu']} | {r['n_cpu']} | {r['variant']} | skipped: {r['skipped']} |")
            continue
        f = lambda x, d=2: "-" if x is None else f"{x:.{d}f}"  # noqa: E731
        print(f"| {r['ratio']} | {r['n_gpu']} | {r['n_cpu']} | {r['variant']} | {f(r['median_ms'])} | "
              f"{f(r['min_ms'])} | {f(r['gparam_per_s'])} | {f(r['gpu_share_only_ms'])} | "
              f"{f(r['cpu_share_only_ms'])} | {f(r['bound_ms'])} | {f(r['vs_bound'])} |")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=parse_count, required=True, help="elements of the rank's shard, e.g. 4e9")
    ap.add_argument("--layers", type=int, default=32, help="the shard is cut into this many equal tensors")
    ap.add_argument("--ratios", type=parse_ratios, default=parse_ratios("0.1,0.25,0.5,1"))
    ap.add_argument("--align", type=parse_count, default=2048,
                    help="n_cpu is a multiple of this, as in the engine (core::PartitionOptions::align_elems)")
    ap.add_argument("--chunk-elems", type=float, default=0,
                    help="chunked: cut CPU layer pieces into chunks of at most this many elements (0: one per piece)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads (default: all CPUs)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--variants", default="plain,chunked")
    ap.add_argument("--json", help="write the rows here (a JSON list of dicts), rewritten after each ratio")
    ap.add_argument("--check", type=parse_count, nargs="?", const=1 << 20, default=None,
                    help="after the timed runs, check the update against torch.optim.AdamW on N elements (2^20)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: smoke test only, the GPU share runs on the CPU and the times mean nothing")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.variants = [v for v in args.variants.split(",") if v]
    bad = [v for v in args.variants if v not in ("plain", "chunked")]
    if bad or not args.variants:
        ap.error(f"--variants: unknown {bad}; expected plain and/or chunked")
    if not 1 <= args.layers <= args.params:
        ap.error("--layers must be in [1, params]")
    if args.iters < 1 or args.warmup < 0:
        ap.error("--iters must be >= 1 and --warmup >= 0")
    args.chunk_elems = int(args.chunk_elems)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("CUDA is not available to this torch; use --device cpu for the smoke test")

    if args.params % args.align:
        log(f"note: --params {args.params} is not a multiple of --align {args.align} (the engine pads its shard "
            "to one); n_cpu is still round(ratio * N / align) * align, and ratio 1 puts the whole shard on the CPU")
    torch.set_num_threads(args.threads)
    dev = Dev(args.device)
    device_name = torch.cuda.get_device_name(0) if dev.cuda else "cpu (smoke test: times mean nothing)"
    cpu_impl = detect_cpu_impl()
    meta = {"torch": torch.__version__, "device": device_name, "device_kind": args.device,
            "threads": torch.get_num_threads(), "cpu_adamw_impl": cpu_impl,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv)}
    print(f"# torch {meta['torch']} on {device_name}, {meta['threads']} CPU threads, CPU AdamW {cpu_impl}; "
          f"N={args.params}, L={args.layers}, align={args.align}, iters={args.iters}, warmup={args.warmup}",
          flush=True)
    if args.device == "cpu":
        print("# --device cpu: SMOKE TEST ONLY (GPU share on the CPU, no streams, no pinning)", flush=True)
    if args.warmup == 0:
        log("note: --warmup 0 times the first step, which creates the optimizer state")

    def write_json(rows, check=None):
        if not args.json:
            return
        out = [dict(r, check=check) for r in rows]
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f, indent=1)
        os.replace(tmp, args.json)

    t0 = time.perf_counter()
    shard = Shard(dev, args.params, args.seed)  # (N,) bf16 params and grads, for every ratio
    dev.sync()
    log(f"shard of {args.params} bf16 params + grads on {args.device} in {time.perf_counter() - t0:.1f} s")
    rows = []
    for ratio in args.ratios:
        rows += run_ratio(args, dev, shard, ratio, cpu_impl, meta)
        write_json(rows)
    del shard
    dev.free_caches()
    print_table(rows)

    ok = True
    if args.check is not None:
        check, ok = run_check(args, dev, cpu_impl)
        write_json(rows, check)
    if not ok:
        print("check FAILED", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
