#!/usr/bin/env python3
"""Recovers the `twinflow run --json` document of a sweep from its console log, for a run that was
stopped before it wrote the JSON (it writes at the end). Each finished ratio's step table gives the
step time, the optimizer phase and the op kinds it prints (forward, backward, all-gather,
reduce-scatter, d2h, cpu/gpu optimizer, h2d), at the table's 0.01 ms resolution; a ratio whose table
was not printed is left out. Usage: run_log_to_json.py LOG OUT.json --threads N [--world W]"""
import argparse
import json
import re

ap = argparse.ArgumentParser()
ap.add_argument("log")
ap.add_argument("out")
ap.add_argument("--threads", type=int, required=True)
ap.add_argument("--world", type=int, default=1)
a = ap.parse_args()
lines = open(a.log).read().splitlines()
head = next(l for l in lines if l.startswith("run: "))
doc = {"scenario": head.split("|")[0][5:].strip(), "rank": 0, "world": a.world, "threads": a.threads,
       "gpu": head.split("|")[3].split(",")[-1].strip(), "workload": "mlp", "params": 0,
       "recovered_from_log": a.log, "points": []}
kinds = ["forward", "backward", "allgather", "reduce_scatter", "d2h", "cpu_optimizer", "gpu_optimizer", "h2d"]
# tables printed since the lr schedule (2026-11-24) have an lr column after the loss scale
old_cols = ["step", "loss", "grad_norm", "scale", "step_ms"] + kinds + ["opt_phase", "exp_xfer"]
new_cols = ["step", "loss", "grad_norm", "scale", "lr", "step_ms"] + kinds + ["opt_phase", "exp_xfer"]
i = 0
while i < len(lines):
    m = re.match(r"^ratio (\S+) \(actual (\S+)\)$", lines[i])
    if m and i + 2 < len(lines) and lines[i + 1].startswith("step "):
        p = {"ratio": float(m.group(1)), "actual_ratio": float(m.group(2)), "steps": []}
        cols = new_cols if lines[i + 1].split()[4] == "lr" else old_cols
        j = i + 3
        while j < len(lines) and re.match(r"^\d+ ", lines[j]):
            v = dict(zip(cols, lines[j].split()))
            ns = lambda k: int(round(float(v[k]) * 1e6))
            p["steps"].append({"step": int(v["step"]), "step_ns": ns("step_ms"), "optimizer_phase_ns": ns("opt_phase"),
                               "kind_ns": {k: ns(k) for k in kinds}})
            j += 1
        doc["points"].append(p)
        i = j
    else:
        i += 1
json.dump(doc, open(a.out, "w"), indent=1)
print(f"{len(doc['points'])} ratios recovered: {[p['ratio'] for p in doc['points']]}")
