#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried (bench/device/
# build-for-device.sh makes it); builds nothing. Issue 14, the decoder on the GPU, in one call:
#  1. tf_cuda_tests' decoder workload and engine tests (one micro-batch against the double reference,
#     bits across ratios, runs and checkpointing, the allocation plan, init.from, the loss on real tokens);
#  2. the transformers oracle: hf_decoder.py make for GPT-2 124M and OPT-125M, `twinflow run` from those
#     weights with --dump-step, hf_decoder.py grads in fp32 and bf16, compare (loss and every gradient);
#  3. 50-step loss curves: ours (AdamW, real tokens, --dump-batches) against hf_decoder.py train on them;
#  4. the tutorial scenario scenarios/gpt-350m-ratio0.3.yaml as written (10 steps on real tokens);
#  5. speed beside the peer in this call: OPT-1.3B at ratios 0 and 1, GPT-2 124M at ratio 0, with
#     tokens/s, MFU, the ratio to the peer and the engine's phases.
# Every step has its own timeout (seconds, estimated in brackets; about 7.5 minutes in all). Logs and
# small JSON files land in $OUT; model files and gradients stay in /tmp/tf-issue14.
set -uo pipefail
OUT=${OUT:-out/issue14}
W=/tmp/tf-issue14
. bench/device/device_env.sh
archive_logs issue14 speed.txt
export TWINFLOW_SOURCE_DIR=$PWD PYTHONUNBUFFERED=1
TF=$B/twinflow
HF=(python3 bench/peer/hf_decoder.py)
# ISSUE14_STEPS="1 2 3" runs only those steps (default: all five).
want() { [[ " ${ISSUE14_STEPS:-1 2 3 4 5} " == *" $1 "* ]]; }

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2;
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } \
  | tee "$LOG/machine.txt"

if want 1; then
step "1. decoder workload and engine tests [~60 s]"
timeout 150 $B/tf_cuda_tests --gtest_filter='DecoderWorkload.*:DecoderEngine.*' > "$LOG/decoder_tests.log" 2>&1
echo "rc $?"; grep -E "^\[  (FAILED|PASSED) |OK \]|Failure|loss gpu|GPU in use" "$LOG/decoder_tests.log" | head -40

fi
if want 2; then
step "2. transformers oracle: the same weights and batch [~90 s]"
for p in gpt2-124m opt-125m; do
  timeout 60 "${HF[@]}" make --preset $p --out $W/$p > "$LOG/$p-make.json" 2>>"$LOG/hf.err"; echo "make $p rc $?"
  timeout 60 $TF run scenarios/real/$p-hf.yaml --steps 1 --dump-step $W/$p.batch --json "$LOG/$p-step1.json" \
    > "$LOG/$p-step1.log" 2>&1; echo "run $p rc $?"; grep -E "memory:|dump:" "$LOG/$p-step1.log"
  cp $W/$p.batch "$LOG/$p-step1.batch" 2>/dev/null
  for dt in fp32 bf16; do
    timeout 60 "${HF[@]}" grads --preset $p --model $W/$p --batch $W/$p.batch --out $W/$p-hf-$dt.safetensors --dtype $dt \
      > "$LOG/$p-hf-grads-$dt.json" 2>>"$LOG/hf.err"; echo "grads $p $dt rc $?"
  done
  # ours against transformers in fp32, with transformers in bf16 against the same fp32 as the noise floor
  timeout 60 "${HF[@]}" compare --ours $W/$p.batch.grads.safetensors --theirs $W/$p-hf-fp32.safetensors \
    --noise $W/$p-hf-bf16.safetensors > "$LOG/$p-compare.json" 2>>"$LOG/hf.err"; echo "compare $p rc $?"
done
python3 - "$LOG" <<'PY'
import json, sys
out = sys.argv[1]
for p in ("gpt2-124m", "opt-125m"):
    try:
        ours = json.load(open(f"{out}/{p}-step1.json"))["points"][0]["steps"][0]["loss"]
    except Exception as e:
        print(p, "no run JSON:", e); continue
    try:
        hf = {dt: json.load(open(f"{out}/{p}-hf-grads-{dt}.json"))["loss"] for dt in ("fp32", "bf16")}
        cmp = json.load(open(f"{out}/{p}-compare.json"))
    except Exception as e:
        print(p, "missing:", e); continue
    print(f"{p}: loss ours {ours:.6f}, transformers fp32 {hf['fp32']:.6f} (rel {abs(ours - hf['fp32']) / hf['fp32']:.2e}), "
          f"transformers bf16 {hf['bf16']:.6f} (rel {abs(hf['bf16'] - hf['fp32']) / hf['fp32']:.2e})")
    rows = cmp["tensors"]
    noise_rel = max(r["noise_max_abs"] / r["max_abs_ref"] for r in rows if r["max_abs_ref"] > 0)
    print(f"  gradients against transformers fp32, max|err| / max|ref| per tensor: ours worst "
          f"{cmp['worst_max_abs_over_max_ref']:.4f}, transformers bf16 worst {noise_rel:.4f}; "
          f"worst ours / transformers-bf16 error {cmp['worst_over_noise']:.2f} over {len(rows)} tensors")
    for r in sorted(rows, key=lambda r: -r["over_noise"])[:4]:
        print(f"    {r['tensor']:48s} ours {r['max_abs']:.3e} bf16 peer {r['noise_max_abs']:.3e} max_ref "
              f"{r['max_abs_ref']:.3e} ratio {r['over_noise']:.2f}")
PY

fi
if want 3; then
step "3. 50-step loss curves against transformers on the same batches [~120 s]"
for p in gpt2-124m opt-125m; do
  timeout 90 $TF run scenarios/real/$p-hf.yaml --steps 50 --dump-batches $W/$p-50.batch --json "$LOG/$p-50.json" \
    > "$LOG/$p-50.log" 2>&1; echo "run $p rc $?"
  for dt in bf16 fp32; do
    timeout 120 "${HF[@]}" train --preset $p --model $W/$p --batches $W/$p-50.batch --steps 50 --dtype $dt \
      > "$LOG/$p-50-hf-$dt.json" 2>>"$LOG/hf.err"; echo "train $p $dt rc $?"
  done
done
python3 - "$LOG" <<'PY'
import json, sys
out = sys.argv[1]
for p in ("gpt2-124m", "opt-125m"):
    try:
        ours = [s["loss"] for s in json.load(open(f"{out}/{p}-50.json"))["points"][0]["steps"]]
        hf = json.load(open(f"{out}/{p}-50-hf-bf16.json"))["losses"]
        hf32 = json.load(open(f"{out}/{p}-50-hf-fp32.json"))["losses"]
    except Exception as e:
        print(p, "missing:", e); continue
    diff = [abs(a - b) for a, b in zip(ours, hf)]
    floor = [abs(a - b) for a, b in zip(hf32, hf)]
    print(f"{p}: step 50 ours {ours[-1]:.4f}, transformers bf16 {hf[-1]:.4f}, fp32 {hf32[-1]:.4f}; max |ours - bf16| "
          f"{max(diff):.4f}, max |fp32 - bf16| (the precision floor) {max(floor):.4f}")
    print("   step  ours     tf-bf16  tf-fp32")
    for i in (0, 4, 9, 19, 29, 39, 49):
        if i < min(len(ours), len(hf), len(hf32)): print(f"   {i + 1:4d}  {ours[i]:.4f}   {hf[i]:.4f}   {hf32[i]:.4f}")
PY

fi
if want 4; then
step "4. the tutorial scenario as written [~90 s]"
timeout 170 $TF run scenarios/gpt-350m-ratio0.3.yaml --json "$LOG/tutorial.json" > "$LOG/tutorial.log" 2>&1
echo "rc $?"; grep -E "memory:|step [0-9]+/|does not fit|error" "$LOG/tutorial.log" | head -16

fi
if want 5; then
step "5. speed beside the peer [~150 s]"
timeout 150 $TF run scenarios/real/opt-1.3b-h100.yaml --ratios 0,1 --steps 8 --json "$LOG/opt-1.3b.json" \
  > "$LOG/opt-1.3b.log" 2>&1; echo "ours opt-1.3b rc $?"
timeout 90 "${HF[@]}" speed --preset opt-1.3b --seq 1024 --micro-batch 8 --steps 10 > "$LOG/peer-opt-1.3b.json" \
  2>>"$LOG/hf.err"; echo "peer opt-1.3b rc $?"
timeout 60 $TF run scenarios/real/gpt2-124m-h100.yaml --steps 10 --json "$LOG/gpt2-124m.json" \
  > "$LOG/gpt2-124m.log" 2>&1; echo "ours gpt2-124m rc $?"
timeout 60 "${HF[@]}" speed --preset gpt2-124m --seq 1024 --micro-batch 8 --steps 12 > "$LOG/peer-gpt2-124m.json" \
  2>>"$LOG/hf.err"; echo "peer gpt2-124m rc $?"
python3 - "$LOG" <<'PY' | tee "$LOG/speed.txt"
import json, statistics, sys
out = sys.argv[1]
def med(xs): return statistics.median(xs) if xs else float("nan")
for ours_file, peer_file in (("opt-1.3b.json", "peer-opt-1.3b.json"), ("gpt2-124m.json", "peer-gpt2-124m.json")):
    try:
        ours = json.load(open(f"{out}/{ours_file}")); peer = json.load(open(f"{out}/{peer_file}"))
    except Exception as e:
        print(ours_file, "missing:", e); continue
    print(f"{ours['scenario']}: peer {peer['tokens_per_s']:.0f} tokens/s ({peer['median_step_ms']:.1f} ms a step)")
    for pt in ours["points"]:
        st = pt["steps"][1:] or pt["steps"]
        tps, mfu = med([s["tokens_per_s"] for s in st]), med([s["mfu"] or float("nan") for s in st])
        ms = lambda k: med([s["kind_ns"][k] for s in st]) / 1e6
        print(f"  ratio {pt['ratio']}: {tps:.0f} tokens/s = {tps / peer['tokens_per_s']:.2f} x the peer, MFU {mfu:.3f}; "
              f"step {med([s['step_ns'] for s in st]) / 1e6:.1f} ms: forward {ms('forward'):.1f}, backward {ms('backward'):.1f}, "
              f"exposed CPU optimizer {med([s['exposed_cpu_optimizer_ns'] for s in st]) / 1e6:.1f}, "
              f"exposed copies {med([s['exposed_copies_ns'] for s in st]) / 1e6:.1f}, gpu_opt {ms('gpu_optimizer'):.1f} ms")
        m = pt.get("memory_check")
        if m: print(f"    memory GPU predicted {m['gpu_predicted'] / 1e9:.2f} GB measured {m['gpu_measured'] / 1e9:.2f} GB "
                    f"({m['gpu_diff_percent']:+.1f}%), pinned {m['host_pinned_predicted'] / 1e9:.2f} / {m['host_pinned_measured'] / 1e9:.2f} GB")
PY
fi
step "done"
ls -la "$LOG"
