#!/usr/bin/env python3
"""The tables of bench/device/cpu-optimizer.sh from its work directory: node throughput of k CPU-half
processes against one process and the read-modify-write bound, the simulator's node time against the
measured, every optimizer per process against torch's fused CPU AdamW on the same threads, the DMA
slowdown, the tuning variants, the engine's own CPU ops of mlp-2b at ratio 0.05, and a real step.
Usage: cpu_optimizer_report.py WORKDIR OUT.md OUT.json"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_report_common as common  # noqa: E402
from cpu_report_common import num, table  # noqa: E402

work, out_md, out_json = sys.argv[1:4]


def load(name):
    return common.load(work, name)


report = {}
md = ["# CPU optimizer: k ranks on one host (bench/device/cpu-optimizer.sh)", ""]
machine = os.path.join(work, "machine.txt")
if os.path.exists(machine):
    md += ["```", open(machine).read().strip(), "```", ""]

# torch: k processes at once, each on its rank's share (timed windows started together: --start-at); the
# node rate over their common span (cpu_report_common.torch_node), per process = each one's own
torch = common.torch_groups(work)
report["torch"] = {k: rows for k, rows in torch.items()}


def torch_node(k):
    return common.torch_node(torch.get(k), k)[0]


ranks = load("ranks.json") or []
default = [r for r in ranks if r["kernel"] == "adamw" and r["grad"] == "bf16" and r["tuning"] == "default"
           and r["dma"] == "off"]
rows = []
for r in default:
    k = int(r["ranks"])
    tn = torch_node(k)
    rows.append([k, r["threads/rank"], r["Gparam/s"], r["GB/s"], r["% bound"], r["vs 1 process"], r["node ms"],
                 r["sim ms"], r["sim error %"], f"{tn:.3f}" if tn else "-",
                 f"{num(r['Gparam/s']) / tn:.2f}x" if tn else "-", r["bound GB/s"]])
md.append(table("Node: AdamW, bf16 gradient and copy, k processes at once (goal: >= 90% of 1 process; "
                "the simulator within 5%)",
                ["k", "threads/rank", "node Gparam/s", "GB/s", "% bound (1 process)", "vs 1 process", "node ms",
                 "sim ms", "sim error %", "torch node Gparam/s", "vs torch", "bound GB/s (k processes)"], rows))
report["node_adamw"] = default

rows = []
for r in ranks:
    if r["tuning"] != "default" or r["dma"] != "off":
        continue
    k = int(r["ranks"])
    per = num(r["Gparam/s"]) / k
    tp = torch.get(k)
    tper = statistics.median(x["gparam_per_s"] for x in tp) if tp else None
    rows.append([k, r["kernel"], r["grad"], r["copy"], r["threads/rank"], f"{per:.3f}", r["GB/s"], r["% bound"],
                 f"{tper:.3f}" if tper else "-", f"{per / tper:.2f}x" if tper else "-"])
md.append(table("Every optimizer: per process (node / k) against torch fused CPU AdamW per process, same threads",
                ["k", "optimizer", "grad", "copy", "threads", "Gparam/s per process", "node GB/s", "% bound",
                 "torch AdamW per process", "vs torch"], rows))

ident = load("ranks-identical.json") or []
rows = []
for r in ident:
    k = int(r["ranks"])
    part = next((x for x in default if int(x["ranks"]) == k), None)
    rows.append([k, r["threads/rank"], r["Gparam/s"], r["vs 1 process"], part["Gparam/s"] if part else "-",
                 part["vs 1 process"] if part else "-"])
md.append(table("What lost the throughput first: every rank pinned to the same first cores (before) against "
                "each rank on its share (after), AdamW bf16",
                ["k", "threads/rank", "before: node Gparam/s", "before: vs 1 process", "after: node Gparam/s",
                 "after: vs 1 process"], rows))
report["identical_pinning"] = ident

dma = load("ranks-dma.json") or []
rows = []
for k in sorted({int(r["ranks"]) for r in dma}):
    off = next((num(r["Gparam/s"]) for r in dma if int(r["ranks"]) == k and r["dma"] == "off"), None)
    on = next((r for r in dma if int(r["ranks"]) == k and r["dma"] != "off"), None)
    if off and on:
        rows.append([k, f"{off:.3f}", on["Gparam/s"], on["dma"], f"{off / num(on['Gparam/s']):.3f}x"])
md.append(table("DMA: AdamW bf16 with H2D + D2H copies on GPU 0 during the passes",
                ["k", "Gparam/s alone", "Gparam/s under DMA", "DMA moved", "slowdown"], rows))
report["dma"] = dma

rows = [[r["ranks"], r["tuning"], r["Gparam/s"], r["% bound"], r["rank spread %"]]
        for r in ranks if r["kernel"] == "adamw" and r["grad"] == "bf16" and r["dma"] == "off"]
md.append(table("Variants: AdamW bf16, the tuning over the defaults (block: work-stealing tiles, 0 = the static split; "
                "prefetch: distance in elements)", ["k", "tuning", "node Gparam/s", "% bound", "rank spread %"], rows))
report["variants"] = rows

ops = load("engine-ops.json") or []
rows = [[r["ranks"], r["dma"], r["node ms"], r["Gparam/s"], r["% bound"], r["sim ms"], r["sim error %"]] for r in ops]
md.append(table("The engine's CPU ops of mlp-2b at ratio 0.05 (0.107 B CPU params over the ranks), CPU only",
                ["k", "dma", "node ms", "Gparam/s", "% bound", "sim ms", "sim error %"], rows))
report["engine_ops"] = ops

step = common.engine_step(load("run-2b.json"))
if step:
    med = step["median"]
    t1 = torch_node(1)
    rows = [[step["cpu_elems"], step["threads"], " ".join(f"{x:.3f}" for x in step["gparam_per_s"]), f"{med:.3f}",
             f"{t1:.3f}" if t1 else "-", f"{med / t1:.2f}x" if t1 else "-"]]
    md.append(table("The engine on a real step: mlp-2b, ratio 0.05 (goal: >= 1.1x torch on the same threads)",
                    ["CPU elements", "threads", "Gparam/s steps 2..", "median", "torch (same threads)", "vs torch"],
                    rows))
    report["engine_step"] = dict(step, torch=t1)

with open(out_md, "w") as f:
    f.write("\n".join(md))
with open(out_json, "w") as f:
    json.dump(report, f, indent=1)
