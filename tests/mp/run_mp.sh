#!/usr/bin/env bash
# run_mp.sh - multi-process tests through the real path: ftcomm-run hosts
# the coordinator and starts the ranks, which join with ftc_comm_create.
#   tests/mp/run_mp.sh [BUILD_DIR]     (default build/release)
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-${BUILD:-build/release}}
RUN=$BUILD/bin/ftcomm-run
PROG=$BUILD/tests/mp/mp_coll
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
export FTCOMM_SPIN_US=0 FTCOMM_CONNECT_TIMEOUT_MS=20000 FTCOMM_TIMEOUT_MS=30000

check() { # NAME RESULT(0 ok) DETAIL
  if [ "$2" = 0 ]; then
    pass=$((pass + 1)); echo "ok   $1"
  else
    fail=$((fail + 1)); echo "FAIL $1: $3"
    sed 's/^/     | /' "$T/out" "$T/err" | tail -n 30
  fi
}

for n in 1 2 3 4 5 8 16; do
  timeout -k 5 240 "$RUN" -q -n "$n" --timeout 200 -- "$PROG" all >"$T/out" 2>"$T/err"
  rc=$?
  check "every collective matches the reference at $n ranks under ftcomm-run" \
    $([ $rc = 0 ] && grep -q "matched the reference at $n ranks" "$T/out"; echo $?) "rc=$rc"
done

timeout -k 5 120 "$RUN" -q -n 4 --grace 10 --timeout 60 -- "$PROG" die >"$T/out" 2>"$T/err"
rc=$?
survivors=$(grep -c "survivor saw" "$T/out")
check "a rank that dies makes every survivor fail instead of hanging" \
  $([ $rc = 3 ] && [ "$survivors" = 3 ]; echo $?) "rc=$rc (want 3, the dead rank's code), survivors reporting: $survivors of 3"

FTCOMM_CONNECT_TIMEOUT_MS=1500 timeout -k 5 60 "$RUN" -q -n 2 --timeout 30 -- "$PROG" absent >"$T/out" 2>"$T/err"
rc=$?
check "a rank that never joins makes ftc_comm_create time out, not hang" \
  $([ $rc = 0 ] && grep -q "create timed out after" "$T/out"; echo $?) "rc=$rc"

echo "mp: $pass passed, $fail failed"
[ $fail = 0 ]
