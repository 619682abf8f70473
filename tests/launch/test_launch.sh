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
echo "launch e2e: ok"
