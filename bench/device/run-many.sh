#!/usr/bin/env bash
# Run ON THE GPU MACHINE: several device scripts in one call, each with its own output folder, each
# packed into one archive in $OUT (a call returns only a few files).
# Usage: bash bench/device/run-many.sh 'NAME=ENV... bench/device/a.sh' 'bench/device/b.sh' ...
#   each argument is a command line; NAME is the script's basename without .sh (plus a counter).
set -uo pipefail
OUT=${OUT:-out/many}
mkdir -p "$OUT"
i=0
for cmd in "$@"; do
  i=$((i + 1))
  script=$(printf '%s\n' $cmd | grep -m1 '\.sh$')
  name="$i-$(basename "${script:-cmd}" .sh)"
  dir=/tmp/tf-many/$name
  rm -rf "$dir" && mkdir -p "$dir"
  echo; echo "##### $name: $cmd ($(date -u +%H:%M:%S))"
  OUT=$dir bash -c "$cmd" > "$dir/console.log" 2>&1
  echo "rc $?"
  tail -n "${TAIL_LINES:-40}" "$dir/console.log"
  tar czf "$OUT/$name.tar.gz" -C "$dir" . 2>/dev/null
done
echo; echo "##### done ($(date -u +%H:%M:%S))"
