#!/usr/bin/env python3
"""The engine's CPU optimizer rate per ratio, from a sweep's Chrome traces of two ranks on one host
(`twinflow validate --trace T` or `run --trace T`: T-rRATIO.json and T-rRATIO.json.rank1, or a traces.tar.gz / .tar.xz
of them), and where it comes from (issue 20, bench/results/2026-11-28-h200x2-probes).

For every ratio, over the traced steps of rank 0:
  busy+idle  node Gparam/s (rank 0's elements / op time x ranks) of its CPU optimizer ops during which rank 1
             ran a CPU op too (> 90% of the op) and neither forward nor backward ran on rank 0's GPU (< 10%);
  gpu-busy   the same with forward or backward running (> 90%): D2H copies and GEMMs beside it;
  step corr  the correlation, layer by layer, of each op's rate between consecutive traced steps (the same
             layer's pages in every step: placement repeats, a drift in time does not);
  rank corr  the same between rank 0 and rank 1 (same step), which allocate their segments side by side.
Rank 1's clock is aligned to rank 0's at their first forward op (the all-gather holds them together).

Also, with --layers FILE1 FILE2: the per-layer tables of two `bench --cpu-ranks 1 --per-layer` outputs
(bench/device/host-placement.sh): the rate distribution of each and their layer-by-layer correlation.

Usage: cpu_pass_rates.py TRACE_PREFIX_OR_TARBALL [--json OUT] | cpu_pass_rates.py --layers A.txt B.txt"""
import glob
import json
import math
import os
import re
import statistics
import sys
import tarfile
import tempfile


def events(path):
    with open(path) as f:
        doc = json.load(f)
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in evs if e.get("ph") == "X"]


def spans(evs, cats):
    return [(e["ts"], e["ts"] + e["dur"]) for e in evs if e["cat"] in cats]


def overlap(a, b, spans_):
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in spans_)


def corr(xs, ys):
    if len(xs) < 3:
        return float("nan")
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return float("nan")
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / math.sqrt(sxx * syy)


def op_rates(evs):
    """{(step, label): Gparam/s of one rank} of the CPU optimizer ops."""
    return {(e["args"]["step"], e["args"]["label"]): e["args"]["elems"] / e["dur"] / 1e3
            for e in evs if e["cat"] == "cpu_optimizer"}


def ratio_row(path0, ranks=2):
    r0, r1 = events(path0), events(path0 + ".rank1")
    def first_forward(evs):
        return min(e["ts"] for e in evs if e["cat"] == "forward")

    shift = first_forward(r0) - first_forward(r1)
    for e in r1:
        e["ts"] += shift
    gpu = spans(r0, {"forward", "backward"})
    other = spans(r1, {"cpu_optimizer"})
    idle, busy = [], []
    for e in r0:
        if e["cat"] != "cpu_optimizer":
            continue
        a, b, d = e["ts"], e["ts"] + e["dur"], e["dur"]
        if overlap(a, b, other) / d <= 0.9:
            continue
        node = e["args"]["elems"] / d / 1e3 * ranks
        g = overlap(a, b, gpu) / d
        if g < 0.1:
            idle.append(node)
        elif g > 0.9:
            busy.append(node)
    rates0, rates1 = op_rates(r0), op_rates(r1)
    steps = sorted({s for s, _ in rates0})
    step_c = []
    for s, t in zip(steps, steps[1:]):
        labels = sorted(l for (x, l) in rates0 if x == s and (t, l) in rates0)
        step_c.append(corr([rates0[(s, l)] for l in labels], [rates0[(t, l)] for l in labels]))
    rank_c = []
    for s in steps:
        labels = sorted(l for (x, l) in rates0 if x == s and (s, l) in rates1)
        rank_c.append(corr([rates0[(s, l)] for l in labels], [rates1[(s, l)] for l in labels]))

    def med(v):
        return round(statistics.median(v), 2) if v else None

    def span_of(v):
        v = [x for x in v if not math.isnan(x)]
        return [round(min(v), 2), round(max(v), 2)] if v else None

    return {"idle_gparam_s": med(idle), "idle_ops": len(idle), "gpu_busy_gparam_s": med(busy),
            "gpu_busy_ops": len(busy), "step_corr": span_of(step_c), "rank_corr": span_of(rank_c)}


def traces(arg):
    """{ratio or file name: rank 0's trace} of every trace with a .rank1 beside it: PREFIX-rRATIO.json files, one
    .json file, or those in a .tar.gz or .tar.xz (the committed traces are xz: about 40% smaller)."""
    if arg.endswith((".tar.gz", ".tar.xz")):
        d = tempfile.mkdtemp()
        with tarfile.open(arg) as t:
            t.extractall(d, filter="data")
        paths = glob.glob(os.path.join(d, "*.json"))
    elif arg.endswith(".json"):
        paths = [arg]
    else:
        paths = glob.glob(arg + "-r*.json")
    found = {}
    for p in paths:
        if not os.path.exists(p + ".rank1"):
            continue
        m = re.search(r"-r([0-9.]+)\.json$", p)
        found[float(m.group(1)) if m else os.path.basename(p)] = p
    if not found:
        sys.exit(f"no trace with a .rank1 beside it in {arg}")
    return dict(sorted(found.items(), key=lambda kv: (isinstance(kv[0], str), kv[0])))


def per_layer(path):
    rows, on = [], False
    for line in open(path):
        if line.startswith("rank 0's CPU ops"):
            on = True
            continue
        m = re.match(r"^(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)", line) if on else None
        if m:
            rows.append((int(m.group(2)), float(m.group(5))))
    return dict(rows)


def layers_report(a_path, b_path):
    a, b = per_layer(a_path), per_layer(b_path)
    common_layers = sorted(set(a) & set(b))
    out = {}
    for name, v in (("a", [a[l] for l in common_layers]), ("b", [b[l] for l in common_layers])):
        out[name] = {"layers": len(v), "mean": round(statistics.mean(v), 2), "min": min(v), "max": max(v),
                     "below_4.2": sum(x < 4.2 for x in v), "above_5.5": sum(x > 5.5 for x in v)}
    out["corr"] = round(corr([a[l] for l in common_layers], [b[l] for l in common_layers]), 3)
    return out


def main(argv):
    if argv[:1] == ["--layers"] and len(argv) == 3:
        print(json.dumps(layers_report(argv[1], argv[2]), indent=1))
        return
    if not argv:
        sys.exit(__doc__)
    rows = {r: ratio_row(p) for r, p in traces(argv[0]).items()}
    print(f"{'ratio':>6} {'busy+idle':>10} {'ops':>4} {'gpu-busy':>9} {'ops':>4} {'step corr':>13} {'rank corr':>13}")
    for r, x in rows.items():
        def f(v):
            return "-" if v is None else str(v)
        name = f"{r:6.3f}" if isinstance(r, float) else r
        print(f"{name:>6} {f(x['idle_gparam_s']):>10} {x['idle_ops']:>4} {f(x['gpu_busy_gparam_s']):>9} "
              f"{x['gpu_busy_ops']:>4} {f(x['step_corr']):>13} {f(x['rank_corr']):>13}")
    if "--json" in argv:
        with open(argv[argv.index("--json") + 1], "w") as f:
            json.dump({str(r): x for r, x in rows.items()}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
