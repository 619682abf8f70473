#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200-x2 from the repo root with .devbin/ carried (twinflow, tf_cuda_tests).
# OPT-30B on two H200s (scenarios/real/opt-30b-h200x2.yaml): a model that fits neither the GPUs nor the host alone,
# predicted before it runs. About 5 minutes, plus 2.5 per extra ring order.
# 1. calibrate on both GPUs with the scenario's GEMMs and attention (the profile the run and the prediction use);
#    PROFILE=FILE skips it and uses FILE.
# 2. The memory model's window and the simulator's prediction with that profile.
# 3. launch --nproc-per-node 2 -- run the scenario (ratio auto, speculation auto) once per ring order in ORDERS
#    (default "forward"; "forward backward" is the A/B of run --ring-order; an entry NAME:ORDER:ARGS adds run
#    arguments, commas for spaces, e.g. fwd14:forward:--threads,14; a fourth field another scenario, e.g. the
#    copy without clipping that NOCLIP=1 writes): the engine's set-up by phase,
#    every step, GPU and host memory against the plan; the host's MemAvailable sampled every second. TRACE=1:
#    each rank's trace of the last 3 steps (trace-ORDER.json, .rank1). SAMPLE=1: every thread of the machine
#    sampled every 0.25 s (thread_sampler.py, threads-ORDER.jsonl) and thread_report.py's table of who ran and
#    who waited for a core over the last steps (threads-ORDER.txt).
# 4. Unless SKIP_TESTS=1: tf_cuda_tests on both GPUs.
# Everything in $OUT/opt30b-h200x2.tar.gz; the figures print here.
set -uo pipefail
W=/tmp/opt30b-h200x2
rm -rf "$W"  # a warm machine keeps /tmp between calls: pack only this call's files
. bench/device/device_env.sh
export NCCL_NVLS_ENABLE=0
pack() { pack_small opt30b-h200x2; }
SC=${SC:-scenarios/real/opt-30b-h200x2.yaml}
TF=$B/twinflow
unpack_devbin

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2
  nvidia-smi topo -m | head -4; cat .devbin/COMMIT; } | tee "$W/machine.txt"

PROF=()
if [ -n "${PROFILE:-}" ]; then
  cp "$PROFILE" "$W/h200x2-cal.yaml"
else
  step "calibrate on $(nvidia-smi -L | wc -l) GPUs with $SC"
  timeout 240 $TF calibrate --out "$W/h200x2-cal.yaml" --scenario "$SC" > "$W/calibrate.log" 2> "$W/calibrate.err"
  echo "rc $?"; grep -E "SM clock|decoder attention|host's CPU|rank curve again|rank processes at once" "$W/calibrate.err" |
    cut -c1-200
  tail -n 1 "$W/calibrate.err"; pack
fi
[ -s "$W/h200x2-cal.yaml" ] && PROF=(--profile "$W/h200x2-cal.yaml")

step "prediction"
$TF simulate "$SC" "${PROF[@]}" --fit > "$W/fit.txt" 2>&1; tail -n 1 "$W/fit.txt"
# ORDERS entries: NAME[:ORDER[:RUN_ARGS with commas for spaces[:SCENARIO]]]; ORDER defaults to NAME.
# NOCLIP=1 writes the scenario without clipping beside it (SC's name + -noclip) for a SCENARIO field.
if [ -n "${NOCLIP:-}" ]; then
  sed 's/gradient_clipping: 1.0/gradient_clipping: 0/' "$SC" > "${SC%.yaml}-noclip.yaml"
fi
for spec in ${ORDERS:-forward}; do
  IFS=: read -r name order _ sc <<< "$spec"; order=${order:-$name}; sc=${sc:-$SC}
  $TF simulate "$sc" "${PROF[@]}" --ring-order "$order" --json "$W/predict-$name.json" > "$W/predict-$name.txt" 2>&1
  echo "$name (ring order $order): $(grep -E "^best feasible" "$W/predict-$name.txt")"
done

for spec in ${ORDERS:-forward}; do
  IFS=: read -r name order extra sc <<< "$spec"; order=${order:-$name}; sc=${sc:-$SC}
  extra=(${extra//,/ })
  step "OPT-30B, world 2 (launch), $name: ring order $order ${extra[*]}"
  ( while true; do awk '/MemAvailable/ {print $2}' /proc/meminfo; sleep 1; done ) > "$W/memavail-$name.txt" &
  sampler=$!
  tsampler=
  if [ -n "${SAMPLE:-}" ]; then
    python3 bench/device/thread_sampler.py --out "$W/threads-$name.jsonl" &
    tsampler=$!
  fi
  t0=$(date +%s)
  trace=()
  [ -n "${TRACE:-}" ] && trace=(--trace "$W/trace-$name.json" --trace-steps 3)
  timeout ${RUN_LIMIT:-330} $TF launch --nproc-per-node 2 -- run "$sc" "${PROF[@]}" --ring-order "$order" ${RUN_ARGS:-} \
    "${extra[@]}" "${trace[@]}" --json "$W/run-$name.json" > "$W/run-$name.log" 2>&1
  echo "rc $? after $(( $(date +%s) - t0 )) s"
  kill $sampler 2> /dev/null; wait $sampler 2> /dev/null
  if [ -n "$tsampler" ]; then
    kill $tsampler; wait $tsampler
    python3 bench/device/thread_report.py "$W/threads-$name.jsonl" > "$W/threads-$name.txt" 2>&1
    head -n 18 "$W/threads-$name.txt"
    xz -T2 "$W/threads-$name.jsonl"
  fi
  echo "host MemAvailable minimum: $(sort -n "$W/memavail-$name.txt" | head -1 | awk '{printf "%.1f GB", $1 * 1024 / 1e9}')"
  grep -E "^run:|engine built|step +[0-9]+/|error|failed" "$W/run-$name.log" | cut -c1-220 | head -12
  sed -n '/^summary/,/^step ms/p' "$W/run-$name.log" | tail -n 2 | cut -c1-260
  pack
done

if [ -z "${SKIP_TESTS:-}" ]; then
  step "tf_cuda_tests on $(nvidia-smi -L | wc -l) GPUs"
  timeout 150 $B/tf_cuda_tests > "$W/cuda-tests.log" 2>&1; echo "rc $?"; tail -n 4 "$W/cuda-tests.log"; pack
fi
ls -la "$OUT"
