#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (stripped build/twinflow and its libraries).
# Does the fused GPU AdamW's rate depend on the values it updates? (The MLP's steps ran it 7-8% below the same
# kernel on calibrate's random data, 2026-11-29, bench/results/2026-11-29-h200-gpu-optimizer-values.)
#   1. `twinflow bench --values random,half-zero,subnormal` (the kernel alone, three kinds of data);
#   2. the machine code nvcc makes of __fsqrt_rn and __fdiv_rn for this GPU (the fast path's range checks);
#   3. Nsight Compute on one step kernel of the 2.15B MLP at ratio 0 and of `bench` (random data): instructions,
#      DRAM bytes and time (application replay, clocks left alone).
# Everything lands in $OUT/gpu-opt-values.tar.gz.
set -uo pipefail
W=/tmp/gpu-opt-values
. bench/device/device_env.sh
pack() { tar czf "$OUT/gpu-opt-values.tar.gz" -C "$W" .; }
LOG=$W machine_info

step "bench: the kernel over three kinds of data"
timeout 200 $B/twinflow bench --optimizers adamw,adam,adagrad --grads bf16,fp32 --values random,half-zero,subnormal \
  --n 1048576 --iters 20 --gpu on > "$W/bench-values.log" 2>&1; echo "rc $?"; grep -E "H200" "$W/bench-values.log"; pack

step "SASS of __fsqrt_rn and __fdiv_rn (sm_90)"
cat > "$W/sqrt_div.cu" <<'CU'
__global__ void k_sqrt(float* a) { a[threadIdx.x] = __fsqrt_rn(a[threadIdx.x]); }
__global__ void k_div(float* a, const float* b) { a[threadIdx.x] = __fdiv_rn(a[threadIdx.x], b[threadIdx.x]); }
CU
(cd "$W" && nvcc -arch=sm_90 -cubin -o sqrt_div.cubin sqrt_div.cu && cuobjdump -sass sqrt_div.cubin > sqrt_div.sass) 2>&1 | tail -3
grep -cE "CALL|FCHK|MUFU" "$W/sqrt_div.sass"; pack

NCU_METRICS=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__thread_inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__sass_branch_targets_threads_divergent.sum,sm__cycles_elapsed.avg.per_second
ncu_one() {  # NAME SKIP CMD...
  local name=$1 skip=$2; shift 2
  step "ncu: $name"
  timeout 240 ncu --clock-control none --replay-mode application -k regex:step_kernel --launch-skip "$skip" \
    --launch-count 1 --metrics "$NCU_METRICS" --csv "$@" > "$W/ncu-$name.csv" 2> "$W/ncu-$name.err"
  echo "rc $?"; grep -E "step_kernel" "$W/ncu-$name.csv" | awk -F'","' '{print $(NF-2), $NF}' | head -n 12; pack
}
ncu_one mlp2b 4 $B/twinflow run --scenario scenarios/real/mlp-2b.yaml --ratio 0 --steps 6
ncu_one bench-random 3 $B/twinflow bench --optimizers adamw --grads bf16 --gpu-n 2147745792 --n 1048576 --iters 5 --gpu on
ncu_one bench-half-zero 3 $B/twinflow bench --optimizers adamw --grads bf16 --gpu-n 2147745792 --n 1048576 --iters 5 \
  --gpu on --values half-zero
step done; pack
