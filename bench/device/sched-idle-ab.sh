#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200-x2 from the repo root with .devbin/ carried (issue 20). The step boundary: on two
# H200s the next step's first op started 2-14 ms after the GPU's last op whenever the CPU pass ran across the
# boundary (bench/results/2026-11-28-h200x2-pages, call J), time the simulator does not have. Are the host's threads
# waiting for a core behind the CPU optimizer's workers (nice 10 shortens the wait, it does not end it)? The same
# MLP on both GPUs, the workers at nice 10 against nice 10 in the idle scheduling class (SCHED_IDLE: a waking
# thread of the normal class takes the core at once), ROUNDS interleaved rounds of RATIOS (ratio 0 once, the
# reference). Each run's steady step time, its CPU pass's time (rank 0's JSON) and its boundary gaps
# (bench/device/step_boundary.py on its trace). MODEL (default 2b), ROUNDS (2), RATIOS ("0.2 0.5 1"), STEPS (8).
# About 2.5 minutes for the defaults. On one GPU (nvidia-h200, the whole host for one rank): NPROC=1 and
# SCENARIO=scenarios/real/mlp-2b.yaml.
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT/ab"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
B=.devbin
M=${MODEL:-2b}
SCENARIO=${SCENARIO:-scenarios/real/mlp-$M-h200x2.yaml}
VARIANTS=${VARIANTS:-"nice10=nice=10,idle=0;idle=nice=10,idle=1"}

run_one() {  # NAME TUNING RATIO ROUND
  local tag="$1-r$3-$4"
  timeout 150 $B/twinflow launch --nproc-per-node "${NPROC:-2}" -- run "$SCENARIO" --ratio "$3" \
    --steps "${STEPS:-8}" --cpu-tuning "$2" --json "$OUT/ab/run-$tag.json" --trace "$OUT/ab/trace-$tag.json" \
    --trace-steps 4 > "$OUT/ab/run-$tag.log" 2>&1
  echo "$tag rc $? $(grep -A3 '^summary' "$OUT/ab/run-$tag.log" | tail -1 | awk '{print "step_ms", $3, "cpu_opt_ms", $10}')"
}

echo "=== ratio 0, the reference ($(date -u +%T))"
run_one ref "default" 0 1
IFS=';' read -ra VS <<< "$VARIANTS"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for ratio in ${RATIOS:-0.2 0.5 1}; do
    for v in "${VS[@]}"; do
      echo "=== round $round ratio $ratio ${v%%=*} ($(date -u +%T))"
      run_one "${v%%=*}" "${v#*=}" "$ratio" "$round"
    done
  done
done
echo "=== the boundary gaps (rank 0) ($(date -u +%T))"
python3 bench/device/step_boundary.py "$OUT"/ab/trace-*.json --json "$OUT/ab/boundaries.json" | tee "$OUT/ab/boundaries.txt"
echo "=== steady step times (rank 0, median of the steady steps)"
python3 - "$OUT/ab" <<'PY' | tee "$OUT/ab/steps.txt"
import glob, json, os, statistics, sys
sys.path.insert(0, "bench/device")
from run_summary import med  # the median over a run's steady steps
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "run-*.json"))):
    d = json.load(open(f))
    p = d["points"][0]
    name = os.path.basename(f)[4:-5]
    variant, rest = name.split("-r", 1)
    ratio, rnd = rest.rsplit("-", 1)
    ms = med(p, lambda s: s["step_ns"]) / 1e6
    cpu = med(p, lambda s: s["kind_ns"].get("cpu_optimizer", 0)) / 1e6
    rows.setdefault((float(ratio), variant), []).append((int(rnd), ms, cpu, d["cpu_tuning"]))
print(f"{'ratio':>5} {'variant':8} {'step ms per round':28} {'median':>8} {'cpu pass ms per round':28}")
for (ratio, variant), rs in sorted(rows.items()):
    rs.sort()
    print(f"{ratio:5.2f} {variant:8} {' '.join(f'{r[1]:8.2f}' for r in rs):28} {statistics.median(r[1] for r in rs):8.2f} "
          f"{' '.join(f'{r[2]:8.2f}' for r in rs):28}  {rs[0][3]}")
PY
tar czf "$OUT/sched-idle-ab.tar.gz" -C "$OUT" ab && rm -rf "$OUT/ab"
echo "=== end ($(date -u +%T))"
