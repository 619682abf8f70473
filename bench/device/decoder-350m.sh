#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repo root with .devbin/ carried (twinflow, bench_decoder_kernels and their
# libraries). Where the decoder stands against the speed bar (PyTorch without offload) at the ZeRO-Offload++
# tutorial's shape (GPT-350M, seq 2048) and at OPT-1.3B's, all in one call:
#   1. bench_decoder_kernels: every decoder kernel at GPT-2-124M, OPT-1.3B and GPT-350M s 2048 shapes;
#   2. the attention peer: torch's causal SDPA (flash, cuDNN, efficient) at the same shapes;
#   3. scenarios/real/gpt-350m-h200.yaml at ratios 0 and 0.3 (traced: the last step's ops), then transformers'
#      speed on the same model, batch and sequence (hf_decoder.py speed);
#   4. OPT-1.3B at ratio 0 (scenarios/real/opt-1.3b-h100.yaml with this machine's built-in profile), then its peer.
# Everything lands in $OUT/decoder-350m.tar.gz.
set -uo pipefail
W=/tmp/decoder-350m
. bench/device/device_env.sh
pack() { tar czf "$OUT/decoder-350m.tar.gz" -C "$W" .; }
LOG=$W machine_info
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  | tee -a "$W/machine.txt"
export PYTHONUNBUFFERED=1

step "bench_decoder_kernels"; timeout 150 $B/bench_decoder_kernels > "$W/bench-kernels.log" 2>&1; echo "rc $?"
grep -E "^[a-z]|attention" "$W/bench-kernels.log"; pack
step "attention peer (torch SDPA)"; timeout 150 python3 bench/peer/sdpa_attention.py --json "$W/sdpa.json" \
  > "$W/sdpa.log" 2>&1; echo "rc $?"; cat "$W/sdpa.log" | tail -n 12; pack

step "GPT-350M s 2048 mb 8, ratios 0 and 0.3"
timeout 240 $B/twinflow run --scenario scenarios/real/gpt-350m-h200.yaml --ratios 0,0.3 --steps 8 \
  --json "$W/run-350m.json" --trace "$W/trace-350m.json" > "$W/run-350m.log" 2>&1; echo "rc $?"
grep -E "tokens/s|^summary|error" "$W/run-350m.log" | tail -n 8 | cut -c1-200; pack
step "peer GPT-350M"; timeout 150 python3 bench/peer/hf_decoder.py speed --preset gpt2-350m --seq 2048 --micro-batch 8 \
  --steps 10 > "$W/peer-350m.json" 2> "$W/peer-350m.err"; echo "rc $?"
python3 -c "import json;d=json.load(open('$W/peer-350m.json'));print({k:d[k] for k in ('median_step_ms','tokens_per_s','tflops')})"
tail -n 2 "$W/peer-350m.err"; pack

step "OPT-1.3B s 1024 mb 8, ratio 0"
timeout 200 $B/twinflow run --scenario scenarios/real/opt-1.3b-h100.yaml --profile h200-141gb-16core --ratio 0 --steps 8 \
  --json "$W/run-opt1.3b.json" --trace "$W/trace-opt1.3b.json" > "$W/run-opt1.3b.log" 2>&1; echo "rc $?"
grep -E "tokens/s|error" "$W/run-opt1.3b.log" | tail -n 3 | cut -c1-200; pack
step "peer OPT-1.3B"; timeout 150 python3 bench/peer/hf_decoder.py speed --preset opt-1.3b --seq 1024 --micro-batch 8 \
  --steps 10 > "$W/peer-opt1.3b.json" 2> "$W/peer-opt1.3b.err"; echo "rc $?"
python3 -c "import json;d=json.load(open('$W/peer-opt1.3b.json'));print({k:d[k] for k in ('median_step_ms','tokens_per_s','tflops')})"
step done; pack
