#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow and its libraries). Does the GPU slow down
# under sustained load, and do short runs (8 steps, about a second) measure a faster GPU than training sees?
#   1. bench/peer/gemm_sustained.py: one bf16 GEMM back to back for 8 s, its rate against time since the start;
#   2. GPT-350M s 2048 at ratio 0 for 120 steps (~12 s): every step's time (run --json);
#   3. transformers on the same model for 120 steps (hf_decoder.py speed);
# with the SM clock, power and throttle reasons logged every 50 ms (clocks.csv) and the phases' start times
# (marks.txt). Everything lands in $OUT/sustained.tar.gz.
set -uo pipefail
W=/tmp/sustained
. bench/device/device_env.sh
pack() { tar czf "$OUT/sustained.tar.gz" -C "$W" .; }
LOG=$W machine_info
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv \
  -lms 50 > "$W/clocks.csv" 2>&1 &
SMI=$!
sleep 2
step "sustained GEMM"; mark gemm
timeout 60 python3 bench/peer/gemm_sustained.py --seconds 8 --json "$W/gemm-sustained.json" 2>&1 | tee "$W/gemm.log"
mark gemm-end; pack; sleep 3
step "GPT-350M ratio 0, 120 steps"; mark ours
timeout 150 $B/twinflow run --scenario scenarios/real/gpt-350m-h200.yaml --ratio 0 --steps 120 \
  --json "$W/run-350m-120.json" > "$W/run-350m-120.log" 2>&1; echo "rc $?"; mark ours-end
python3 -c "
import json;d=json.load(open('$W/run-350m-120.json'));s=d['points'][0]['steps']
ms=[x['step_ns']/1e6 for x in s]
for a,b in ((1,10),(10,30),(30,60),(60,90),(90,119)):
  v=sorted(ms[a:b]);print(f'steps {a+1}-{b}: median {v[len(v)//2]:.2f} ms')"
pack; sleep 3
step "transformers GPT-350M, 120 steps"; mark peer
timeout 200 python3 bench/peer/hf_decoder.py speed --preset gpt2-350m --seq 2048 --micro-batch 8 --steps 120 \
  > "$W/peer-350m-120.json" 2> "$W/peer-350m-120.err"; echo "rc $?"; mark peer-end
python3 -c "
import json;d=json.load(open('$W/peer-350m-120.json'));ms=d['steps_ms']
for a,b in ((1,10),(10,30),(30,60),(60,90),(90,119)):
  v=sorted(ms[a:b]);print(f'steps {a+1}-{b}: median {v[len(v)//2]:.2f} ms')"
kill $SMI; step done; pack
