#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it); builds nothing; about 6 minutes. Issue 15: how many CPU optimizer threads
# a rank runs beside its issuing threads, and at which priority, decided on repeated, interleaved runs: two
# calls of bench/device/issuer-contention.sh (bench/results/2026-11-25-issuer-contention-h100) disagreed
# on 15 against 16 threads at ratio 1 (28.8k vs 26.4k tokens/s in one, 24.3k vs 26.1k in the next: each
# call is a fresh host, and one host's memory rate moved 17% between two runs 20 s apart), so a single
# run per variant decides nothing. ROUNDS rounds (default 3), each: ratio 0, then at ratios 0.4 and 1 every
# variant of VARIANTS (NAME=ARGS separated by ';'; default t16, t15, t16 nice10, t15 nice10), OPT-1.3B
# (seq 1024, micro-batch 8, gradient clipping CLIP: default 100, every speculation holds; 1.0 clips every
# step), STEPS steps (default 12) a run.
# Summary: per variant and ratio the median over the rounds of each run's steady-step median tokens/s,
# x the rounds' ratio 0, and each round's figure; then every run's row (bench/device/run_summary.py), in
# $OUT/threads-ab.txt. DRY=1 prints the commands (any machine).
set -uo pipefail
OUT=${OUT:-out/threads-ab}
W=/tmp/tf-threads-ab
. bench/device/device_env.sh
[ -x "$B/twinflow" ] || B=build
archive_logs threads-ab threads-ab.txt
export TWINFLOW_SOURCE_DIR=$PWD
TF=$B/twinflow
SC=scenarios/real/opt-1.3b-h100.yaml
CSC=${SC%.yaml}.threads-ab.yaml  # beside it: the scenario names its token file relative to itself
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-12}
VARIANTS=${VARIANTS:-"t16=--threads 16;t15=--threads 15;t16n10=--threads 16 --cpu-tuning nice=10;t15n10=--threads 15 --cpu-tuning nice=10"}

machine_info

IFS=';' read -ra variants <<< "$VARIANTS"
names=()
for v in "${variants[@]}"; do names+=("${v%%=*}"); done
sed -E "s/^(  gradient_clipping:) .*/\1 ${CLIP:-100}/" $SC > "$CSC"
for k in $(seq 1 "$ROUNDS"); do
  step "round $k of $ROUNDS"
  x timeout 120 $TF run "$CSC" --ratio 0 --steps "$STEPS" --json "$LOG/k$k-r0.json" > "$LOG/k$k-r0.log" 2>&1
  echo "k$k-r0 rc $?"
  for r in 0.4 1; do
    for i in "${!variants[@]}"; do
      read -ra args <<< "${variants[$i]#*=}"
      name="k$k-r$r-${names[$i]}"
      x timeout 120 $TF run "$CSC" --ratio "$r" --steps "$STEPS" --json "$LOG/$name.json" "${args[@]}" \
        > "$LOG/$name.log" 2>&1
      echo "$name rc $?"
    done
  done
done
rm -f "$CSC"

step "summary"
[ -n "${DRY:-}" ] && exit 0
{
  python3 - "$LOG" "$ROUNDS" "${names[@]}" <<'PY'
import os, statistics, sys
sys.path.insert(0, "bench/device")
from run_summary import load, tokens
log, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"OPT-1.3B, seq 1024, micro-batch 8, clip {os.environ.get('CLIP', '100')}, one H100: per variant the median over the rounds "
      "(each round's figure: its run's steady-step median)")
print(f"{'ratio':>5} {'variant':>8} {'tok/s':>7} {'x_r0':>6}  per round tok/s (x that round's ratio 0)")
for r in ("0.4", "1"):
    for n in names:
        per = []
        for k in range(1, rounds + 1):
            p, b = load(log, f"k{k}-r{r}-{n}"), load(log, f"k{k}-r0")
            if p and b:
                per.append((tokens(p), tokens(p) / tokens(b)))
        if not per:
            continue
        print(f"{r:>5} {n:>8} {statistics.median(t for t, _ in per):7.0f} {statistics.median(x for _, x in per):6.3f}  "
              + " ".join(f"{t:.0f} ({x:.3f})" for t, x in per))
PY
  echo
  rows=()
  for k in $(seq 1 "$ROUNDS"); do
    rows+=(--row "k$k-r0")
    for r in 0.4 1; do for n in "${names[@]}"; do rows+=(--row "k$k-r$r-$n=k$k-r0"); done; done
  done
  python3 bench/device/run_summary.py "$LOG" "${rows[@]}"
} | tee "$LOG/threads-ab.txt"
