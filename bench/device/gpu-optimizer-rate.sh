#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (stripped build/twinflow, tf_cuda_tests and
# their libraries). Why does the engine's fused GPU AdamW run at 3,620-3,710 GB/s inside the MLP's steps on an
# H200 while calibrate times the same kernel at 3,975-3,994 GB/s (and the decoder's steps at ~4,026)?
#   1. the GPU tests (tf_cuda_tests) on these binaries;
#   2. `twinflow bench` of the kernel alone at 2^28 elements (calibrate's size) and at the 2.15B MLP's segment;
#   3. torch's fused AdamW alone and right after a burst of bf16 GEMMs (bench/peer/gemm_then_optimizer.py);
#   4. the 2.15B MLP at ratio 0 on one GPU (its kernel right after its backward), traced;
#   5. OPT-1.3B at ratio 0 (a decoder's kernel right after its backward), traced;
#   6. OPT-13B at ratio 0.45 for 2 steps: the engine's set-up line (initial weights drawn and rounded in one pass).
# The SM and memory clocks, power and throttle reasons are logged every 20 ms throughout (clocks.csv).
# Everything lands in $OUT/gpu-opt-rate.tar.gz (packed after every step).
set -uo pipefail
W=/tmp/gpu-opt-rate
. bench/device/device_env.sh
pack() { tar czf "$OUT/gpu-opt-rate.tar.gz" -C "$W" .; }
LOG=$W machine_info
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 20 > "$W/clocks.csv" 2>&1 &
SMI=$!

step "GPU tests"; mark tests
timeout 150 $B/tf_cuda_tests > "$W/cuda-tests.log" 2>&1; echo "rc $?"; tail -n 6 "$W/cuda-tests.log"; pack

for n in 268435456 2147745792; do
  step "bench: the kernel alone over $n elements"; mark "bench $n"
  timeout 120 $B/twinflow bench --optimizers adamw --grads bf16 --gpu-n $n --n 1048576 --iters 20 \
    > "$W/bench-$n.log" 2>&1; echo "rc $?"; grep -iE "cuda|gpu" "$W/bench-$n.log" | head -n 4
done
pack

step "torch: fused AdamW alone and right after a GEMM burst"; mark torch
timeout 200 python3 bench/peer/gemm_then_optimizer.py --json "$W/gemm-then-opt.json" 2>&1 | tee "$W/gemm-then-opt.log"
pack

run_traced() {  # NAME SCENARIO RATIO STEPS
  step "run $1: $2 at ratio $3"; mark "run $1"
  timeout 240 $B/twinflow run --scenario "$2" --ratio "$3" --steps "$4" --json "$W/run-$1.json" \
    --trace "$W/trace-$1.json" --trace-steps 3 > "$W/run-$1.log" 2>&1
  echo "rc $?"; grep -E "engine built|engine freed" "$W/run-$1.log" | cut -c1-260
  grep -A3 "^summary" "$W/run-$1.log" | cut -c1-160; mark "end $1"; pack
}
run_traced mlp2b scenarios/real/mlp-2b.yaml 0 8
run_traced opt1.3b scenarios/real/opt-1.3b-h100.yaml 0 8
run_traced opt13b scenarios/real/opt-13b-h200.yaml 0.45 2
kill $SMI 2>/dev/null
step done; pack
