#!/usr/bin/env bash
# Run ON THE GPU MACHINE (nvidia-h100-x1) from the repo root with .devbin/ carried; about 2 minutes.
# Does carrying the tail slow OPT-1.3B at ratio 1 when every speculation holds? (bench/results/
# 2026-11-24-carry-h100: 21,023 tokens/s carrying, the forward at 85-100 ms instead of 40, against 24,082 not
# carrying in an earlier call.) Gradient clipping 100 (nothing clips), speculation auto, 6 steps, carry off and
# on alternated twice in one call; per run the steady medians (apps/twinflow/steady_steps.h) of step, forward,
# backward, CPU pass and H2D. Summary in $OUT/carry-ratio1.txt, logs in one archive.
set -uo pipefail
W=/tmp/tf-carry-ratio1
. bench/device/device_env.sh
[ -x "$B/twinflow" ] || B=build
archive_logs carry-ratio1 carry-ratio1.txt
SC=scenarios/real/opt-1.3b-h100.yaml
CSC=${SC%.yaml}.clip100.yaml  # beside it: the scenario names its token file relative to itself
sed -E "s/^(  gradient_clipping:) .*/\1 100/" $SC > "$CSC"
for round in 1 2; do
  for carry in off on; do
    step "round $round, carry $carry"
    timeout 80 $B/twinflow run "$CSC" --ratio 1 --steps 6 --carry-tail $carry --json "$LOG/r$round-$carry.json" \
      > "$LOG/r$round-$carry.log" 2>&1
    echo "rc $?"
  done
done
python3 - "$LOG" > "$LOG/carry-ratio1.txt" <<'PY'
import glob, json, os, statistics, sys
print("run        steady  step_ms  fwd_ms  bwd_ms  cpu_busy_ms  h2d_ms  tokens/s  held")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "r*-*.json"))):
    try:
        p = json.load(open(f))["points"][0]
    except Exception as e:
        print(os.path.basename(f), "unreadable:", e); continue
    st = [s for i, s in enumerate(p["steps"]) if s.get("steady", i > 0)]
    m = lambda g: statistics.median([g(s) for s in st]) if st else float("nan")
    print(f"{os.path.basename(f)[:-5]:10s} {len(st):6d} {m(lambda s: s['step_ns']) / 1e6:8.1f} "
          f"{m(lambda s: s['kind_ns'].get('forward', 0)) / 1e6:7.1f} {m(lambda s: s['kind_ns'].get('backward', 0)) / 1e6:7.1f} "
          f"{m(lambda s: s['busy_ns']['cpu']) / 1e6:12.1f} {m(lambda s: s['kind_ns'].get('h2d', 0)) / 1e6:7.1f} "
          f"{m(lambda s: s.get('tokens_per_s') or 0):9.0f} {sum(1 for s in p['steps'] if s.get('speculation_held'))}/{len(p['steps'])}")
PY
rm -f "$CSC"
cat "$LOG/carry-ratio1.txt"
