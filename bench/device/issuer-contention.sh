#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it); builds nothing; about 5 minutes. Issue 15: at ratio 0.4 with every
# speculation holding, OPT-1.3B's GPU idles ~15 ms a step (bench/results/2026-11-25-cpuorder-h100,
# held04-window: the window trace shows 2-8 ms gaps before the forward's first layers and 3-5 ms before the
# GPU optimizer, with no traced op ending at the gap's end) while the CPU optimizer's 16 workers fill the
# 16 cores: the engine's issuing threads (one per queue) and CUDA's spinning waits compete with them. Runs
# (OPT-1.3B, seq 1024, micro-batch 8, gradient clipping 100, 14 steps each), alternated:
#   ratio 0 (the base), then at ratios 0.4 and 1 each of VARIANTS (NAME=ARGS entries separated by ';'; by
#   default: default=; block=--cuda-sync block (the waiting threads sleep); nice10=--cpu-tuning nice=10 (the
#   workers yield to a waking issuer); both=both of them; threads15=--threads 15 (one core left free), the
#   16-core host's defaults before core::cpu_optimizer_threads; run with VARIANTS to A/B others), then ratio 0
#   again. Ratio 0.4's first and fourth variants write a 3-step window trace.
# Summary (bench/device/run_summary.py): tokens/s, x ratio 0, step, forward, GPU-idle and CPU pass ms per run,
# and the two windows' gaps, in $OUT/issuer-contention.txt. DRY=1 prints the commands (any machine).
set -uo pipefail
OUT=${OUT:-out/issuer-contention}
W=/tmp/tf-issuer-contention
. bench/device/device_env.sh
[ -x "$B/twinflow" ] || B=build
archive_logs issuer-contention issuer-contention.txt
export TWINFLOW_SOURCE_DIR=$PWD
TF=$B/twinflow
SC=scenarios/real/opt-1.3b-h100.yaml
CSC=${SC%.yaml}.contention.yaml  # beside it: the scenario names its token file relative to itself

machine_info

# point NAME RATIO [ARGS...]: one 14-step run, its JSON in $LOG/NAME.json
point() {
  local name=$1 r=$2
  shift 2
  x timeout 150 $TF run "$CSC" --ratio "$r" --steps 14 --json "$LOG/$name.json" "$@" > "$LOG/$name.log" 2>&1
  echo "$name rc $?"; grep -E "error" "$LOG/$name.log" | head -2
}

VARIANTS=${VARIANTS:-"default=;block=--cuda-sync block;nice10=--cpu-tuning nice=10;both=--cuda-sync block --cpu-tuning nice=10;threads15=--threads 15"}
IFS=';' read -ra variants <<< "$VARIANTS"
names=()
for v in "${variants[@]}"; do names+=("${v%%=*}"); done
sed -E "s/^(  gradient_clipping:) .*/\1 100/" $SC > "$CSC"
step "runs [~250 s]"
point r0-a 0
traces=()
for r in 0.4 1; do
  for i in "${!variants[@]}"; do
    name=${names[$i]}
    read -ra args <<< "${variants[$i]#*=}"
    if [ "$r" = 0.4 ] && { [ "$i" = 0 ] || [ "$i" = 3 ]; }; then
      args+=(--trace "$LOG/r$r-$name-trace3.json" --trace-steps 3)
      traces+=(--trace "$LOG/r$r-$name-trace3.json")
    fi
    point "r$r-$name" $r "${args[@]}"
  done
done
point r0-b 0
rm -f "$CSC"

step "summary"
[ -n "${DRY:-}" ] && exit 0
rows=(--row r0-a --row r0-b=r0-a)
for r in 0.4 1; do
  for v in "${names[@]}"; do rows+=(--row "r$r-$v=r0-a"); done
done
python3 bench/device/run_summary.py "$LOG" "${rows[@]}" "${traces[@]}" \
  --title "OPT-1.3B, seq 1024, micro-batch 8, clip 100, one H100, 14 steps a run; medians of the steady steps" \
  | tee "$LOG/issuer-contention.txt"
