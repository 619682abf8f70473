#!/usr/bin/env python3
"""Who ran and who waited for a core, from thread_sampler.py's samples.

The window is the last --last seconds before the CPU optimizer's workers (tf-cpuN) last ran (the steady steps
of a run), or --from/--to (CLOCK_MONOTONIC seconds). Prints, per group of threads (process, thread name with
its digits folded, scheduling class): CPU seconds, average cores and runqueue wait; then a time series of
--bucket seconds: the workers' cores running and waiting, and the three normal-class threads that ran most
while the workers waited. A worker in the idle class waits whenever a normal-class thread wants its core, so
the threads that ran in the buckets where the workers waited most are the ones that took the cores.
"""
import argparse
import collections
import json
import re

POLICY = {0: "normal", 1: "fifo", 2: "rr", 3: "batch", 5: "idle", 6: "deadline"}


def load(path):
    samples = []
    with open(path) as f:
        for line in f:
            try:
                samples.append(json.loads(line))
            except json.JSONDecodeError:
                break  # the sampler was killed mid-line
    return samples


def deltas(samples):
    """[(t0, t1, {tid: (key, run_ns, wait_ns)})] per sample interval."""
    last = {}
    out = []
    prev_t = None
    for s in samples:
        moved = {}
        for pid, tid, pcomm, comm, policy, _cpu, run, wait in s["tasks"]:
            key = (pcomm, re.sub(r"\d+$", "N", comm), POLICY.get(policy, str(policy)))
            if tid in last:
                moved[tid] = (key, run - last[tid][0], wait - last[tid][1])
            last[tid] = (run, wait)
        if prev_t is not None:
            out.append((prev_t, s["t"], moved))
        prev_t = s["t"]
    return out


def is_worker(key):
    return key[1] == "tf-cpuN"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("samples")
    ap.add_argument("--last", type=float, default=20.0)
    ap.add_argument("--from", dest="t_from", type=float)
    ap.add_argument("--to", dest="t_to", type=float)
    ap.add_argument("--bucket", type=float, default=0.5)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    iv = deltas(load(a.samples))
    busy = [t1 for _t0, t1, m in iv if any(is_worker(k) and r > 0 for k, r, _w in m.values())]
    if not busy:
        raise SystemExit("no tf-cpuN thread ran in these samples")
    t_to = a.t_to if a.t_to is not None else busy[-1]
    t_from = a.t_from if a.t_from is not None else t_to - a.last
    win = [x for x in iv if x[0] >= t_from and x[1] <= t_to]
    span = sum(t1 - t0 for t0, t1, _m in win)
    groups = collections.defaultdict(lambda: [set(), 0, 0])
    for _t0, _t1, m in win:
        for tid, (key, run, wait) in m.items():
            g = groups[key]
            g[0].add(tid)
            g[1] += run
            g[2] += wait
    print(f"window {t_from:.2f} .. {t_to:.2f} s ({span:.2f} s sampled)")
    print(f"{'process':<16} {'thread':<18} {'class':<7} {'n':>4} {'cpu_s':>8} {'cores':>6} {'wait_s':>8}")
    for key, (tids, run, wait) in sorted(groups.items(), key=lambda kv: -kv[1][1])[: a.top]:
        print(f"{key[0]:<16.16} {key[1]:<18.18} {key[2]:<7} {len(tids):>4} {run / 1e9:>8.2f} "
              f"{run / 1e9 / span:>6.2f} {wait / 1e9:>8.2f}")
    print(f"\nper {a.bucket} s: workers' cores running / waiting for a core; the normal-class threads that ran most")
    buckets = collections.defaultdict(lambda: [0, 0, collections.Counter(), 0.0])
    for t0, t1, m in win:
        b = buckets[int((t0 - t_from) / a.bucket)]
        b[3] += t1 - t0
        for key, run, wait in m.values():
            if is_worker(key):
                b[0] += run
                b[1] += wait
            elif key[2] == "normal":
                b[2][key] += run
    for i in sorted(buckets):
        run, wait, others, dt = buckets[i]
        if dt <= 0:
            continue
        top = ", ".join(f"{k[0]}/{k[1]} {v / 1e9 / dt:.2f}" for k, v in others.most_common(3))
        print(f"{t_from + i * a.bucket:9.2f}  run {run / 1e9 / dt:5.1f}  wait {wait / 1e9 / dt:5.1f}  {top}")


if __name__ == "__main__":
    main()
