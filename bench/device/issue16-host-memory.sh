#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h100-x1 from the repo root with .devbin/ carried
# (bench/device/build-for-device.sh makes it). Issue 16, the host staging rings, on one H100 (< 6 min):
#  1. the engine's ring tests: bits against the functional simulator at ratios 0.3 and 1 with 1 and 2
#     slots (every slot reused), and the engine allocating exactly the allocation plan [~60 s];
#  2. OPT-1.3B (scenarios/real/opt-1.3b-h100.yaml) at ratio 1, 8 steps, with the rings (3 slots, the
#     default) and with full-size staging (--staging-slots 0: the schedule and buffers main runs) [~2 x 100 s];
#  3. a summary: tokens/s (median of steps 2..8) of both, pinned host bytes measured against the
#     allocation plan, the process's RSS after step 1, and host bytes per CPU-side parameter.
# Logs and JSON land in $OUT/issue16-host-memory.tar.gz; the summary in $OUT/issue16-summary.txt.
set -uo pipefail
W=/tmp/tf-issue16
. bench/device/device_env.sh
pack() { tar czf "$OUT/issue16-host-memory.tar.gz" -C "$W" . 2>/dev/null; cp "$W/summary.txt" "$OUT/issue16-summary.txt" 2>/dev/null; true; }
trap pack EXIT

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2; } | tee "$W/machine.txt"

step "1. engine ring tests [~60 s]"
timeout 120 $B/tf_cuda_tests --gtest_filter='CudaEngine.StagingRings*:CudaEngine.AllocatesExactlyTheAllocationPlan' \
  > "$W/cuda_tests.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran" "$W/cuda_tests.log"

for mode in ring full; do
  step "2. OPT-1.3B ratio 1, staging: $mode [~100 s]"
  extra=(--staging-slots 3); [ $mode = full ] && extra=(--staging-slots 0)
  timeout 170 $B/twinflow run scenarios/real/opt-1.3b-h100.yaml --ratio 1 --steps 8 "${extra[@]}" \
    --json "$W/opt-1.3b-$mode.json" > "$W/opt-1.3b-$mode.log" 2>&1; echo "rc $?"
  grep -E "memory:|ratio 1" "$W/opt-1.3b-$mode.log" | head -3; pack
done

step "3. summary"
python3 - "$W" <<'PY' | tee "$W/summary.txt"
import json, statistics, sys
w = sys.argv[1]
for mode in ("ring", "full"):
    try:
        pt = json.load(open(f"{w}/opt-1.3b-{mode}.json"))["points"][0]
    except Exception as e:
        print(mode, "missing:", e); continue
    st = pt["steps"][1:] or pt["steps"]
    tps = statistics.median([s["tokens_per_s"] for s in st])
    step_ms = statistics.median([s["step_ns"] for s in st]) / 1e6
    m, c, hb = pt["memory"], pt.get("memory_check", {}), pt["host_bytes_per_cpu_param"]
    print(f"OPT-1.3B ratio 1, {mode} staging: {tps:.0f} tokens/s, step {step_ms:.1f} ms; CPU segment {hb['cpu_elems']} "
          f"params; host bytes per CPU-side parameter {hb['state']:.2f} (state) + {hb['staging']:.2f} (staging) = "
          f"{hb['total']:.2f}")
    print(f"  host planned {m['host_planned'] / 1e9:.2f} GB (staging {m['host_staging_planned'] / 1e9:.2f} GB), pinned "
          f"{m['host_pinned'] / 1e9:.2f} GB, pageable {m['host_pageable'] / 1e9:.2f} GB, RSS after step 1 "
          f"{c.get('host_rss', 0) / 1e9:.2f} GB; GPU predicted {c.get('gpu_predicted', 0) / 1e9:.2f} GB, measured "
          f"{c.get('gpu_measured', 0) / 1e9:.2f} GB")
PY
step "done"
ls -la "$W"
