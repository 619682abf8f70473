# Sourced by the device scripts: the output folders, the carried binaries and the step banner.
# Usage: W=/tmp/NAME; . bench/device/device_env.sh   (sets OUT, B, LD_LIBRARY_PATH; defines step)
OUT=${OUT:-out/device}
mkdir -p "$OUT" "$W"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
B=.devbin
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
# mark NAME: the time and NAME into $W/marks.txt (a phase's start, to line up with a clocks log)
mark() { echo "$(date -u +%H:%M:%S.%N) $*" >> "$W/marks.txt"; }
# pack_small NAME: $W into $OUT/NAME.tar.gz, leaving out (and naming) every file over 256 MiB: a call returns only
# small files, and gzip over a big one takes the call's time (2026-11-29: 16 GB of master weights, a lost call)
pack_small() {
  local big
  big=$(cd "$W" && find . -type f -size +256M)
  [ -n "$big" ] && echo "pack: left out (over 256 MiB):" $big >&2
  # shellcheck disable=SC2046
  tar czf "$OUT/$1.tar.gz" -C "$W" $(for f in $big; do printf -- '--exclude=%s ' "$f"; done) .
}
# x CMD...: runs it, or prints it with DRY=1 (the scripts' dry run on any machine)
x() { if [ -n "${DRY:-}" ]; then echo "+ $*"; else "$@"; fi; }
# machine_info: the GPU, CPUs, memory, CPU model and kernel into $LOG/machine.txt (after archive_logs)
machine_info() {
  step "machine"
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2
    lscpu | grep -E "^(Model name|Thread|Core|Socket|NUMA node\(s\))"; uname -r; } 2>&1 | tee "$LOG/machine.txt"
}
# archive_logs NAME [SUMMARY]: logs go to $LOG (/tmp/tf-NAME-logs, emptied) and, at exit, into one archive
# $OUT/NAME-logs.tar.gz (a device call returns only a few files), with $LOG/SUMMARY copied beside it.
archive_logs() {
  LOG=/tmp/tf-$1-logs
  ARCHIVE_NAME=$1 ARCHIVE_SUMMARY=${2:-}
  rm -rf "$LOG" && mkdir -p "$LOG"
  trap 'tar czf "$OUT/$ARCHIVE_NAME-logs.tar.gz" -C "$LOG" . 2>/dev/null
        [ -n "$ARCHIVE_SUMMARY" ] && cp "$LOG/$ARCHIVE_SUMMARY" "$OUT/" 2>/dev/null; true' EXIT
}
# torch_at_once K N ITERS RANKS_ERR [TIMEOUT_S]: torch's fused CPU AdamW (bench/peer/torch_adamw.py) in K processes at
# once, process r on rank r's share as `bench --cpu-ranks` printed it into RANKS_ERR ("rank r: T threads on
# CPUs L"; else nproc / K threads on every CPU), N / K elements each, their timed windows started together
# (--start-at, after import, allocation and warm-up), each killed after TIMEOUT_S (60); results in
# $W/torch-kK-rR.json and .log.
torch_at_once() {
  local k=$1 n=$2 iters=$3 err=$4 limit=${5:-60} start r t cpus pids=() shares
  start=$(python3 -c "import time; print(time.time() + 8)")
  mapfile -t shares < <(grep -E "^cpu ranks $k:" -A"$k" "$err" | grep -E "rank [0-9]+:" |
                        sed -E 's/.*: ([0-9]+) threads on CPUs (.*)/\1 \2/')
  for r in $(seq 0 $((k - 1))); do
    read -r t cpus <<< "${shares[$r]:-$(($(nproc) / k)) 0-$(($(nproc) - 1))}"
    timeout "$limit" taskset -c "$cpus" python3 bench/peer/torch_adamw.py --cpu-only --threads "$t" --n $((n / k)) \
      --iters "$iters" --start-at "$start" --json "$W/torch-k$k-r$r.json" > "$W/torch-k$k-r$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  cat "$W"/torch-k"$k"-r*.log
}
# hf_speed NAME PRESET SEQ: transformers' speed on the preset without offload (bench/peer/hf_decoder.py speed,
# micro-batch 8, 10 steps) into $W/peer-NAME.json, its median step and tokens/s printed; calls pack after.
hf_speed() {
  step "peer: $1"
  timeout 120 python3 bench/peer/hf_decoder.py speed --preset "$2" --seq "$3" --micro-batch 8 --steps 10 \
    > "$W/peer-$1.json" 2> "$W/peer-$1.err"; echo "rc $?"
  python3 -c "import json;d=json.load(open('$W/peer-$1.json'));print({k:d[k] for k in ('median_step_ms','tokens_per_s','tflops')})"
  pack
}
# kill_rank1 SCENARIO: two ranks of `run SCENARIO` under launch; once they train, kill -9 the process with RANK=1 and
# time how long launch takes to stop (what it said and whether any rank is left in $W/kill.txt, its log $W/kill.log).
kill_rank1() {
  local sc=$1 launch victim="" p t0 t1 rc
  step "kill -9 of rank 1 under launch"
  $B/twinflow launch --nproc-per-node 2 -- run "$sc" --ratios 0.3 --steps 400 > "$W/kill.log" 2>&1 &
  launch=$!
  for _ in $(seq 1 90); do grep -qE "step [0-9]+/" "$W/kill.log" 2> /dev/null && break; sleep 1; done
  sleep 3
  for p in $(pgrep -f "twinflow run $sc"); do
    tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "RANK=1" && victim=$p
  done
  t0=$(date +%s.%N)
  kill -9 "$victim"; echo "killed rank 1 (pid $victim) at $(date -u +%T.%N)"
  # launch must stop both ranks within its grace period; never let a hang here hold the call
  for _ in $(seq 1 120); do kill -0 "$launch" 2> /dev/null || break; sleep 0.5; done
  kill -0 "$launch" 2> /dev/null && { echo "launch still running 60 s after the kill: stopping it"; kill -9 "$launch"; }
  wait "$launch"; rc=$?
  t1=$(date +%s.%N)
  echo "launch exited rc $rc after $(python3 -c "print(f'{$t1 - $t0:.2f}')") s; twinflow run processes left:" \
    "$(pgrep -fc "twinflow run $sc")" | tee "$W/kill.txt"
  grep -E "^twinflow launch|^rank [0-9]: stopping" "$W/kill.log" | tee -a "$W/kill.txt"
}
# unpack_devbin: the xz-packed binaries carried in $B, unpacked beside their archives where not yet.
unpack_devbin() {
  local f
  for f in "$B"/*.xz; do [ -e "$f" ] && [ ! -e "${f%.xz}" ] && xz -dk "$f" && chmod +x "${f%.xz}"; done
  return 0
}
# calibrate_h200_builtin: the command behind the built-in profile h200-141gb-16core-calibrated (GPT-350M, OPT-1.3B,
# GPT-2 124M) into $W/h200-cal.yaml, its table in $W/calibrate.err; the clock and attention lines printed.
calibrate_h200_builtin() {
  step "calibrate (the built-in profile's command)"
  timeout 240 $B/twinflow calibrate --out "$W/h200-cal.yaml" --scenario scenarios/real/gpt-350m-h200.yaml \
    --scenario scenarios/real/opt-1.3b-h100.yaml --scenario scenarios/real/gpt2-124m-h100.yaml \
    > "$W/calibrate.log" 2> "$W/calibrate.err"; echo "rc $?"
  grep -E "SM clock|decoder attention|host's CPU|rank curve again" "$W/calibrate.err" | cut -c1-200
  tail -n 1 "$W/calibrate.err"
}
