#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h200-x2, or one H200: the kill test then skips) from the repo root with .devbin/
# carried (twinflow, tf_cuda_tests, bench_decoder_kernels and their libraries, xz-packed). One call, about 5 minutes:
#   1. tf_cuda_tests on every GPU (the wgmma forward as the d-64 default, the two-GPU test where there are two);
#   2. bench_decoder_kernels attention: the default forward is the wgmma one on an H200;
#   3. the decoders with it, beside transformers (SDPA, fused AdamW) in the same call: GPT-350M s 2048 (ratios 0 and
#      0.3), OPT-1.3B and GPT-2 124M (ratio 0), 8 steps each, with the GPU telemetry in the summary;
#   4. with two GPUs: kill -9 of rank 1 under launch (OPT-1.3B at world 2): launch must name rank 1 and SIGKILL.
# Everything in $OUT/session13-final.tar.gz; the figures print here.
set -uo pipefail
W=/tmp/session13-final
rm -rf "$W"
. bench/device/device_env.sh
unpack_devbin
export NCCL_NVLS_ENABLE=0
pack() { pack_small session13-final; }
LOG=$W machine_info
GPUS=$(nvidia-smi -L | wc -l)

step "tf_cuda_tests on $GPUS GPU(s)"
timeout 150 $B/tf_cuda_tests > "$W/cuda-tests.log" 2>&1; echo "rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|Failure|NOTE.*wgmma" "$W/cuda-tests.log" | head -n 20; pack

step "bench_decoder_kernels attention"
timeout 50 $B/bench_decoder_kernels attention > "$W/bench.log" 2>&1; echo "rc $?"
grep -E "attention_forward (\(causal\)|wgmma)|attention_backward" "$W/bench.log"; pack

ours() {  # NAME SCENARIO RATIOS
  step "ours: $1 (ratios $3)"
  timeout 150 $B/twinflow run --scenario "$2" --profile h200-141gb-16core-calibrated --ratios "$3" --steps 8 \
    --json "$W/run-$1.json" > "$W/run-$1.log" 2> "$W/run-$1.err"; echo "rc $?"
  grep -A4 "^summary" "$W/run-$1.log" | tail -n +3 | cut -c1-250; grep -E "error" "$W/run-$1.err" | head -3
  timeout 60 $B/twinflow validate --scenario "$2" --profile h200-141gb-16core-calibrated --measured "$W/run-$1.json" \
    > "$W/validate-$1.log" 2>&1
  grep -E "step time|SM clock" "$W/validate-$1.log" | cut -c1-250; pack
}
peer() {  # NAME PRESET SEQ
  step "peer: transformers $1"
  timeout 150 python3 bench/peer/hf_decoder.py speed --preset "$2" --seq "$3" --micro-batch 8 --steps 10 \
    > "$W/peer-$1.json" 2> "$W/peer-$1.err"; echo "rc $?"
  python3 -c "import json;d=json.load(open('$W/peer-$1.json'));print({k:d[k] for k in ('median_step_ms','tokens_per_s','tflops')})"
  pack
}
ours 350m scenarios/real/gpt-350m-h200.yaml 0,0.3
step "GPT-350M once more with --metrics-port: the twinflow_gpu_* gauges as Prometheus reads them"
timeout 120 $B/twinflow run --scenario scenarios/real/gpt-350m-h200.yaml --ratio 0 --steps 6 --metrics-port 9464 \
  --metrics-linger 20 > "$W/run-metrics.log" 2> "$W/run-metrics.err" &
RUNPID=$!
for _ in $(seq 1 100); do grep -q "^summary" "$W/run-metrics.log" 2> /dev/null && break; sleep 1; done
python3 -c "import urllib.request as u; t=u.urlopen('http://127.0.0.1:9464/metrics', timeout=5).read().decode()
print(''.join(l + chr(10) for l in t.splitlines() if l.startswith('twinflow_gpu_')))" | tee "$W/metrics-gpu.txt"
kill $RUNPID 2> /dev/null; wait $RUNPID 2> /dev/null; pack
peer 350m gpt2-350m 2048
ours opt1.3b scenarios/real/opt-1.3b-h100.yaml 0
peer opt1.3b opt-1.3b 1024
ours gpt2-124m scenarios/real/gpt2-124m-h100.yaml 0
peer gpt2-124m gpt2-124m 1024

[ "$GPUS" -ge 2 ] && { kill_rank1 scenarios/real/opt-1.3b-h100.yaml; pack; }
step done; pack
