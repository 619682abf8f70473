#!/usr/bin/env python3
"""The summary of several `twinflow run --json` runs in one folder, for the device scripts.

Usage: run_summary.py LOGDIR --title TEXT --row NAME[=BASE] ... [--trace FILE]
Per row (LOGDIR/NAME.json): the median tokens/s of the steady steps (apps/twinflow/steady_steps.h: the run
marks them), x the tokens/s of BASE (a ratio-0 run of the same round), the median step ms, forward ms,
compute-idle ms and CPU pass ms, the held speculations and every steady step's ms. With --trace (a run's
`--trace-steps N` window): per step but the last, the compute queue's idle gaps over 1 ms, the ops of the
other queues that ended within 0.3 ms of each gap's end (what the GPU waited for, if anything traced),
and the cpu queue's ops (name@start+ms from the step's start).
"""
import argparse
import json
import statistics

NAN = float("nan")


def load(log, name):
    try:
        return json.load(open(f"{log}/{name}.json"))["points"][0]
    except Exception as e:  # a run that failed: say so, keep going
        print(f"{name}: no run JSON ({e})")
        return None


def steady(p):
    return [s for s in p["steps"] if s.get("steady")] or p["steps"]


def med(p, f):
    return statistics.median(f(s) for s in steady(p)) if p else NAN


def tokens(p):
    return med(p, lambda s: s["tokens_per_s"])


def print_rows(log, rows):
    print(f"{'run':>28} {'tok/s':>7} {'x_base':>6} {'step_ms':>7} {'fwd_ms':>6} {'idle_ms':>7} {'cpu_ms':>6} "
          f"{'held':>6}  steady steps' ms")
    out = {}
    for row in rows:
        name, _, base = row.partition("=")
        p = load(log, name)
        if not p:
            continue
        b = load(log, base) if base else None
        t = tokens(p)
        out[name] = t / tokens(b) if b else NAN
        held = sum(1 for s in p["steps"] if s.get("speculated") and s.get("speculation_held"))
        print(f"{name:>28} {t:7.0f} {out[name]:6.3f} {med(p, lambda s: s['step_ns']) / 1e6:7.1f} "
              f"{med(p, lambda s: s['kind_ns']['forward']) / 1e6:6.1f} {med(p, lambda s: s['exposed_ns']) / 1e6:7.1f} "
              f"{med(p, lambda s: s['busy_ns']['cpu']) / 1e6:6.1f} {held:>3}/{len(p['steps']):<2}  "
              + " ".join(f"{s['step_ns'] / 1e6:.0f}" for s in steady(p)))
    return out


def print_window(path):
    try:
        tr = json.load(open(path))
    except Exception as e:
        print(f"no window trace ({e})")
        return
    steps = tr["otherData"]["steps"]
    ev = sorted((e for e in tr["traceEvents"] if e.get("ph") == "X"), key=lambda e: e["ts"])
    compute = [(e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3, e["name"]) for e in ev if e["tid"] == 0]
    print(f"\n{path.split('/')[-1]}: compute idle gaps > 1 ms (ms from the window's start)")
    for s in steps[:-1]:
        lo, hi = s["offset_ns"] / 1e6, (s["offset_ns"] + s["step_ns"]) / 1e6
        print(f" step {s['step']}: {lo:.1f} - {hi:.1f} ms (period {s['step_ns'] / 1e6:.1f})")
        end_prev = lo
        for a, b, name in compute:
            if b <= lo or a >= hi:
                continue
            if a - end_prev > 1.0:
                before = [e["name"] for e in ev if e["tid"] != 0 and abs((e["ts"] + e["dur"]) / 1e3 - a) < 0.3]
                print(f"   idle {end_prev:.1f} - {a:.1f} ({a - end_prev:.1f} ms) before '{name}'; ended at its "
                      f"start: {', '.join(before[:4]) or '-'}")
            end_prev = max(end_prev, b)
        cpu = [e for e in ev if e["tid"] == 4 and lo <= e["ts"] / 1e3 < hi and e["dur"] > 0]
        print("   cpu queue: " + " ".join(f"{e['name']}@{e['ts'] / 1e3 - lo:.0f}+{e['dur'] / 1e3:.0f}" for e in cpu))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("--title", default="")
    ap.add_argument("--row", action="append", default=[], help="NAME or NAME=BASE (BASE: the x_base run)")
    ap.add_argument("--trace", action="append", default=[], help="a --trace-steps window to list")
    a = ap.parse_args()
    if a.title:
        print(a.title)
    ratios = print_rows(a.log, a.row)
    for t in a.trace:
        print_window(t)
    with open(f"{a.log}/summary-ratios.json", "w") as f:
        json.dump(ratios, f, indent=1)


if __name__ == "__main__":
    main()
