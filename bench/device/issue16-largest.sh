#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (bench/device/build-for-device.sh makes it).
# Issue 16's "largest" runs, each predicted by the memory model and the simulator before it runs:
#   bash bench/device/issue16-largest.sh h100   (nvidia-h100-x1) GPT-2 10B at ratio 1, checkpointing
#                                               (scenarios/real/gpt2-10b-h100.yaml), 3 steps [~4 min]
#   bash bench/device/issue16-largest.sh h200   (nvidia-h200) a quick calibrate with the scenario's GEMMs, then
#                                               OPT-13B (scenarios/real/opt-13b-h200.yaml) at RATIOS (default
#                                               "0.6"), 4 steps each [~6 min]
# Host memory is sampled every second (MemAvailable, the minimum is printed): the host, not the GPU, is the
# limit here. Logs in $OUT/issue16-largest-logs.tar.gz, summary in $OUT/largest-summary.txt.
set -uo pipefail
MODE=${1:-h100}
W=/tmp/tf-largest
. bench/device/device_env.sh
archive_logs issue16-largest largest-summary.txt
TF=$B/twinflow
S=$LOG/largest-summary.txt
say() { echo "$*" | tee -a "$S"; }

# sample_host FILE: MemAvailable (kB) every second until killed
sample_host() { while true; do awk '/MemAvailable/ {print $2}' /proc/meminfo; sleep 1; done > "$1"; }
min_avail_gb() { sort -n "$1" | head -1 | awk '{printf "%.1f", $1 / 1048576 * 1.073741824}'; }

# one_run NAME SCENARIO PROFILE_ARGS... -- RUN_ARGS...: predict (simulate), run, print predicted vs measured
one_run() {
  local name=$1 sc=$2; shift 2
  local prof=() args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do prof+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  args=("$@")
  step "$name: prediction"
  $TF simulate "$sc" "${prof[@]}" "${args[@]}" > "$LOG/$name-predict.txt" 2>&1
  grep -E "^[01]\.[0-9]+ " "$LOG/$name-predict.txt" | head -3 | tee -a "$S"
  grep -E "^at ratio" "$LOG/$name-predict.txt" | tee -a "$S"
  step "$name: run"
  sample_host "$LOG/$name-memavail.txt" & local sampler=$!
  local t0=$(date +%s)
  timeout 420 $TF run "$sc" "${prof[@]}" "${args[@]}" --json "$LOG/$name.json" > "$LOG/$name.log" 2>&1
  local rc=$?
  kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
  say "$name: rc $rc, wall $(( $(date +%s) - t0 )) s, host MemAvailable min $(min_avail_gb "$LOG/$name-memavail.txt") GB"
  grep -E "^run:|step [0-9]+/|memory:|host staging|error|Error|summary|median" "$LOG/$name.log" | head -14 | tee -a "$S"
}

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2; } |
  tee "$LOG/machine.txt" | tee -a "$S"

case "$MODE" in
  h100)
    SC=scenarios/real/gpt2-10b-h100.yaml
    $TF simulate "$SC" --fit > "$LOG/fit.txt" 2>&1; grep -E "^fits|^fit:" "$LOG/fit.txt" | tee -a "$S"
    one_run gpt2-10b-r1 "$SC" --
    ;;
  h200)
    SC=scenarios/real/opt-13b-h200.yaml
    step "calibrate --quick with the scenario's GEMMs"
    timeout 200 $TF calibrate --quick --scenario "$SC" --out "$LOG/h200-cal.yaml" --force > "$LOG/calibrate.log" 2>&1
    say "calibrate rc $?"
    PROF=()
    [ -s "$LOG/h200-cal.yaml" ] && PROF=(--profile "$LOG/h200-cal.yaml")
    $TF simulate "$SC" "${PROF[@]}" --fit > "$LOG/fit.txt" 2>&1; grep -E "^fits|^fit:" "$LOG/fit.txt" | tee -a "$S"
    for r in ${RATIOS:-0.6}; do one_run "opt-13b-r$r" "$SC" "${PROF[@]}" -- --ratio "$r"; done
    ;;
  *) echo "usage: $0 h100|h200" >&2; exit 2 ;;
esac
