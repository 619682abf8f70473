#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200-x2 from the repo root with .devbin/ carried
# (bench/device/build-for-device.sh makes it). Issues 6 and 20 on two H200s, ZeRO-3: for each of a 2.15B
# and an 8.05B MLP, calibrate (with the workload's GEMM shapes and host footprints) right before `twinflow validate` (measures
# the ratio sweep with the real backend over both GPUs, simulates the same points with the profile just
# measured). The host's CPU rate moved by 13-32% within the 2026-11-24 call
# (bench/results/2026-11-24-h200x2-validate/README.md), so one profile for both sweeps would mix hosts;
# the two profiles side by side are the stability check. Everything lands in $OUT/issue6-h200x2.tar.gz;
# the tables print here. About 8 minutes. STEPS (default 8, validate's own) sets each ratio's step count: with the tail carried,
# steps 3..STEPS-1 are steady, so 8 gives five steady steps, most of them with the speculation holding.
# TRACE_STEPS (default 4) sets how many of each ratio's last steps its trace holds (validate --trace-steps).
# MODELS (default "2b 8b") picks the sweeps and their order; SC_SUFFIX (default -h200x2) the scenarios'
# names, scenarios/real/mlp-MODEL$SC_SUFFIX.yaml (SC_SUFFIX= MODELS=2b: the 2.15B MLP on one GPU). Each calibrate gets its sweep's scenario only
# (its GEMM shapes); FOOTPRINTS=1 adds calibrate --footprints (the CPU rate at the host memory the scenario pins).
# validate measures with its host check on: the run probes the node's CPU rate before every ratio and after the
# last (run --host-probe, ~3 s each), and the table adds host_% and tracked_% per point; each ratio's engine also
# times its CPU pass over its own pages before its first step (run --pages-probe): pages_% and placed_%.
set -uo pipefail
OUT=${OUT:-out/device}
W=/tmp/issue6-h200x2
mkdir -p "$OUT" "$W"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-} NCCL_NVLS_ENABLE=0
B=.devbin
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
pack() { tar czf "$OUT/issue6-h200x2.tar.gz" -C "$W" .; }

step "machine"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2;
  lscpu | grep -E "Model name|NUMA|Socket|Thread"; nvidia-smi topo -m | head -4
  echo "THP: $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
  } | tee "$W/machine.txt"
# meminfo_every S FILE: the host's huge-page coverage and free memory every S seconds (background; killed at exit)
meminfo_every() {
  while sleep "$1"; do
    echo "$(date -u +%T) $(grep -E '^(MemTotal|MemFree|AnonHugePages|Mlocked):' /proc/meminfo | tr -s ' ' | tr '\n' ' ')"
  done >> "$2"
}

for m in ${MODELS:-2b 8b}; do
  step "calibrate before the ${m} sweep"
  timeout 240 $B/twinflow calibrate --out "$W/h200x2-cal-${m}.yaml" --scenario scenarios/real/mlp-${m}${SC_SUFFIX--h200x2}.yaml \
    ${FOOTPRINTS:+--footprints} \
    > "$W/calibrate-${m}.log" 2> "$W/calibrate-${m}.err"
  echo "rc $?"; tail -n 4 "$W/calibrate-${m}.err"; pack

  step "validate: ${m} MLP on 2 GPUs"
  meminfo_every 2 "$W/meminfo-${m}.log" & MEMINFO=$!
  timeout 450 $B/twinflow validate scenarios/real/mlp-${m}${SC_SUFFIX--h200x2}.yaml --profile "$W/h200x2-cal-${m}.yaml" \
    --steps "${STEPS:-8}" \
    --run-json "$W/sweep-${m}.json" --trace "$W/trace-${m}.json" --trace-steps "${TRACE_STEPS:-4}" --json "$W/validate-${m}.json" \
    --svg "$W/validate-${m}.svg" > "$W/validate-${m}.log" 2>&1
  echo "rc $?"; kill "$MEMINFO" 2> /dev/null; grep -E "^(host|pages) probe" "$W/validate-${m}.log"
  sed -n '/^validate: mlp/,$p' "$W/validate-${m}.log"; grep -E "summary" -A14 "$W/validate-${m}.log" | head -16
  pack
done

[ -f "$W/h200x2-cal-2b.yaml" ] && [ -f "$W/h200x2-cal-8b.yaml" ] || { pack; exit 0; }
step "the two profiles' figures side by side (the host's stability within the call)"
python3 - "$W/h200x2-cal-2b.yaml" "$W/h200x2-cal-8b.yaml" <<'PY' | tee "$W/profiles-side-by-side.txt"
import sys, yaml
def leaves(d, path=""):
    for k, v in d.items():
        if isinstance(v, dict) and "value" in v and not isinstance(v["value"], (list, dict)):
            yield path + k, v["value"]
        elif isinstance(v, dict):
            yield from leaves(v, path + k + ".")
a, b = (dict(leaves(yaml.safe_load(open(f)))) for f in sys.argv[1:])
print(f"{'figure':52} {'before 2b':>14} {'before 8b':>14} {'8b/2b':>7}")
for k in a:
    if k in b and isinstance(a[k], (int, float)) and a[k]:
        print(f"{k:52} {a[k]:14.4g} {b[k]:14.4g} {b[k] / a[k]:7.3f}")
PY
pack
ls -la "$OUT"
