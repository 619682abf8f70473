#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h100-x1 from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it); builds nothing; ~60 s. Which op class of OPT-1.3B's layers runs faster in
# training than the profile says (docs/results.md, "Where OPT-1.3B's compute went"): after the launch fix the
# block's forward is still predicted +10% and the head's backward +21%, all of it in GEMMs whose shapes the
# table measured exactly. One `twinflow run` at ratio 0 (5 steps, its Chrome trace) under Nsight Systems when
# the machine has it: every kernel's GPU time in the training sequence (cuBLAS GEMMs by grid, our kernels by
# name), to set beside h100-decval.yaml's table (GEMMs alone, back to back, ReLU-MLP operands) and kernel
# classes; then `validate --breakdown` on the trace with the committed profile. Without nsys only the trace.
set -uo pipefail
OUT=${OUT:-out/gemmfix}
W=/tmp/tf-gemmfix
. bench/device/device_env.sh
archive_logs gemmfix summary.txt
TF=$B/twinflow
S=scenarios/real/opt-1.3b-h100.yaml
P=bench/results/2026-11-24-decval-h100/h100-decval.yaml
say() { echo "$*" | tee -a "$LOG/summary.txt"; }
step "machine"
say "gemmfix-h100 $(date -u +%F) $(git rev-parse --short HEAD 2>/dev/null || echo '?'): $(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader)"
NSYS=$(command -v nsys || true)
step "1. OPT-1.3B ratio 0, 5 steps, trace${NSYS:+ under nsys}"
RUN=($TF run $S --ratio 0 --steps 5 --trace "$OUT/opt-1.3b-trace.json" --json "$OUT/opt-1.3b-run.json")
if [ -n "$NSYS" ]; then
  timeout 90 "$NSYS" profile -t cuda --cuda-graph-trace=node -o "$W/gemmfix" -f true "${RUN[@]}" > "$LOG/run.log" 2>&1
  say "run under nsys rc $?"
  # per kernel (name, grid) in the steady steps: count, total and mean GPU time; the GEMMs' shapes follow from
  # their grid and the step's order (forward QKV, out, fc1, fc2 per block; the head's logits, dz', dE_head)
  timeout 60 "$NSYS" stats -r cuda_gpu_kern_sum -f csv -o "$LOG/kern" "$W/gemmfix.nsys-rep" > /dev/null 2>&1
  timeout 60 "$NSYS" stats -r cuda_gpu_trace -f csv -o "$LOG/trace" "$W/gemmfix.nsys-rep" > /dev/null 2>&1
  cp "$LOG"/kern*.csv "$OUT/" 2>/dev/null
  gzip -c "$LOG"/trace*.csv > "$OUT/opt-1.3b-kernels.csv.gz" 2>/dev/null
  head -25 "$LOG"/kern*.csv | tee -a "$LOG/summary.txt"
else
  timeout 90 "${RUN[@]}" > "$LOG/run.log" 2>&1
  say "no nsys on this machine: run rc $? (per-layer times only)"
fi
grep -E "^  step [0-9]+/" "$LOG/run.log" | tee -a "$LOG/summary.txt"
step "2. the breakdown against the committed profile"
$TF validate $S --profile $P --breakdown "$OUT/opt-1.3b-trace.json" 2>&1 | tee "$OUT/breakdown.txt" | tee -a "$LOG/summary.txt"
say "done in $SECONDS s"
