#!/usr/bin/env python3
"""Samples every thread of the machine from /proc until SIGTERM: who runs, who waits for a core.

Each line of --out is one sample as JSON: {"t": CLOCK_MONOTONIC seconds, "tasks": [[pid, tid, process comm,
thread comm, policy, last cpu, run ns, runqueue-wait ns], ...]} with only the tasks whose run or wait time
moved since the previous sample (the first sample holds every task). run and wait are /proc/PID/task/TID/
schedstat's first two fields (cumulative); policy is stat's field 41 (0 normal, 3 batch, 5 idle). The engine
names its threads (tf-compute, tf-comm, tf-d2h, tf-h2d, tf-cpu for the issuers, tf-cpuN for the CPU
optimizer's workers: core/thread_priority.h), so thread_report.py can tell who took the workers' cores.
"""
import argparse
import json
import os
import signal
import time

stop = False


def on_term(*_):
    global stop
    stop = True


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def sample():
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        pcomm = read(f"/proc/{pid}/comm")
        if pcomm is None:
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            base = f"/proc/{pid}/task/{tid}/"
            st = read(base + "stat")
            ss = read(base + "schedstat")
            if st is None or ss is None:
                continue
            close = st.rfind(")")
            comm = st[st.find("(") + 1:close]
            rest = st[close + 2:].split()  # field 3 (state) is rest[0]
            run_ns, wait_ns = (int(x) for x in ss.split()[:2])
            out.append([int(pid), int(tid), pcomm.strip(), comm, int(rest[38]), int(rest[36]), run_ns, wait_ns])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, default=0.25)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    last = {}
    with open(a.out, "w") as f:
        while not stop:
            t = time.monotonic()
            tasks = sample()
            moved = [x for x in tasks if last.get(x[1]) != (x[6], x[7])]
            last = {x[1]: (x[6], x[7]) for x in tasks}
            f.write(json.dumps({"t": round(t, 4), "tasks": moved}) + "\n")
            f.flush()
            time.sleep(max(0.0, a.interval - (time.monotonic() - t)))


if __name__ == "__main__":
    main()
