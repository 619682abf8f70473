#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow and its libraries). Issue 20's lead on one
# H200: the 8.05B MLP of scenarios/real/mlp-8b-h200x2.yaml (120 layers of 8192, 4096 rows a micro-batch: each rank's
# GEMM shapes on two GPUs) trained on one GPU at ratio 0, its ~310 ms of compute a step in one burst. Traced for 3
# steps, with the SM clock and power every 50 ms: does a layer run slower late in the burst than early? (No NCCL
# peer here, so what shows is the GPU's own.) Everything lands in $OUT/mlp8b-burst.tar.gz.
set -uo pipefail
W=/tmp/mlp8b-burst
. bench/device/device_env.sh
pack() { tar czf "$OUT/mlp8b-burst.tar.gz" -C "$W" .; }
LOG=$W machine_info
sed 's/gpus_per_node: 2/gpus_per_node: 1/; s/profile: h200x2-32core/profile: h200-141gb-16core-calibrated/;
     s/^name: mlp-8b-h200x2/name: mlp-8b-one-h200/' scenarios/real/mlp-8b-h200x2.yaml > "$W/mlp-8b-one-h200.yaml"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv \
  -lms 50 > "$W/clocks.csv" 2>&1 &
SMI=$!
step "8.05B MLP on one GPU, ratio 0, 10 steps"
timeout 300 $B/twinflow run --scenario "$W/mlp-8b-one-h200.yaml" --ratio 0 --steps 10 --json "$W/run-mlp8b.json" \
  --trace "$W/trace-mlp8b.json" --trace-steps 3 > "$W/run-mlp8b.log" 2>&1; echo "rc $?"
grep -E "step [0-9]+/|engine built|error" "$W/run-mlp8b.log" | cut -c1-160
grep -A3 "^summary" "$W/run-mlp8b.log" | tail -n 1 | cut -c1-160
kill $SMI; step done; pack
