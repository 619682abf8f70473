#!/usr/bin/env bash
# Issue 16: the blog's DGX scenarios (OPT-13B on 8 x A100 40GB: 3x; OPT-30B on 8 x H100 80GB: 6x) with the
# decoder terms, no GPU. Usage, from the repo root:
#   bench/results/2026-11-24-decval-dgx/run.sh [path/to/twinflow] [H100 profile with decoder terms] [OUT_DIR]
# The second argument defaults to h100-attention-bench.yaml (the attention rates measured before the
# decval device run); after it, pass its profile (bench/results/2026-11-24-decval-h100/h100-decval.yaml).
# Every output in OUT_DIR (default: this folder).
set -uo pipefail
TF=${1:-build/twinflow}
HERE=bench/results/2026-11-24-decval-dgx
D=${3:-$HERE}
mkdir -p "$D"
H100=${2:-$HERE/h100-attention-bench.yaml}
run() {  # run NAME -- twinflow arguments...: stdout+stderr to NAME.txt, the command line first
  local name=$1; shift 2
  { echo "\$ twinflow $*"; "$TF" "$@" 2>&1; echo "(exit $?)"; } > "$D/$name.txt"
}
python3 "$HERE/derive_profiles.py" "$H100" "$D" || exit 1
for pair in opt-13b-dgx-a100:dgx-a100-40gb opt-30b-dgx-h100:dgx-h100-80gb; do
  sc=${pair%%:*} prof=${pair##*:}
  # micro-batch 1 (the blog gives no batch): compute shrinks 4x, the optimizer's work does not
  sed -E 's/^  micro_batch: [0-9]+/  micro_batch: 1/; s/^name: (.*)/name: \1-mb1/' scenarios/$sc.yaml > "$D/$sc-mb1.yaml"
  for case in held clipped; do
    flag=(); [ $case = clipped ] && flag=(--previous-step-clipped)
    run $sc-plain-$case -- simulate scenarios/$sc.yaml --sweep 0:1:0.05 "${flag[@]}" --json "$D/$sc-plain-$case.json"
    run $sc-decoder-$case -- simulate scenarios/$sc.yaml --profile "$D/$prof-decoder.yaml" --sweep 0:1:0.05 \
      "${flag[@]}" --json "$D/$sc-decoder-$case.json"
    run $sc-mb1-decoder-$case -- simulate "$D/$sc-mb1.yaml" --profile "$D/$prof-decoder.yaml" --sweep 0:1:0.05 \
      "${flag[@]}" --json "$D/$sc-mb1-decoder-$case.json"
  done
done
grep -h "^best feasible" "$D"/*.txt | head -20
