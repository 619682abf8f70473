#!/usr/bin/env bash
# Issue 16, simulator side: every table and figure of README.md, from the commands below (no GPU).
# Usage: bench/results/2026-11-24-sim-issue16/run.sh [path/to/twinflow]   (from the repo root)
set -uo pipefail
TF=${1:-build/twinflow}
D=bench/results/2026-11-24-sim-issue16
run() {  # run NAME -- twinflow arguments...: stdout+stderr to NAME.txt, the command line first
  local name=$1; shift 2
  { echo "\$ twinflow $*"; "$TF" "$@" 2>&1; echo "(exit $?)"; } > "$D/$name.txt"
}
# 1. GPT-2 10B as in the ZeRO-Offload tutorial: one V100 32GB of a DGX-2 (the tutorial's machine)
run gpt2-10b-v100-fit -- simulate scenarios/gpt2-10b-v100.yaml --fit --json "$D/gpt2-10b-v100-fit.json"
run gpt2-10b-v100-auto -- simulate scenarios/gpt2-10b-v100.yaml --ratio auto --json "$D/gpt2-10b-v100-auto.json" \
  --svg "$D/gpt2-10b-v100-auto.svg"
run gpt2-10b-v100-sweep -- simulate scenarios/gpt2-10b-v100.yaml --sweep 0:1:0.1 --csv "$D/gpt2-10b-v100-sweep.csv"
# 2. the same training on our H100 (80 GB, 128 GiB host, 16 cores) and H200 (139.8 GiB, 128 GiB host) machines
for p in h100-80gb-16core-calibrated h200-141gb-16core; do
  run gpt2-10b-$p-fit -- simulate scenarios/gpt2-10b-v100.yaml --profile $p --fit --json "$D/gpt2-10b-$p-fit.json"
done
run gpt2-10b-h100-auto -- simulate scenarios/gpt2-10b-v100.yaml --profile h100-80gb-16core-calibrated --ratio auto \
  --json "$D/gpt2-10b-h100-auto.json" --svg "$D/gpt2-10b-h100-auto.svg"
run gpt2-10b-h200-auto -- simulate scenarios/gpt2-10b-v100.yaml --profile h200-141gb-16core --ratio auto \
  --json "$D/gpt2-10b-h200-auto.json" --svg "$D/gpt2-10b-h200-auto.svg"
# 3. the largest OPT preset that trains on one H200, at issue 14's shape (micro-batch 8, seq 1024, no
#    checkpointing) and at the smallest shape (micro-batch 1 with checkpointing)
run largest-opt-h200-mb8 -- simulate scenarios/real/opt-1.3b-h100.yaml --profile h200-141gb-16core \
  --largest-preset opt- --json "$D/largest-opt-h200-mb8.json"
run largest-opt-h200-ckpt-mb1 -- simulate "$D/decoder-ckpt-mb1.yaml" --profile h200-141gb-16core \
  --largest-preset opt- --json "$D/largest-opt-h200-ckpt-mb1.json"
# 4. the largest decoder that trains on one H100 machine at ratio 1 with activation checkpointing
run largest-decoder-h100-ratio1 -- simulate "$D/decoder-ckpt-mb1.yaml" --largest-preset "" --at-ratio 1 \
  --json "$D/largest-decoder-h100-ratio1.json"
# 5. ratio auto on the two issue-15 scenarios with the calibrated H100 profile (what bench/device/auto-sweep.sh measures)
run opt-1.3b-h100-auto -- simulate scenarios/real/opt-1.3b-h100.yaml --profile h100-80gb-16core-calibrated \
  --ratio auto --json "$D/opt-1.3b-h100-auto.json" --svg "$D/opt-1.3b-h100-auto.svg"
run mlp-2b-h100-auto -- simulate scenarios/real/mlp-2b.yaml --profile h100-80gb-16core-calibrated \
  --ratio auto --json "$D/mlp-2b-h100-auto.json" --svg "$D/mlp-2b-h100-auto.svg"
# 6. the same without speculation (--speculation 0: every CPU update waits for the global norm), to show
#    what the speculated layers' early CPU updates change in the choice
run opt-1.3b-h100-auto-nospec -- simulate scenarios/real/opt-1.3b-h100.yaml --profile h100-80gb-16core-calibrated \
  --ratio auto --speculation 0
run mlp-2b-h100-auto-nospec -- simulate scenarios/real/mlp-2b.yaml --profile h100-80gb-16core-calibrated \
  --ratio auto --speculation 0
