#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200-x2 from the repo root with .devbin/ carried (twinflow, tf_cuda_tests).
# Why do the engine's CPU passes run faster than calibrate's rank curve on the same host? OPT-30B's passes ran at
# 6.5-6.7 node Gparam/s (both ranks, 18.9B parameters) where the rank group (calibrate's CpuRankGroup, the same
# CpuSegment code) read 5.6-5.8 on the same machine minutes earlier, short passes or long
# (bench/results/2026-11-30-h200x2-threads). Same machine, one call:
# 1. tf_cuda_tests on both GPUs.
# 2. The rank group on calibrate's segments (2^28 elements, 1 op a rank) and on OPT-30B's own CPU pieces at ratio
#    0.3 (each rank's CPU layers as the engine plans them at world 2; 0.629 does not fit twice beside the bench),
#    each op's rate (--per-layer); and a flat segment of 2^31 elements in 16 ops a rank (calibrate's layout, a
#    footprint between the two).
# 3. OPT-30B, 4 steps, with run --pages-probe: the engine's own pages timed before step 1, then the training passes.
# About 6 minutes. Everything in $OUT/engine-vs-rank-group.tar.gz.
set -uo pipefail
W=/tmp/engine-vs-rank-group
rm -rf "$W"
. bench/device/device_env.sh
export NCCL_NVLS_ENABLE=0
pack() { pack_small engine-vs-rank-group; }
SC=scenarios/real/opt-30b-h200x2.yaml
PROFILE=${PROFILE:-bench/results/2026-11-29-h200x2-opt30b/call1/h200x2-cal.yaml}
TF=$B/twinflow
unpack_devbin
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2
  cat .devbin/COMMIT; } | tee "$W/machine.txt"

if [ -z "${SKIP_TESTS:-}" ]; then
  step "tf_cuda_tests on $(nvidia-smi -L | wc -l) GPUs"
  timeout 150 $B/tf_cuda_tests > "$W/cuda-tests.log" 2>&1; echo "rc $?"; tail -n 3 "$W/cuda-tests.log"; pack
fi

rank_group() {  # NAME ARGS...
  local name=$1; shift
  step "rank group $name: $*"
  timeout 200 $TF bench --cpu-ranks 2 --optimizers adamw --grads bf16 "$@" > "$W/bench-$name.log" 2>&1
  echo "rc $?"; grep -E "^2 +adamw|huge pages|threads on" "$W/bench-$name.log" | cut -c1-200
}
rank_group calibrate-segments --n 268435456 --layers 1 --iters 20
rank_group opt30b-pieces --scenario "$SC" --ratio 0.3 --iters 6 --per-layer
rank_group flat-2e31 --n 2147483648 --layers 16 --iters 6 --per-layer
rank_group calibrate-segments-after --n 268435456 --layers 1 --iters 20
pack

step "OPT-30B, world 2, 4 steps, --pages-probe"
timeout 330 $TF launch --nproc-per-node 2 -- run "$SC" --profile "$PROFILE" --steps 4 --pages-probe \
  --json "$W/run-probe.json" > "$W/run-probe.log" 2>&1
echo "rc $?"
grep -E "pages probe|probe|engine built|step +[0-9]+/|error" "$W/run-probe.log" | cut -c1-220 | head -14
sed -n '/^summary/,/^step ms/p' "$W/run-probe.log" | tail -n 2 | cut -c1-200
pack
ls -la "$OUT"
