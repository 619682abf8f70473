# Sourced by the device scripts: the output folders, the carried binaries and the step banner.
# Usage: W=/tmp/NAME; . bench/device/device_env.sh   (sets OUT, B, LD_LIBRARY_PATH; defines step)
OUT=${OUT:-out/device}
mkdir -p "$OUT" "$W"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
B=.devbin
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
