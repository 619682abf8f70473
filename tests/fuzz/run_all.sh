#!/usr/bin/env bash
# Builds Twin-Flow's libFuzzer targets with clang and runs each for SECONDS (default 60; 600 for a long run)
# on its committed seed corpus (tests/fuzz/seeds/TARGET plus the repository's own inputs of that kind),
# TF_FUZZ_JOBS targets at a time. Exit 0 only when every target ran its time with no crash, hang (> 10 s per
# input), out-of-memory or sanitizer report; each target's figures are printed and its log kept.
#
#   tests/fuzz/run_all.sh [SECONDS] [TARGET...]     TARGET: scenario ds_config measured http (default: all)
#
# Environment: TF_FUZZ_BUILD (build directory, default <repo>/build-fuzz), TF_FUZZ_JOBS (build jobs, and how many
# targets fuzz at once; default 2). Each target gets its SECONDS either way: running them side by side on as many
# cores shortens the wall time, not the fuzzing (one libFuzzer process is one thread).
# The working corpus (<build>/fuzz-corpus/TARGET) grows from run to run; findings land in
# <build>/fuzz-artifacts/TARGET/ and become test cases.
set -euo pipefail

secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(scenario ds_config measured http)
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${TF_FUZZ_BUILD:-$src/build-fuzz}
jobs=${TF_FUZZ_JOBS:-2}
case $secs in '' | *[!0-9]*) echo "run_all.sh: SECONDS must be a whole number, got '$secs'" >&2; exit 2 ;; esac

if ! command -v clang++ > /dev/null; then
  echo "run_all.sh: clang++ is needed (libFuzzer); install clang" >&2
  exit 2
fi
if [ ! -f "$build/build.ninja" ]; then
  mkdir -p "$build"
  CC=clang CXX=clang++ cmake -S "$src" -B "$build" -G Ninja -DTWINFLOW_FUZZ=ON -DTWINFLOW_CUDA=OFF \
    -DTWINFLOW_BUILD_TESTS=OFF -DTWINFLOW_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$build/configure.log" 2>&1 ||
    { cat "$build/configure.log" >&2; exit 2; }
fi
nice cmake --build "$build" -j "$jobs" --target $(printf 'tf_fuzz_%s ' "${targets[@]}") > "$build/fuzz-build.log" 2>&1 ||
  { tail -40 "$build/fuzz-build.log" >&2; exit 2; }

# What each target reads beside its committed seeds, its dictionary and its largest input.
extra_inputs() {
  case $1 in
    scenario) ls "$src"/scenarios/*.yaml "$src"/scenarios/real/*.yaml "$src"/scenarios/hardware/*.yaml ;;
    ds_config) ls "$src"/tests/ds_configs/*.json "$src"/tests/ds_configs/*.hjson "$src"/scenarios/ds_config/*.json ;;
    *) ;;
  esac
}
dict_of() { case $1 in scenario) echo scenario.dict ;; *) echo "$1.dict" ;; esac; }
max_len_of() { case $1 in http) echo 2048 ;; *) echo 4096 ;; esac; }

# One target: its corpus, its run, then its figures line in <build>/fuzz-logs/TARGET.summary (its exit code and
# findings, which the summary loop below reads).
fuzz_one() {
  local t=$1
  local bin="$build/tests/fuzz/tf_fuzz_$t" corpus="$build/fuzz-corpus/$t" artifacts="$build/fuzz-artifacts/$t/"
  local log="$build/fuzz-logs/$t.log" rc
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  rm -f "$build/fuzz-logs/$t.summary"
  extra_inputs "$t" | while read -r f; do cp -f "$f" "$corpus/"; done
  set +e
  "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len_of "$t")" \
    -dict="$src/tests/fuzz/$(dict_of "$t")" -artifact_prefix="$artifacts" -print_final_stats=1 \
    "$corpus" "$src/tests/fuzz/seeds/$t" > "$log" 2>&1
  rc=$?
  set -e
  local runs rate rss cov ft corp found
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corp=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  found=$(find "$artifacts" -type f | wc -l)
  echo "$t: ${secs} s, ${runs:-?} runs (${rate:-?}/s), cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}, peak RSS ${rss:-?} MB, findings $found, exit $rc" \
    > "$build/fuzz-logs/$t.summary"
}

# TF_FUZZ_JOBS targets at a time; each line is printed in target order once all have ended.
status=0
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done  # a slot: one of them ended
  fuzz_one "$t" &
done
wait || true
for t in "${targets[@]}"; do
  cat "$build/fuzz-logs/$t.summary" 2> /dev/null || echo "$t: did not run to its end (see $build/fuzz-logs/$t.log)"
  if ! grep -qs 'findings 0, exit 0$' "$build/fuzz-logs/$t.summary"; then
    status=1
    grep -E "ERROR|SUMMARY|==[0-9]+==|runtime error|Test unit written" "$build/fuzz-logs/$t.log" | head -20 >&2 || true
  fi
done
echo "logs: $build/fuzz-logs/"
exit $status
