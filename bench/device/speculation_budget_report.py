#!/usr/bin/env python3
"""The speculation budget runs of bench/device/speculation-budget.sh, re-simulated with the call's profile.

Usage: speculation_budget_report.py DIR [SCENARIO] [TWINFLOW]
DIR holds cal.yaml and run-BUDGET-ROUND.json (the script's tarball, unpacked). For every run and ratio it runs
`twinflow validate SCENARIO --profile DIR/cal.yaml --measured RUN --json` and prints a row: the budget, the round,
the speculated layers and their spare slots' GB (the run's JSON), the measured step (median of the compared
steps), the simulated one, the host's move against the profile (its probes before and after the ratio) and the
simulation at the probed host rate ("tracked"). Then per ratio and budget: the mean measured step over the rounds
and the mean of the steps scaled to the profile's host rate (measured x simulated / tracked: the host's drift in
time taken out through the probes). Writes DIR/speculation-budget.csv.
"""
import collections
import csv
import glob
import json
import os
import re
import subprocess
import sys
import tempfile


def validate(twinflow, scenario, profile, run):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([twinflow, "validate", scenario, "--profile", profile, "--measured", run, "--json", out.name],
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.load(open(out.name))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    scenario = sys.argv[2] if len(sys.argv) > 2 else "scenarios/real/mlp-2b.yaml"
    twinflow = sys.argv[3] if len(sys.argv) > 3 else "build/twinflow"
    rows = []
    for run in sorted(glob.glob(os.path.join(d, "run-*.json"))):
        m = re.match(r"run-(.+)-(\d+)\.json$", os.path.basename(run))
        if not m:
            continue
        budget, rnd = m.group(1), int(m.group(2))
        measured = {round(p["ratio"], 3): p for p in json.load(open(run))["points"]}
        v = validate(twinflow, scenario, os.path.join(d, "cal.yaml"), run)
        for p in v["points"]:
            r = round(p["ratio"], 3)
            mp = measured[r]
            host = p.get("host") or {}
            rows.append({
                "budget": budget, "round": rnd, "ratio": r,
                "layers": mp.get("speculated_layers", 0),
                "spare_GB": mp.get("spare_slot_bytes", 0) / 1e9,
                "measured_ms": p["measured_ms"], "simulated_ms": p["simulated_ms"], "error_pct": p["error_pct"],
                "host_moved_pct": host.get("moved_pct", float("nan")),
                "tracked_ms": host.get("tracked_ms", float("nan")),
                "tracked_error_pct": host.get("tracked_error_pct", float("nan")),
            })
    rows.sort(key=lambda x: (x["ratio"], x["round"], x["budget"]))
    cols = list(rows[0].keys())
    with open(os.path.join(d, "speculation-budget.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    fmt = {"spare_GB": "{:.1f}", "measured_ms": "{:.1f}", "simulated_ms": "{:.1f}", "error_pct": "{:+.1f}",
           "host_moved_pct": "{:+.1f}", "tracked_ms": "{:.1f}", "tracked_error_pct": "{:+.1f}"}
    print(" | ".join(cols))
    for x in rows:
        print(" | ".join(fmt.get(c, "{}").format(x[c]) for c in cols))
    print()
    print("ratio | budget | layers | spare GB | rounds | mean measured ms | mean at the profile's host rate ms | "
          "simulated ms")
    groups = collections.OrderedDict()
    for x in rows:
        groups.setdefault((x["ratio"], x["budget"]), []).append(x)
    for (r, b), xs in groups.items():
        n = len(xs)
        mean = sum(x["measured_ms"] for x in xs) / n
        scaled = [x["measured_ms"] * x["simulated_ms"] / x["tracked_ms"] for x in xs if x["tracked_ms"] == x["tracked_ms"]]
        at_profile = "{:.1f}".format(sum(scaled) / len(scaled)) if scaled else "-"
        print(f"{r} | {b} | {xs[0]['layers']} | {xs[0]['spare_GB']:.1f} | {n} | {mean:.1f} | {at_profile} | "
              f"{xs[0]['simulated_ms']:.1f}")


if __name__ == "__main__":
    main()
