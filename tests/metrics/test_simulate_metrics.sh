#!/usr/bin/env bash
# `twinflow simulate --metrics-port`: option errors (exit 2), a busy port (exit 3), a replay at pace 0 that a
# scrape during --metrics-linger sees whole, and --metrics-ranks. Usage: test_simulate_metrics.sh TWINFLOW SOURCE_DIR
set -uo pipefail
tf=$1
src=$2
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
expect() {  # expect CODE TEXT-IN-STDERR -- args...
  local want=$1 text=$2
  shift 3
  "$tf" simulate "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  [ "$got" -eq "$want" ] || fail "simulate $*: exit $got, expected $want: $(tail -2 "$tmp/err")"
  grep -q -- "$text" "$tmp/err" || fail "simulate $*: '$text' not in stderr: $(tail -2 "$tmp/err")"
}
toy="$src/scenarios/toy-zero3-ratio0.4.yaml"
expect 2 "--pace needs --metrics-port" -- "$toy" --pace 2
expect 2 "--metrics-linger needs --metrics-port" -- "$toy" --metrics-linger 5
expect 2 "--metrics-port '70000': expected an integer in \[0, 65535\]" -- "$toy" --metrics-port 70000
expect 2 "drop --functional" -- "$toy" --metrics-port 0 --functional
expect 2 "--pace must be a finite number >= 0" -- "$toy" --metrics-port 0 --pace -1
expect 2 "--metrics-linger -2: allowed -1 (serve until interrupted) or \[0, 1e+06\] seconds" -- "$toy" \
  --metrics-port 0 --metrics-linger -2
expect 2 "--metrics-linger 1e+10: allowed -1" -- "$toy" --metrics-port 0 --metrics-linger 1e10
expect 2 "not a numeric IP address" -- "$toy" --metrics-port 0 --metrics-addr localhost:1
expect 2 "the ratios that fit are" -- "$src/scenarios/h100-single.yaml" --ratio 0.1 --metrics-port 0

# A replay at pace 0 of 3 steps, scraped while it lingers.
"$tf" simulate "$toy" --metrics-port 0 --pace 0 --steps 3 --metrics-linger 30 --metrics-ranks 1 >"$tmp/run" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "replay done" "$tmp/run" && break; sleep 0.1; done
url=$(grep -o 'http://127.0.0.1:[0-9]*/metrics' "$tmp/run" | head -1)
[ -n "$url" ] || fail "no metrics URL printed: $(cat "$tmp/run")"
grep -q "replay done (3 steps)" "$tmp/run" || fail "replay of 3 steps not reported: $(cat "$tmp/run")"
python3 - "$url" >"$tmp/scrape" <<'PY' || fail "scrape of $url failed"
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode(), end="")
PY
grep -q '^twinflow_steps_total{rank="0",scenario="toy-zero3-ratio0.4"} 3$' "$tmp/scrape" || fail "3 steps of rank 0 not in the scrape"
grep -q 'rank="1"' "$tmp/scrape" && fail "--metrics-ranks 1 published rank 1"
# the build and the configuration (metrics::publish_run_config), and no exposure warning on 127.0.0.1
grep -q '^twinflow_build_info{rank="0",scenario="toy-zero3-ratio0.4",version=' "$tmp/scrape" || fail "no build info"
grep -q '^twinflow_config_info{rank="0",scenario="toy-zero3-ratio0.4",precision="fp16",optimizer="adamw",offload_device="cpu"} 1$' \
  "$tmp/scrape" || fail "no config info: $(grep config_info "$tmp/scrape")"
grep -q '^twinflow_config_offload_ratio{rank="0",scenario="toy-zero3-ratio0.4"} 0.4' "$tmp/scrape" ||
  fail "no offload ratio gauge: $(grep config_offload "$tmp/scrape")"
grep -q '^twinflow_config_world_size{rank="0",scenario="toy-zero3-ratio0.4"} 2$' "$tmp/scrape" || fail "no world size gauge"
grep -q "^warning: metrics are served on" "$tmp/run" && fail "an exposure warning on 127.0.0.1"
# A second server on the same port: a runtime failure that says what to do.
port=${url##*:}
port=${port%/metrics}
"$tf" simulate "$toy" --metrics-port "$port" --pace 0 --steps 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 3 ] || fail "a busy port: exit $rc, expected 3"
grep -q "pick another port, or 0 for a free one" "$tmp/err" || fail "busy port message: $(cat "$tmp/err")"
# Bound to every interface: one warning that the endpoint is open to the network.
"$tf" simulate "$toy" --metrics-port 0 --metrics-addr 0.0.0.0 --pace 0 --steps 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] || fail "simulate on 0.0.0.0: exit $rc: $(tail -2 "$tmp/err")"
[ "$(grep -c '^warning: metrics are served on 0\.0\.0\.0:[0-9]*, every network interface' "$tmp/err")" -eq 1 ] ||
  fail "not one exposure warning: $(cat "$tmp/err")"
# SIGINT ends the linger cleanly.
kill -INT "${pids[0]}"
wait "${pids[0]}"
rc=$?
[ "$rc" -eq 0 ] || fail "SIGINT during the linger: exit $rc, expected 0"
grep -q "stopped by signal 2 after 3 steps" "$tmp/run" || fail "no stop message: $(cat "$tmp/run")"
grep -q "served 1 scrape(s)" "$tmp/run" || fail "scrape count not reported: $(cat "$tmp/run")"

echo "simulate metrics: $fails failed"
[ "$fails" -eq 0 ]
