#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h100-x1 from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it). Issue 16's headline: OPT-6.7B (does not fit the H100 without offload)
# trained on one H100 with `ratio: auto` (scenarios/real/opt-6.7b-h100.yaml: seq 1024, micro-batch 4,
# checkpointing, clip 1.0, real tokens), then at ratio 1 within the 128 GiB host (speculation off: its
# `auto` budget would fill the host's memory). The predictions (`twinflow simulate` here, no GPU) are
# printed first. Logs in $OUT (one archive).
set -uo pipefail
W=/tmp/tf-opt67
. bench/device/device_env.sh
TF=$B/twinflow
SC=scenarios/real/opt-6.7b-h100.yaml
pack() { tar czf "$OUT/issue16-opt6.7b.tar.gz" -C "$W" . 2>/dev/null; true; }
trap pack EXIT
step "predictions"
$TF simulate $SC --fit > "$W/fit.txt" 2>&1; tail -1 "$W/fit.txt"
$TF simulate $SC --ratio auto > "$W/predict-auto.txt" 2>&1; grep -E "^ratio [0-9.]+:" "$W/predict-auto.txt"
$TF simulate $SC --ratio 1 --speculation 0 > "$W/predict-r1.txt" 2>&1; grep -E "^1\.000 " "$W/predict-r1.txt" | cut -c1-80
step "1. ratio auto, 6 steps [~150 s]"
timeout 260 $TF run $SC --json "$W/auto.json" > "$W/auto.log" 2>&1; echo "rc $?"
grep -E "ratio [0-9.]+:|memory:|step [0-9]+/|error|host staging|speculation:" "$W/auto.log" | head -14
step "2. ratio 1, speculation off, 4 steps [~150 s]"
timeout 230 $TF run $SC --ratio 1 --speculation 0 --steps 4 --json "$W/r1.json" > "$W/r1.log" 2>&1; echo "rc $?"
grep -E "memory:|step [0-9]+/|error|host staging" "$W/r1.log" | head -8
free -g | head -2
