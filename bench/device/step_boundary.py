#!/usr/bin/env python3
"""How long the GPU waits at each step boundary, from a Chrome trace of `twinflow run --trace T` or `validate --trace T`
(issue 20, bench/results/2026-11-28-h200x2-pages call J; bench/results/2026-11-28-h200x2-sched-idle).

For every traced step s but the last, on the given rank's trace:
  gap_ms    the next step's first op start minus step s's last GPU op end (compute and comm queues: the GPU
            optimizer, the norm); the simulator starts the next step at once, so this is time the model does
            not have. The copies of step s's carried CPU tail are excluded (they run inside step s + 1).
  cpu_open  whether a CPU optimizer op ran during the gap (the pass holds the rank's cores across the boundary).
Prints one row per trace: the median and max gap, over the boundaries with the CPU pass open and without.

Usage: step_boundary.py TRACE.json [TRACE.json ...] [--json OUT]"""
import json
import statistics
import sys

from cpu_pass_rates import events  # the trace's complete ("X") events

GPU_CATS = {"forward", "backward", "allgather", "reduce_scatter", "grad_stats", "norm_allreduce", "gpu_optimizer"}


def boundaries(evs):
    steps = sorted({e["args"]["step"] for e in evs})
    out = []
    for s, nxt in zip(steps, steps[1:]):
        gpu_end = max(e["ts"] + e["dur"] for e in evs if e["args"]["step"] == s and e["cat"] in GPU_CATS)
        start = min(e["ts"] for e in evs if e["args"]["step"] == nxt)
        cpu_open = any(e["cat"] == "cpu_optimizer" and e["ts"] < start and e["ts"] + e["dur"] > gpu_end for e in evs)
        out.append({"step": s, "gap_ms": (start - gpu_end) / 1e3, "cpu_open": cpu_open})
    return out


def summary(rows, open_):
    gaps = [r["gap_ms"] for r in rows if r["cpu_open"] == open_]
    return (statistics.median(gaps), max(gaps), len(gaps)) if gaps else None


def main(argv):
    out_json = None
    if "--json" in argv:
        i = argv.index("--json")
        out_json = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if not argv:
        sys.exit(__doc__)
    result = {}
    print(f"{'trace':48} {'open: median ms':>16} {'max':>7} {'n':>3} {'closed: median ms':>18} {'max':>7} {'n':>3}")
    for path in argv:
        rows = boundaries(events(path))
        result[path] = rows
        cells = []
        for open_ in (True, False):
            s = summary(rows, open_)
            cells.append(f"{s[0]:16.2f} {s[1]:7.2f} {s[2]:3d}" if s else f"{'-':>16} {'-':>7} {0:3d}")
        print(f"{path[-48:]:48} {cells[0]} {cells[1]:>30}")
    if out_json:
        with open(out_json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
