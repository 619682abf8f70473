#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried; about 3 minutes.
# Issue 16's loss curve of OPT-6.7B on token data: scenarios/real/opt-6.7b-h100.yaml (seq 1024, micro-batch 4,
# checkpointing, clip 1.0, real GPT-2 tokens, `ratio: auto`) for STEPS steps (default 100) with a short
# linear warm-up (WARMUP steps, default 20, to the optimizer's lr 1e-4) instead of the scenario's 91,553-step
# OPT-paper warm-up, which leaves the lr near 0 for any run that fits a device call. A copy of the scenario
# beside it carries the change (its token file is relative to it). Results in $OUT: the run's JSON,
# loss.csv (step, loss, grad_norm, lr, tokens/s), the curve (run --loss-svg), summary.txt; the log in one archive.
set -uo pipefail
W=/tmp/tf-opt67-loss
. bench/device/device_env.sh
[ -x "$B/twinflow" ] || B=build
archive_logs opt67-loss summary.txt
STEPS=${STEPS:-100}
WARMUP=${WARMUP:-20}
SC=scenarios/real/opt-6.7b-h100.yaml
CSC=${SC%.yaml}.loss.yaml
sed -E "s/warmup_num_steps: [0-9]+/warmup_num_steps: $WARMUP/" $SC > "$CSC"
step "OPT-6.7B, ratio auto, $STEPS steps, warm-up $WARMUP steps"
timeout 560 $B/twinflow run "$CSC" --steps "$STEPS" --json "$OUT/opt-6.7b-loss.json" --loss-svg "$OUT/opt-6.7b-loss.svg" > "$LOG/run.log" 2>&1
echo "rc $?" | tee "$LOG/summary.txt"
rm -f "$CSC"
grep -E "^ratio |^memory:|auto" "$LOG/run.log" | head -5 | tee -a "$LOG/summary.txt"
python3 - "$OUT/opt-6.7b-loss.json" "$OUT/loss.csv" <<'PY' | tee -a "$LOG/summary.txt"
import json, sys
try:
    p = json.load(open(sys.argv[1]))["points"][0]
except Exception as e:
    sys.exit(f"no run JSON: {e}")
with open(sys.argv[2], "w") as f:
    f.write("step,loss,grad_norm,lr,tokens_per_s\n")
    for s in p["steps"]:
        f.write(f"{s['step']},{s['loss']},{s['grad_norm']},{s['lr']},{s.get('tokens_per_s')}\n")
st = p["steps"]
for k in (1, 10, 20, 50, len(st)):
    if k <= len(st):
        s = st[k - 1]
        print(f"step {s['step']}: loss {s['loss']:.4f}, grad norm {s['grad_norm']}, lr {s['lr']:.3g}")
PY
