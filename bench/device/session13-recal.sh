#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200 from the repo root with .devbin/ carried: the built-in profile's calibrate
# (GPT-350M, OPT-1.3B, GPT-2 124M) with both wgmma attention kernels as the d-64 defaults. About 90 s.
set -uo pipefail
W=/tmp/session13-recal
rm -rf "$W"
. bench/device/device_env.sh
for f in "$B"/*.xz; do [ -e "$f" ] && [ ! -e "${f%.xz}" ] && xz -dk "$f" && chmod +x "${f%.xz}"; done
pack() { pack_small session13-recal; }
LOG=$W machine_info
step "calibrate (the built-in profile's command)"
timeout 200 $B/twinflow calibrate --out "$W/h200-cal.yaml" --scenario scenarios/real/gpt-350m-h200.yaml \
  --scenario scenarios/real/opt-1.3b-h100.yaml --scenario scenarios/real/gpt2-124m-h100.yaml \
  > "$W/calibrate.log" 2> "$W/calibrate.err"; echo "rc $?"
grep -E "SM clock|decoder attention|host's CPU|rank curve again" "$W/calibrate.err" | cut -c1-200
tail -n 1 "$W/calibrate.err"; step done; pack
