#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200 (one H200, 16-core host: the machine of the built-in profile
# h200-141gb-16core-calibrated) from the repo root with .devbin/ carried. One call, about 4 minutes:
#   1. calibrate on GPT-350M, OPT-1.3B and GPT-2 124M, the built-in profile's command: now with the wgmma attention
#      forward as the d-64 default and the GEMM table's SM clock (gpu.gemm_sm_clock_mhz);
#   2. GPT-350M ratio 0, 8 steps, with --metrics-port: the twinflow_gpu_* gauges scraped while it runs;
#   3. GPT-350M ratios 0 and 0.3 and the tutorial (4 steps), validated against the new profile.
# Everything in $OUT/session13-profile.tar.gz.
set -uo pipefail
W=/tmp/session13-profile
rm -rf "$W"
. bench/device/device_env.sh
unpack_devbin
pack() { pack_small session13-profile; }
LOG=$W machine_info

calibrate_h200_builtin; pack

step "GPT-350M with --metrics-port: the gauges while it runs"
$B/twinflow run --scenario scenarios/real/gpt-350m-h200.yaml --profile "$W/h200-cal.yaml" --ratio 0 --steps 30 \
  --metrics-port 9464 > "$W/run-metrics.log" 2> "$W/run-metrics.err" &
RUNPID=$!
for _ in $(seq 1 100); do grep -q "step 12/" "$W/run-metrics.err" 2> /dev/null && break; sleep 0.5; done
python3 -c "import urllib.request as u; t=u.urlopen('http://127.0.0.1:9464/metrics', timeout=5).read().decode()
print(''.join(l + chr(10) for l in t.splitlines() if l.startswith('twinflow_gpu_') or l.startswith('# HELP twinflow_gpu_')))" |
  tee "$W/metrics-gpu.txt"
wait $RUNPID; echo "rc $?"; grep "step 12/" "$W/run-metrics.err"; pack

ours() {  # NAME SCENARIO RATIOS STEPS
  step "ours: $1 (ratios $3, $4 steps)"
  timeout 120 $B/twinflow run --scenario "$2" --profile "$W/h200-cal.yaml" --ratios "$3" --steps "$4" \
    --json "$W/run-$1.json" > "$W/run-$1.log" 2> "$W/run-$1.err"; echo "rc $?"
  grep -A4 "^summary" "$W/run-$1.log" | tail -n +3 | cut -c1-250
  timeout 60 $B/twinflow validate --scenario "$2" --profile "$W/h200-cal.yaml" --measured "$W/run-$1.json" \
    > "$W/validate-$1.log" 2>&1
  grep -E "step time|SM clock|^ *[0-9]\." "$W/validate-$1.log" | cut -c1-250; pack
}
ours 350m scenarios/real/gpt-350m-h200.yaml 0,0.3 8
ours tutorial scenarios/gpt-350m-ratio0.3.yaml 0.3 4
step done; pack
