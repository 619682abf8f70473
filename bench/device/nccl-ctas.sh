#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200-x2 from the repo root with .devbin/ carried. Do the NCCL kernels' SMs slow the
# GEMMs beside them? In the 8.05B MLP's GPU-bound steps on two H200s the backward ops ran 1.50-1.78 ms against the
# GEMM table's 1.54, with the all-gather and reduce-scatter always running beside them, and not in step with the SM
# clock (bench/results/2026-11-30-h200x2-clock). NCCL_MAX_CTAS caps the thread blocks (SMs) each collective takes:
# the same runs with 8 and 4 (and 8 with NCCL_MAX_P2P_NCHANNELS=8 for the reduce-scatter's send/recv) against NCCL's default, alternated, each a ratio-0 run of 8 steps with its trace.
# Then OPT-1.3B at world 2 (ratio 0), default against the best cap. About 4 minutes. Output: $OUT/nccl-ctas.tar.gz,
# $OUT/nccl-ctas-summary.txt. CTAS_LIST="3 4 5 6" runs those caps and the default instead.
set -uo pipefail
W=/tmp/nccl-ctas
rm -rf "$W"
. bench/device/device_env.sh
unpack_devbin
chmod +x "$B"/twinflow 2> /dev/null
export NCCL_NVLS_ENABLE=0
S=$OUT/nccl-ctas-summary.txt
{ nvidia-smi --query-gpu=name --format=csv,noheader | head -1; nproc; cat .devbin/COMMIT; } | tee "$S"
pack() { tar czf "$OUT/nccl-ctas.tar.gz" -C "$W" .; }
one() {  # NAME ENV SCENARIO STEPS   (ENV: "default" or VAR=VALUE[,VAR=VALUE])
  local env=()
  [ "$2" != default ] && IFS=, read -r -a env <<< "$2"
  step "$1: $2"
  env "${env[@]}" timeout 200 $B/twinflow launch --nproc-per-node 2 -- run "$3" --ratios 0 --steps "$4" \
    --trace "$W/trace-$1.json" --trace-steps 4 --json "$W/run-$1.json" > "$W/run-$1.log" 2>&1
  echo "$1 ($2) rc $?" | tee -a "$S"
  grep -E "step [0-9]+/" "$W/run-$1.log" | sed -E 's/, loss [^,]*, lr [^,]*//' | tee -a "$S"
  grep -A3 "^summary" "$W/run-$1.log" | tail -1 | tee -a "$S"
  python3 bench/device/clock_vs_ops.py "$W/trace-$1.json" --kinds forward,backward,allgather,reduce_scatter 2>&1 |
    grep -v tenths | tee -a "$S"
  pack
}
M8=scenarios/real/mlp-8b-h200x2.yaml
if [ -n "${CTAS_LIST:-}" ]; then  # CTAS_LIST="3 4 5 6": those caps and the default, alternated, the 8.05B MLP only
  for c in $CTAS_LIST; do one "8b-ctas$c" "NCCL_MAX_CTAS=$c" $M8 8; done
  one 8b-default default $M8 8
  ls -la "$OUT"
  exit 0
fi
one 8b-default-a default $M8 8
one 8b-ctas8-a NCCL_MAX_CTAS=8 $M8 8
one 8b-ctas4 NCCL_MAX_CTAS=4 $M8 8
one 8b-ctas8-p2p8 NCCL_MAX_CTAS=8,NCCL_MAX_P2P_NCHANNELS=8 $M8 8
one 8b-default-b default $M8 8
one 8b-ctas8-b NCCL_MAX_CTAS=8 $M8 8
one opt13-default default scenarios/real/opt-1.3b-h100.yaml 8
one opt13-ctas8 NCCL_MAX_CTAS=8 scenarios/real/opt-1.3b-h100.yaml 8
ls -la "$OUT"
