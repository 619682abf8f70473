#!/usr/bin/env python3
"""How a measured run's GPU ops follow the SM clock, from its Chrome trace (`twinflow run --trace T`, which holds
the GPU's SM clock, power and temperature as counter tracks beside the ops since 2026-11-30).

For each op kind (forward, backward, all-gather, reduce-scatter, gpu_optimizer), the ops that ran while the SM clock
held one value (NVML's samples are 10 ms apart, but on an H200 its clock reading changes about every 100 ms, and a
layer's op takes ~1 ms; ops across a change are left out) are grouped by that clock in 60 MHz bins: how many, their mean duration, and their mean duration scaled to the
fastest bin's clock (duration x MHz / top MHz). When the ops' work is bound by the SM clock, the scaled column is
flat while the duration column moves with the clock; a column that moves where the clock does not points elsewhere.
Also per step: the ops' duration in tenths of the step (time order) beside the clock there, which shows where in a
step the clock drops (bench/results/2026-11-30-h200x2-clock).

Usage: clock_vs_ops.py TRACE.json [TRACE.json ...] [--kinds forward,backward] [--json OUT]"""
import bisect
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        doc = json.load(f)
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    ops = [e for e in evs if e.get("ph") == "X"]
    clock = sorted((e["ts"], e["args"]["MHz"]) for e in evs if e.get("ph") == "C" and e.get("name") == "SM clock")
    power = sorted((e["ts"], e["args"]["W"]) for e in evs if e.get("ph") == "C" and e.get("name", "").startswith("GPU power"))
    return ops, clock, power


def at(series, ts):
    """The last sample at or before ts (the first one before the series starts); None for an empty series."""
    if not series:
        return None
    i = bisect.bisect_right([t for t, _ in series], ts) - 1
    return series[max(i, 0)][1]


def step_of(e):
    return e.get("args", {}).get("step", 0)


def steady_clock_at(series, t0, t1):
    """The clock over [t0, t1] when no sample in it (nor the last before it) reads another value; else None."""
    if not series:
        return None
    times = [t for t, _ in series]
    i = max(bisect.bisect_right(times, t0) - 1, 0)
    j = max(bisect.bisect_right(times, t1) - 1, 0)
    values = {v for _, v in series[i:j + 1]}
    return values.pop() if len(values) == 1 else None


def by_clock(ops, clock, kind):
    rows = [(steady_clock_at(clock, e["ts"], e["ts"] + e["dur"]), e["dur"]) for e in ops if e["cat"] == kind]
    rows = [(c, d) for c, d in rows if c is not None]
    if not rows:
        return []
    top = max(c for c, _ in rows)
    bins = {}
    for c, d in rows:
        bins.setdefault(int(c // 60) * 60, []).append((c, d))
    out = []
    for b in sorted(bins, reverse=True):
        cs = [c for c, _ in bins[b]]
        ds = [d for _, d in bins[b]]
        out.append({"mhz_bin": b, "n": len(ds), "mean_mhz": statistics.mean(cs), "mean_us": statistics.mean(ds),
                    "scaled_us": statistics.mean(d * c / top for c, d in bins[b])})
    return out


def along_step(ops, clock, power, kind):
    """Per step: the ops of `kind` in tenths of the step (by start time): mean duration, clock and power there."""
    out = {}
    for s in sorted({step_of(e) for e in ops}):
        mine = sorted((e for e in ops if step_of(e) == s and e["cat"] == kind), key=lambda e: e["ts"])
        if len(mine) < 10:
            continue
        tenths = []
        for k in range(10):
            part = mine[k * len(mine) // 10:(k + 1) * len(mine) // 10]
            mids = [e["ts"] + e["dur"] / 2 for e in part]
            c = [at(clock, t) for t in mids]
            p = [at(power, t) for t in mids]
            tenths.append({"mean_us": statistics.mean(e["dur"] for e in part),
                           "mhz": statistics.mean(c) if None not in c else None,
                           "w": statistics.mean(p) if p and None not in p else None})
        out[s] = tenths
    return out


def main(argv):
    kinds = ["forward", "backward", "allgather", "reduce_scatter", "gpu_optimizer"]
    out_json = None
    paths = []
    i = 0
    while i < len(argv):
        if argv[i] == "--kinds":
            kinds = argv[i + 1].split(",")
            i += 2
        elif argv[i] == "--json":
            out_json = argv[i + 1]
            i += 2
        else:
            paths.append(argv[i])
            i += 1
    if not paths:
        print(__doc__)
        return 2
    report = {}
    for path in paths:
        ops, clock, power = load(path)
        print(f"\n{path}: {len(ops)} ops, {len(clock)} clock samples"
              + (f" ({min(c for _, c in clock):.0f}-{max(c for _, c in clock):.0f} MHz)" if clock else ""))
        if not clock:
            print("  no SM clock counters in this trace (a run without NVML, or before 2026-11-30)")
            continue
        report[path] = {}
        for kind in kinds:
            rows = by_clock(ops, clock, kind)
            if not rows:
                continue
            print(f"  {kind}: ops by the SM clock they ran at")
            print(f"    {'MHz bin':>8} {'n':>5} {'mean MHz':>9} {'mean us':>9} {'x MHz/top':>10}")
            for r in rows:
                print(f"    {r['mhz_bin']:>8} {r['n']:>5} {r['mean_mhz']:>9.0f} {r['mean_us']:>9.1f} {r['scaled_us']:>10.1f}")
            tenths = along_step(ops, clock, power, kind)
            for s, t in tenths.items():
                print(f"    step {s} in tenths: us " + " ".join(f"{x['mean_us']:.0f}" for x in t))
                print(f"    step {s} in tenths: MHz " + " ".join(f"{x['mhz']:.0f}" if x["mhz"] else "-" for x in t))
            report[path][kind] = {"by_clock": rows, "tenths": tenths}
    if out_json:
        with open(out_json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
