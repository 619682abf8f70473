#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h100-x1 from the repo root with .devbin/ carried
# (bench/device/build-for-device.sh makes it). Issue 6 on one H100: calibrate (with the workloads'
# GEMM shapes), measured ratio sweeps of two model sizes (2.15B and 5.0B MLPs, >= 9 ratios each,
# per-step JSON and a trace per ratio), then calibrate again for the stability check. Compare with
# `twinflow validate SCENARIO --measured sweep.json --profile h100-cal-a.yaml` (no GPU needed).
# Everything lands in $OUT/issue6-h100.tar.gz; the logs' tails print here.
set -uo pipefail
OUT=${OUT:-out/device}
W=/tmp/issue6-h100
mkdir -p "$OUT" "$W"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
B=.devbin
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
pack() { tar czf "$OUT/issue6-h100.tar.gz" -C "$W" .; }
CAL="--scenario scenarios/real/mlp-2b.yaml --scenario scenarios/real/mlp-5b-h100.yaml"

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader; nproc; free -g | head -2;
  lscpu | grep -E "Model name|NUMA|Socket|Thread"; } | tee "$W/machine.txt"

step "calibrate (A)"
timeout 200 $B/twinflow calibrate --out "$W/h100-cal-a.yaml" $CAL > "$W/calibrate-a.log" 2> "$W/calibrate-a.err"
echo "rc $?"; tail -4 "$W/calibrate-a.err"; pack

step "sweep: 2.15B MLP, 10 ratios, 6 steps each"
timeout 170 $B/twinflow run scenarios/real/mlp-2b.yaml --ratios 0,0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.8,1 --steps 6 \
  --json "$W/sweep-2b.json" --trace "$W/trace-2b.json" > "$W/sweep-2b.log" 2>&1
echo "rc $?"; sed -n '/^summary/,$p' "$W/sweep-2b.log"; pack

step "sweep: 5.0B MLP, 9 ratios (0 does not fit), 6 steps each"
timeout 250 $B/twinflow run scenarios/real/mlp-5b-h100.yaml --ratios 0.05,0.1,0.2,0.3,0.4,0.5,0.6,0.8,1 --steps 6 \
  --json "$W/sweep-5b.json" --trace "$W/trace-5b.json" > "$W/sweep-5b.log" 2>&1
echo "rc $?"; sed -n '/^summary/,$p' "$W/sweep-5b.log"; pack

step "calibrate (B), for the stability check"
timeout 120 $B/twinflow calibrate --out "$W/h100-cal-b.yaml" $CAL > "$W/calibrate-b.log" 2> "$W/calibrate-b.err"
echo "rc $?"; tail -2 "$W/calibrate-b.err"; pack
ls -la "$OUT"
