#!/usr/bin/env python3
"""The tables of bench/device/cpukern-h100.sh from its work directory: the best CPU tuning variant per
rank count k (what to put in backends/cpu/cpu_tuning.h), every variant against the read-modify-write
bound of the optimizer's own streams measured by the same processes, per core, torch's fused CPU AdamW
with its k processes' timed windows checked for overlap, the simulator's node time against the measured,
and the engine on a real step.
Usage: cpukern_report.py WORKDIR OUT.md OUT.json"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_report_common import engine_step, load, num, table, torch_groups, torch_node  # noqa: E402

work, out_md, out_json = sys.argv[1:4]
report = {}
md = ["# CPU optimizer variants, bound and simulator (bench/device/cpukern-h100.sh)", ""]
machine = os.path.join(work, "machine.txt")
if os.path.exists(machine):
    md += ["```", open(machine).read().strip(), "```", ""]


def adamw_bf16(rows):
    return [r for r in rows or [] if r["kernel"] == "adamw" and r["grad"] == "bf16" and r["dma"] == "off"]


def fx(x, d=3):
    return "-" if x is None else f"{x:.{d}f}"


torch = torch_groups(work)
ranks = adamw_bf16(load(work, "ranks.json"))
ks = sorted({int(r["ranks"]) for r in ranks})

# 1. the best variant per k
rows, best = [], {}
for k in ks:
    at_k = [r for r in ranks if int(r["ranks"]) == k]
    default = next((r for r in at_k if r["tuning"] == "default"), None)
    top = max(at_k, key=lambda r: num(r["Gparam/s"]) or 0)
    tn, overlap = torch_node(torch.get(k), k)
    g = num(top["Gparam/s"])
    d = num(default["Gparam/s"]) if default else None
    best[k] = {"tuning": top["tuning"], "gparam_per_s": g, "default_gparam_per_s": d, "torch_node": tn,
               "torch_overlap": overlap, "bound_gbps": num(top["bound GB/s"]), "bound_nt_gbps": num(top["bound nt GB/s"])}
    rows.append([k, top["threads/rank"], f"`{top['tuning']}`", fx(g), fx(d), f"{g / d:.3f}x" if d else "-",
                 top["GB/s"], top["% bound"], top["bound GB/s"], top["bound nt GB/s"], fx(tn),
                 "-" if overlap is None else f"{overlap * 100:.0f}%", f"{g / tn:.2f}x" if tn else "-",
                 default["sim ms"] if default else "-", default["node ms"] if default else "-",
                 default["sim error %"] if default else "-"])
md.append(table(
    "The best variant per k (AdamW, bf16 gradient and copy; set backends/cpu/cpu_tuning.h from the k the host runs)",
    ["k", "threads/rank", "best tuning", "best node Gparam/s", "default Gparam/s", "best / default", "GB/s",
     "% bound", "bound GB/s", "bound nt GB/s", "torch node Gparam/s", "torch windows overlap", "best vs torch",
     "sim ms (default)", "measured ms (default)", "sim error %"], rows,
    "bound: the optimizer's streams without its arithmetic by the same k processes, plain / streamed copy stores; "
    "% bound against the larger. torch: k processes on the same shares, timed windows started together; node rate = "
    "all their timed elements over the first start to the last end (overlap: the share of that span all k ran)."))
report["best"] = best

# 2. every variant
rows = [[r["ranks"], r["threads/rank"], f"`{r['tuning']}`", r["huge pages %"], r["Gparam/s"], r["GB/s"],
         r["% bound"], r["vs 1 process"], r["rank spread %"]] for r in ranks]
md.append(table("Every variant, k processes at once (huge=0: a second group of processes on 4 KiB pages)",
                ["k", "threads/rank", "tuning", "huge pages % (least rank)", "node Gparam/s", "GB/s", "% bound",
                 "vs 1 process", "rank spread %"], rows))
report["variants"] = ranks

# 3. per core and 4 threads alone, against torch alone
t1 = (load(work, "torch-alone-t1.json") or {}).get("rows", [])
t4 = (load(work, "torch-alone-t4.json") or {}).get("rows", [])
rows = []
for name, torch_rows in (("percore.json", t1), ("four.json", t4)):
    tr = next((x["gparam_per_s"] for x in torch_rows if x["where"] == "cpu"), None)
    for r in load(work, name) or []:
        if r["dma"] != "off":
            continue
        g = num(r["Gparam/s"])
        rows.append([r["threads/rank"], r["grad"], f"`{r['tuning']}`", r["Gparam/s"], r["GB/s"], r["% bound"],
                     r["bound GB/s"], r["bound nt GB/s"], fx(tr), f"{g / tr:.2f}x" if tr and g else "-"])
md.append(table("Per core: one process alone with 1 and with 4 threads (the rest of the host idle)",
                ["threads", "grad", "tuning", "Gparam/s", "GB/s", "% bound", "bound GB/s", "bound nt GB/s",
                 "torch alone Gparam/s (fp32 grads)", "vs torch"], rows))
report["per_core"] = {"ours_1": load(work, "percore.json"), "ours_4": load(work, "four.json"), "torch_1": t1,
                      "torch_4": t4}

# 4. torch's k processes: own rates against the node rate over the common window
rows = []
for k in sorted(torch):
    own = sum(r["gparam_per_s"] for r in torch[k])
    tn, overlap = torch_node(torch[k], k)
    late = max((r.get("late_s", 0) for r in torch[k]), default=0)
    rows.append([k, len(torch[k]), f"{own:.3f}", fx(tn), "-" if overlap is None else f"{overlap * 100:.0f}%",
                 f"{late:.2f}"])
md.append(table("torch fused CPU AdamW, k processes: the sum of each one's own rate against the node rate over the "
                "common window", ["k", "processes", "sum of own rates", "node Gparam/s", "windows overlap",
                                  "latest start s"], rows,
                "The 2026-11-24 run summed own rates of unsynchronised processes; where the windows do not overlap "
                "that sum is not a node rate."))
report["torch"] = {k: v for k, v in torch.items()}

# 4b. the simulator against the measured node time: the sweep's default rows and their repeat
rows = []
for name in ("ranks.json", "repeat.json"):
    for r in adamw_bf16(load(work, name)):
        if r["tuning"] == "default":
            rows.append([name.split(".")[0], r["ranks"], r["threads/rank"], r["node ms"], r["sim ms"],
                         r["sim error %"]])
md.append(table("The simulator's node time (fresh profile) against the measured, AdamW bf16, the defaults (goal: "
                "within 5%)", ["measurement", "k", "threads/rank", "measured ms", "sim ms", "sim error %"], rows,
                "repeat: the same rows measured again after the sweep; their difference from the sweep's is the "
                "check's own run-to-run spread."))
report["sim_check"] = rows

# 5. the engine's CPU ops of mlp-2b at ratio 0.05 against the simulator
ops = adamw_bf16(load(work, "engine-ops.json"))
rows = [[r["ranks"], f"`{r['tuning']}`", r["node ms"], r["Gparam/s"], r["% bound"], r["sim ms"], r["sim error %"]]
        for r in ops]
md.append(table("The engine's CPU ops of mlp-2b at ratio 0.05 (0.107 B CPU params over the ranks), CPU only",
                ["k", "tuning", "node ms", "Gparam/s", "% bound", "sim ms", "sim error %"], rows))
report["engine_ops"] = ops

# 6. the real step
step = engine_step(load(work, "run-2b.json"))
tn1, _ = torch_node(torch.get(1), 1)
rows = []
if step:
    rows.append([step["cpu_elems"], step["threads"], f"`{step['cpu_tuning']}`",
                 " ".join(f"{x:.3f}" for x in step["gparam_per_s"]),
                 f"{step['median']:.3f}", fx(tn1), f"{step['median'] / tn1:.2f}x" if tn1 else "-"])
best_step = engine_step(load(work, "run-2b-best.json"))
if best_step:
    rows.append([best_step["cpu_elems"], best_step["threads"], f"`{best_step['cpu_tuning']}`",
                 " ".join(f"{x:.3f}" for x in best_step["gparam_per_s"]),
                 f"{best_step['median']:.3f}", fx(tn1), f"{best_step['median'] / tn1:.2f}x" if tn1 else "-"])
md.append(table("The engine on a real step: mlp-2b, ratio 0.05 (goal: >= 1.1x torch on the same threads); first row "
                "the engine's defaults, second (if any) --cpu-tuning with the sweep's best variant at k = 1",
                ["CPU elements", "threads", "CPU tuning", "Gparam/s (steady steps)", "median", "torch (same threads)",
                 "vs torch"], rows))
report["engine_step_best"] = best_step
report["engine_step"] = step
if step and step["gparam_per_s"]:
    report["engine_step"]["spread"] = (max(step["gparam_per_s"]) - min(step["gparam_per_s"])) / statistics.median(
        step["gparam_per_s"])

with open(out_md, "w") as f:
    f.write("\n".join(md))
with open(out_json, "w") as f:
    json.dump(report, f, indent=1, default=str)
