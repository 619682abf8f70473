"""Helpers of the CPU optimizer device reports (cpu_optimizer_report.py, cpukern_report.py): reading a
work directory's JSON, markdown tables, torch's k processes at once (their timed windows checked for
overlap), the engine's CPU rate on a real step and torch's CPU row of one bench/peer/torch_adamw.py run."""
import glob
import json
import os
import re
import statistics


def load(work, name):
    path = os.path.join(work, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError:
            return None


def num(x):
    try:
        return float(str(x).rstrip("%x"))
    except ValueError:
        return None


def cell(x):
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def table(title, cols, rows, note=None):
    lines = [f"### {title}", ""]
    if note:
        lines += [note, ""]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    if not rows:
        lines.append("| (no data) |" + " |" * (len(cols) - 1))
    return "\n".join(lines) + "\n"


def torch_groups(work, pattern=r"torch-k(\d+)-r\d+\.json"):
    """{k: [cpu rows of the k processes]} from torch_adamw.py's files."""
    out = {}
    for path in sorted(glob.glob(os.path.join(work, "torch-k*-r*.json"))):
        m = re.search(pattern, os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            rows = [r for r in json.load(f)["rows"] if r["where"] == "cpu"]
        out.setdefault(int(m.group(1)), []).extend(rows)
    return out


def torch_node(rows, k):
    """The node rate of k torch processes: with recorded windows, all their timed steps' elements over
    the span from the first window's start to the last one's end, and the fraction of that span during
    which all k ran (1: fully at once); without windows, the sum of the processes' own rates (valid only
    if they overlapped: overlap None says it is unknown)."""
    if not rows or len(rows) != k:
        return None, None
    if all("window_t0" in r for r in rows):
        t0 = min(r["window_t0"] for r in rows)
        t1 = max(r["window_t1"] for r in rows)
        both = min(r["window_t1"] for r in rows) - max(r["window_t0"] for r in rows)
        elems = sum(r["n"] * r["steps_timed"] for r in rows)
        return elems / (t1 - t0) / 1e9, max(0.0, both) / (t1 - t0)
    return sum(r["gparam_per_s"] for r in rows), None


def engine_step(run):
    """The engine's CPU optimizer Gparam/s on each step after the first of a `twinflow run --json`, and
    their median."""
    if not run or not run.get("points"):
        return None
    p = run["points"][0]
    # the run's steady steps (apps/twinflow/steady_steps.h; older runs: all but step 1, which warms up)
    steps = [s for i, s in enumerate(p["steps"]) if s.get("steady", i > 0)]
    rates = [p["cpu_elems"] / s["kind_ns"]["cpu_optimizer"] for s in steps if s["kind_ns"]["cpu_optimizer"] > 0]
    return {"cpu_elems": p["cpu_elems"], "threads": run.get("threads"), "cpu_tuning": run.get("cpu_tuning"),
            "gparam_per_s": rates,
            "median": statistics.median(rates) if rates else 0.0}


def torch_cpu_row(doc):
    """The CPU row of one bench/peer/torch_adamw.py --json document (a list of rows, {"rows": [...]}, or one
    row), or None."""
    if not doc:
        return None
    rows = doc if isinstance(doc, list) else doc.get("rows", [doc])
    return next((x for x in rows if x.get("where") == "cpu"), None)
