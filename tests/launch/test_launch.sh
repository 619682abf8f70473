#!/bin/sh
# `twinflow launch` end to end: ranks get their variables, a failing rank fails the launch and is named.
set -u
TF="$1"
fail() { echo "FAIL: $*"; exit 1; }

"$TF" launch --nproc-per-node 3 -- sh -c 'test "$WORLD_SIZE" = 3 && exit 0' || fail "3 ranks with WORLD_SIZE=3 should exit 0"

"$TF" launch --nproc-per-node 2 --master-port 29777 -- sh -c \
  'test "$LOCAL_WORLD_SIZE" = 2 && test "$MASTER_ADDR" = 127.0.0.1 && test "$MASTER_PORT" = 29777 &&
   test "$NCCL_NVLS_ENABLE" = 0 && test "$RANK" = "$LOCAL_RANK" && test "$RANK" -lt 2' || fail "rank variables"

out=$("$TF" launch --nproc-per-node 3 -- sh -c 'if [ "$RANK" = 1 ]; then exit 7; fi; sleep 20' 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "rank 1 exiting 7 should make launch exit 1, got $rc: $out"
echo "$out" | grep -q "rank 1" || fail "the failing rank is not named: $out"
echo "$out" | grep -q "7" || fail "the exit status is not named: $out"

"$TF" launch --nproc-per-node 0 -- true >/dev/null 2>&1
[ $? = 2 ] || fail "--nproc-per-node 0 should be a usage error (2)"
"$TF" launch --nproc-per-node 2 >/dev/null 2>&1
[ $? = 2 ] || fail "a missing command should be a usage error (2)"

"$TF" launch --nproc-per-node 2 -- sh -c 'kill -9 $$' 2>&1 | grep -q "signal" || fail "a killed rank should be named with its signal"

# A rank killed by someone else is blamed even when its peer's error exit is reaped first (on two H200s a kill -9'd
# rank's GPU context took longer to tear down than its peer took to fail on the lost connection): rank 0 fails with
# exit 3 first; rank 1 ignores the launcher's SIGTERM and then dies by a SIGKILL the launcher did not send.
out=$("$TF" launch --nproc-per-node 2 -- sh -c \
  'if [ "$RANK" = 0 ]; then sleep 0.2; exit 3; fi; trap "" TERM; sleep 1; kill -9 $$' 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "a killed rank should make launch exit 1, got $rc: $out"
echo "$out" | grep -q "rank 1 (pid [0-9]*) failed with signal 9 (SIGKILL)" || fail "the killed rank 1 is not blamed: $out"
echo "$out" | grep -q "rank 0 (pid [0-9]*) also failed, with exit code 3 (seen first" ||
  fail "rank 0's own failure is not named second: $out"
echo "launch e2e: ok"
