#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow and its libraries). After the decoder
# head's fix (bench/results/2026-11-29-h200-decoder-head), one call:
#   1. the ZeRO-Offload++ tutorial as written (scenarios/gpt-350m-ratio0.3.yaml: GPT-350M, seq 2048, fp16,
#      8 x 32 micro-batches a step, ratio 0.3) on this H200, with its committed calibrated profile (MFU's peak);
#   2. a second round of the speed pairs, the peer first this time: GPT-350M s 2048 (ratios 0 and 0.3) and GPT-2
#      124M (ratio 0) beside transformers (hf_decoder.py speed, same model, batch and sequence).
# Everything lands in $OUT/decoder-tutorial.tar.gz.
set -uo pipefail
W=/tmp/decoder-tutorial
. bench/device/device_env.sh
pack() { tar czf "$OUT/decoder-tutorial.tar.gz" -C "$W" .; }
LOG=$W machine_info
export PYTHONUNBUFFERED=1
P=h200-141gb-16core-calibrated

step "the tutorial, 6 steps"
timeout 200 $B/twinflow run --scenario scenarios/gpt-350m-ratio0.3.yaml --profile $P --steps 6 \
  --json "$W/run-tutorial.json" --trace "$W/trace-tutorial.json" > "$W/run-tutorial.log" 2>&1; echo "rc $?"
grep -E "step [0-9]+/|engine built|error" "$W/run-tutorial.log" | cut -c1-160; pack

ours() {  # NAME SCENARIO RATIOS
  step "ours: $1 (ratios $3)"
  timeout 150 $B/twinflow run --scenario "$2" --profile $P --ratios "$3" --steps 8 --json "$W/run-$1.json" \
    > "$W/run-$1.log" 2>&1; echo "rc $?"
  grep -A4 "^summary" "$W/run-$1.log" | tail -n +3 | cut -c1-150; pack
}
hf_speed 350m gpt2-350m 2048; ours 350m scenarios/real/gpt-350m-h200.yaml 0,0.3
hf_speed gpt2-124m gpt2-124m 1024; ours gpt2-124m scenarios/real/gpt2-124m-h100.yaml 0
step done; pack
