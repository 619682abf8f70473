#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200-x2 from the repo root with .devbin/ carried (twinflow, tf_cuda_tests). Issue 21:
# the decoder across two GPUs and a rank killed under `launch`. About 6 minutes.
# 1. tf_cuda_tests on both GPUs (the two-GPU functional-simulator test runs here, it skips on one GPU).
# 2. The synthetic MLP at world 2 with --verify (bits against the functional simulator), ratios 0, 0.3, 1.
# 3. OPT-1.3B (scenarios/real/opt-1.3b-h100.yaml, seq 1024, micro-batch 8, real tokens), ZeRO-3, ratios 0, 0.3, 1,
#    STEPS (default 6) steps: world 1 with grad_accum 2 against world 2 with grad_accum 1 (the same global batch, the
#    same micro-shards): the final fp32 master weights compared byte for byte (cmp), and tokens/s of each.
# 4. With PEER=1: transformers' OPT-1.3B on one GPU without offload (the speed peer, same call).
# 5. kill -9 of rank 1 while both ranks train: how long `launch` takes to stop, its exit code and its message.
# Everything in $OUT/issue21-h200x2.tar.gz; the figures print here.
set -uo pipefail
W=/tmp/issue21-h200x2
rm -rf "$W"  # a warm machine keeps /tmp between calls: pack only this call's files
. bench/device/device_env.sh
export NCCL_NVLS_ENABLE=0
pack() { pack_small issue21-h200x2; }
SC=scenarios/real/opt-1.3b-h100.yaml
RATIOS=0,0.3,1
STEPS=${STEPS:-6}
M=/tmp/issue21-masters  # 5.3 GB per ratio and world: never under $W, which is packed
mkdir -p "$M"

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2
  nvidia-smi topo -m | head -4; } | tee "$W/machine.txt"

if [ -z "${SKIP_TESTS:-}" ]; then  # SKIP_TESTS=1: not again in a second call
  step "tf_cuda_tests on $(nvidia-smi -L | wc -l) GPUs"
  timeout 120 $B/tf_cuda_tests > "$W/cuda-tests.log" 2>&1; echo "rc $?"; tail -n 4 "$W/cuda-tests.log"; pack
fi

step "synthetic MLP at world 2 against the functional simulator (--verify)"
timeout 90 $B/twinflow launch --nproc-per-node 2 -- run scenarios/real/parity-mlp.yaml --grad-accum 1 \
  --ratios $RATIOS --steps 5 --verify > "$W/verify-mlp-world2.log" 2>&1; echo "rc $?"
grep -vE "^  step " "$W/verify-mlp-world2.log" | tail -n 12; pack

step "OPT-1.3B, world 1, grad_accum 2, ratios $RATIOS"
timeout 150 $B/twinflow run $SC --grad-accum 2 --ratios $RATIOS --steps "$STEPS" --save-master "$M/opt-w1" \
  --json "$W/opt-w1.json" > "$W/opt-w1.log" 2>&1; echo "rc $?"
sed -n '/^summary/,$p' "$W/opt-w1.log" | head -6; grep -E "error|failed" "$W/opt-w1.log" | head -5; pack

step "OPT-1.3B, world 2 (launch), grad_accum 1, ratios $RATIOS"
timeout 150 $B/twinflow launch --nproc-per-node 2 -- run $SC --grad-accum 1 --ratios $RATIOS --steps "$STEPS" \
  --save-master "$M/opt-w2" --json "$W/opt-w2.json" > "$W/opt-w2.log" 2>&1; echo "rc $?"
sed -n '/^summary/,$p' "$W/opt-w2.log" | head -6; grep -E "error|failed|launch|^note" "$W/opt-w2.log" | head -6
for r in 0.000 0.300 1.000; do
  if cmp "$M/opt-w1.r$r" "$M/opt-w2.r$r"; then
    echo "ratio $r: world 1 and world 2 bit-identical ($(stat -c %s "$M/opt-w1.r$r") bytes)"
  else
    echo "ratio $r: the master weights differ"
  fi
done | tee "$W/parity.txt"
rm -rf "$M"; pack
[ -n "${PEER:-}" ] && hf_speed opt1.3b opt-1.3b 1024

kill_rank1 "$SC"
tail -n 5 "$W/kill.log" | tee -a "$W/kill.txt"
pack
ls -la "$OUT"
