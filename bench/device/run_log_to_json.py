#!/usr/bin/env python3
"""Recovers the `twinflow run --json` document of a sweep from its console log, for a run that was
stopped before it wrote the JSON (it writes at the end). Each finished ratio's step table gives the
step time, the optimizer phase and the op kinds it prints (forward, backward, all-gather,
reduce-scatter, d2h, cpu/gpu optimizer, h2d), at the table's 0.01 ms resolution; a ratio whose table
was not printed is left out. Tables with a spec column (held / failed / off) give each step's speculation, and a
"CPU pass order: M speculated pass(es) in arrival order, ..., K before the commits" line the point's order.
--plan-from RUN.json takes what the log does not print (the speculation budget, the host staging, the carried
tail) from a run of the same scenario on the same machine kind (its point of the same ratio and CPU elements:
`auto` resolves them from the scenario and the host's memory alone).
A ratio cut off after its last step but before its table (the run was stopped there) is recovered from its
progress lines ("step k/N: T ms, ..., speculation S") when all N are there: the step time and speculation
only (its phase columns read 0), marked "from_progress_lines".
Usage: run_log_to_json.py LOG OUT.json --threads N [--world W] [--plan-from RUN.json]"""
import argparse
import json
import re

ap = argparse.ArgumentParser()
ap.add_argument("log")
ap.add_argument("out")
ap.add_argument("--threads", type=int, required=True)
ap.add_argument("--world", type=int, default=1)
ap.add_argument("--plan-from")
a = ap.parse_args()
plan = {p["ratio"]: p for p in json.load(open(a.plan_from))["points"]} if a.plan_from else {}
lines = open(a.log).read().splitlines()
head = next(l for l in lines if l.startswith("run: "))
doc = {"scenario": head.split("|")[0][5:].strip(), "rank": 0, "world": a.world, "threads": a.threads,
       "gpu": head.split("|")[3].split(",")[-1].strip(), "workload": "mlp", "params": 0,
       "recovered_from_log": a.log, "points": []}
kinds = ["forward", "backward", "allgather", "reduce_scatter", "d2h", "cpu_optimizer", "gpu_optimizer", "h2d"]
# tables printed since the lr schedule (2026-11-24) have an lr column after the loss scale
old_cols = ["step", "loss", "grad_norm", "scale", "step_ms"] + kinds + ["opt_phase", "exp_xfer"]
new_cols = ["step", "loss", "grad_norm", "scale", "lr", "step_ms"] + kinds + ["opt_phase", "exp_xfer", "spec"]
order = {"arrival": -1, "before_norm": -1}  # the last "CPU pass order" line before a table
def plan_fields(p):
    q = plan.get(p["ratio"])
    if a.plan_from and (q is None or q["actual_ratio"] != p["actual_ratio"]):
        raise SystemExit(f"{a.plan_from}: no point of ratio {p['ratio']} split as {p['actual_ratio']}")
    for k in ("speculation_bytes", "staging_slots", "carry_tail"):
        if q is not None and k in q:
            p[k] = q[k]


progress = None  # the progress lines of the ratio whose header was seen last: (ratio, actual, order, steps)
i = 0
while i < len(lines):
    h = re.match(r"^ratio (\S+) \(actual (\S+)\): ", lines[i])
    if h:
        progress = (float(h.group(1)), float(h.group(2)), [])
    g = re.match(r"^  step (\d+)/(\d+): (\S+) ms,.*speculation (held|failed|off)", lines[i])
    if g and progress is not None:
        progress[2].append((int(g.group(1)), int(g.group(2)), float(g.group(3)), g.group(4)))
    o = re.match(r"^CPU pass order: (\d+) speculated pass\(es\) in arrival order.*, (\d+) before the commits", lines[i])
    if o:
        order = {"arrival": int(o.group(1)), "before_norm": int(o.group(2))}
    elif lines[i].startswith("CPU pass order: arrival"):
        order = {"arrival": -1, "before_norm": -1}
    m = re.match(r"^ratio (\S+) \(actual (\S+)\)$", lines[i])
    if m and i + 2 < len(lines) and lines[i + 1].startswith("step "):
        p = {"ratio": float(m.group(1)), "actual_ratio": float(m.group(2)), "steps": [], "cpu_order": dict(order)}
        plan_fields(p)
        order = {"arrival": -1, "before_norm": -1}
        progress = None
        cols = new_cols if lines[i + 1].split()[4] == "lr" else old_cols
        j = i + 3
        while j < len(lines) and re.match(r"^\d+ ", lines[j]):
            v = dict(zip(cols, lines[j].split()))
            ns = lambda k: int(round(float(v[k]) * 1e6))
            st = {"step": int(v["step"]), "step_ns": ns("step_ms"), "optimizer_phase_ns": ns("opt_phase"),
                  "kind_ns": {k: ns(k) for k in kinds}}
            if "spec" in v and v["spec"] in ("held", "failed", "off"):
                st["speculated"] = v["spec"] != "off"
                st["speculation_held"] = v["spec"] == "held"
            p["steps"].append(st)
            j += 1
        doc["points"].append(p)
        i = j
    else:
        i += 1
if progress is not None and progress[2] and progress[2][-1][0] == progress[2][-1][1] == len(progress[2]):
    p = {"ratio": progress[0], "actual_ratio": progress[1], "steps": [], "cpu_order": dict(order),
         "from_progress_lines": True}
    plan_fields(p)
    for k, _, t, spec in progress[2]:
        p["steps"].append({"step": k, "step_ns": int(round(t * 1e6)), "optimizer_phase_ns": 0,
                           "kind_ns": {x: 0 for x in kinds}, "speculated": spec != "off",
                           "speculation_held": spec == "held"})
    doc["points"].append(p)
json.dump(doc, open(a.out, "w"), indent=1)
print(f"{len(doc['points'])} ratios recovered: {[p['ratio'] for p in doc['points']]}")
