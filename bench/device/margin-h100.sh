#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h100-x1 from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it). The GPU memory no buffer names (docs/ARCHITECTURE.md, "Memory a rank has"):
# 1. `twinflow calibrate --quick` measures gpu.context_bytes (a fresh process's context, cuBLAS, streams),
#    gpu.alloc_granularity_bytes and gpu.pinned_host_map_bytes_per_gb (the figures it prints first);
# 2. those figures join the committed calibrated H100 profile (a copy in $W, the rest unchanged);
# 3. OPT-6.7B (scenarios/real/opt-6.7b-h100.yaml) with `ratio: auto` and that profile, 3 steps: the ratio
#    auto chose (with the GPU headroom kept) and the GPU bytes planned (now with the measured context,
#    rounding and mapping) against those measured (cudaMemGetInfo after set-up and after step 1).
# On 2026-11-24 this scenario's auto chose 0.33 and ran out of GPU memory (bench/results/2026-11-24-opt6.7b-h100).
# Without a GPU (a dry run) every step fails with its message and the script still ends with rc 0.
set -uo pipefail
W=/tmp/tf-margin
. bench/device/device_env.sh
archive_logs margin summary.txt
TF=$B/twinflow
SC=scenarios/real/opt-6.7b-h100.yaml
BASE=scenarios/hardware/h100-80gb-16core-calibrated.yaml
KEYS="context_bytes nccl_comm_bytes alloc_granularity_bytes pinned_host_map_bytes_per_gb"
S=$LOG/summary.txt
say() { echo "$*" | tee -a "$S"; }

step "1. calibrate --quick: the memory figures [~2 min]"
rm -f "$W/cal.yaml"
timeout 400 $TF calibrate --quick --out "$W/cal.yaml" --force > "$LOG/calibrate.log" 2> "$LOG/calibrate.err"
say "calibrate rc $?"
grep -E "process memory|cudaMalloc of|pinned host memory" "$LOG/calibrate.err" | tee -a "$S"
[ -f "$W/cal.yaml" ] && cp "$W/cal.yaml" "$LOG/"

step "2. the calibrated H100 profile with the measured memory figures"
PROFILE=$W/h100-margin.yaml
: > "$W/memory-lines.txt"
for k in $KEYS; do
  [ -f "$W/cal.yaml" ] && grep -E "^  $k:" "$W/cal.yaml" >> "$W/memory-lines.txt"
done
if [ -s "$W/memory-lines.txt" ]; then
  awk 'NR==FNR { add = add $0 "\n"; next } { print } /^gpu:/ { printf "%s", add }' "$W/memory-lines.txt" "$BASE" > "$PROFILE"
  cp "$PROFILE" "$LOG/"
  tee -a "$S" < "$W/memory-lines.txt"
else
  say "no memory figures measured: the run uses $BASE as committed (the 512 MiB context estimate)"
  PROFILE=$BASE
fi

step "3. OPT-6.7B, ratio auto, 3 steps [~3 min]"
$TF simulate "$SC" --profile "$PROFILE" --fit > "$LOG/fit.txt" 2>&1; tail -2 "$LOG/fit.txt" | tee -a "$S"
timeout 420 $TF run "$SC" --profile "$PROFILE" --steps 3 --json "$W/auto.json" > "$LOG/auto.log" 2>&1
say "run rc $?"
grep -E "^ratio [0-9.]+:|unnamed GPU memory|memory:|step [0-9]+/|error|failure|warning" "$LOG/auto.log" | tee -a "$S"
[ -f "$W/auto.json" ] && cp "$W/auto.json" "$LOG/" && python3 - "$W/auto.json" <<'PY' | tee -a "$S"
import json, sys
d = json.load(open(sys.argv[1]))
for p in d.get("points", []):
    m, c = p["memory"], p.get("memory_check", {})
    planned, setup, step1 = m["gpu_planned"], m["gpu_used_by_process"], c.get("gpu_measured", 0)
    print(f"ratio {p['ratio']:.4f}: GPU planned {planned} B, allocated by name {m['gpu_allocated']} B, "
          f"measured after set-up {setup} B ({(setup - planned) / 2**20:+.1f} MiB), after step 1 {step1} B "
          f"({(step1 - planned) / 2**20:+.1f} MiB); host pinned {m['host_pinned']} B")
PY
exit 0
