#!/usr/bin/env bash
# Run ON THE GPU MACHINE nvidia-h200 from the repo root with .devbin/ carried: the built-in profile's calibrate
# (GPT-350M, OPT-1.3B, GPT-2 124M) with both wgmma attention kernels as the d-64 defaults. About 90 s.
set -uo pipefail
W=/tmp/session13-recal
rm -rf "$W"
. bench/device/device_env.sh
unpack_devbin
pack() { pack_small session13-recal; }
LOG=$W machine_info
calibrate_h200_builtin
step done; pack
