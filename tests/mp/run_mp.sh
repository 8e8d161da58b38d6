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

# A rank killed during each of allgatherv, alltoallv, gather and scatter (6
# ranks down to 2): the survivors fail, recover and run it right again.
timeout -k 5 120 "$RUN" -q -n 6 --min-size 2 --grace 10 --timeout 100 -- "$PROG" diev >"$T/out" 2>"$T/err"
rc=$?
check "a rank that dies during allgatherv, alltoallv, gather or scatter fails it; the survivors recover" \
  $([ $rc = 0 ] && for c in "allgatherv:5" "alltoallv:4" "gather:3" "scatter:2"; do
      grep -q "a death during ${c%%:*}: .*, recovered to ${c##*:} ranks" "$T/out" || exit 1; done; echo $?) "rc=$rc"

# Sub-communicators through a shrink: slot 3 dies in a child's collective,
# the parent recovers, each child is re-derived, a split after it works.
timeout -k 5 120 "$RUN" -q -n 4 --min-size 2 --grace 10 --timeout 100 -- "$PROG" split >"$T/out" 2>"$T/err"
rc=$?
check "sub-communicators follow their parent through a shrink and are re-derived from it" \
  $([ $rc = 0 ] && grep -q "sub-communicators followed the parent from 4 to 3 ranks" "$T/out"; echo $?) "rc=$rc"

# Ranks that call one collective differently (another broadcast root on the
# last rank): the ranks that compared the calls fail with the mismatch, and
# every rank recovers to an epoch of all of them (nobody is blamed), whose
# dumps say mismatch and whose ftcomm-trace names the differing root.
for n in 2 3; do
  rm -rf "$T/dumps"; mkdir -p "$T/dumps"
  FTCOMM_DUMP_DIR="$T/dumps" timeout -k 5 120 "$RUN" -q -n "$n" --timeout 60 -- "$PROG" mismatch >"$T/out" 2>"$T/err"
  rc=$?
  "$BUILD/bin/ftcomm-trace" "$T/dumps" >"$T/trace" 2>&1
  check "a broadcast with another root on one rank fails as a mismatch and all $n ranks recover" \
    $([ $rc = 0 ] && [ "$(grep -c "recovered to rank [0-9] of $n" "$T/out")" = "$n" ] &&
      grep -q "mismatch: ranks passed different arguments.*where this rank" "$T/out" &&
      grep -lq '"status":"mismatch"' "$T/dumps"/*.json &&
      grep -qi "root" "$T/trace"; echo $?) "rc=$rc; trace: $(head -c 600 "$T/trace")"
done

# ftc_comm_create_begin / _finish: every rank registers as standby, starts,
# then joins; slot 1 cancels a begun communicator first. The first epoch
# waits for every finish, and a cancelled standby leaves its slot free.
FTCOMM_LOG_LEVEL=info timeout -k 5 60 "$RUN" -n 3 --timeout 30 -- "$PROG" early >"$T/out" 2>"$T/err"
rc=$?
check "ranks that begin, initialize and finish form the job; a cancelled begin frees its slot" \
  $([ $rc = 0 ] && [ "$(grep -c 'early join: rank [0-2] of 3' "$T/out")" = 3 ] &&
    [ "$(grep -c 'registered (standby until it joins)' "$T/err")" = 4 ] &&
    [ "$(grep -c 'is ready to join' "$T/err")" = 3 ] &&
    grep -q 'slot 1 (member [0-9]*) left before joining an epoch' "$T/err" &&
    [ "$(grep -c 'epoch 1 formed with 3 members' "$T/err")" = 1 ]
    echo $?) "rc=$rc"

FTCOMM_CONNECT_TIMEOUT_MS=1500 timeout -k 5 60 "$RUN" -q -n 2 --timeout 30 -- "$PROG" absent >"$T/out" 2>"$T/err"
rc=$?
check "a rank that never joins makes ftc_comm_create time out, not hang" \
  $([ $rc = 0 ] && grep -q "create timed out after" "$T/out"; echo $?) "rc=$rc"

# IPv6 (FTCOMM_SOCKET_FAMILY, see docs/environment.md): the same collectives
# with the coordinator and the data plane on ::1, and a dual-stack job whose
# ranks advertise ::1 and 127.0.0.1 alternately to dual-stack listeners.
if grep -q '^00000000000000000000000000000001 ' /proc/net/if_inet6 2>/dev/null; then
  for n in 2 4; do
    FTCOMM_SOCKET_FAMILY=ipv6 FTCOMM_LOG_LEVEL=info timeout -k 5 120 "$RUN" -n "$n" --timeout 100 -- \
      "$PROG" all >"$T/out" 2>"$T/err"
    rc=$?
    check "ipv6: every collective matches the reference at $n ranks over ::1" \
      $([ $rc = 0 ] && grep -q "matched the reference at $n ranks" "$T/out" &&
        grep -q 'coordinator listening on \[::1\]:' "$T/err" &&
        [ "$(grep -c 'joined as member .* (data \[::1\]:[0-9]*, initial)' "$T/err")" = "$n" ]
        echo $?) "rc=$rc"
  done
  FTCOMM_BIND_HOST='*' FTCOMM_LOG_LEVEL=info timeout -k 5 120 "$RUN" -n 4 --timeout 100 -- sh -c \
    'if [ $((FTCOMM_SLOT % 2)) = 0 ]; then FTCOMM_ADVERTISE_HOST=::1; else FTCOMM_ADVERTISE_HOST=127.0.0.1; fi
     export FTCOMM_ADVERTISE_HOST; exec "$0" "$@"' "$PROG" all >"$T/out" 2>"$T/err"
  rc=$?
  check "dual-stack: ranks advertising ::1 and 127.0.0.1 form one job on dual-stack listeners" \
    $([ $rc = 0 ] && grep -q "matched the reference at 4 ranks" "$T/out" &&
      [ "$(grep -c '(data \[::1\]:[0-9]*, initial)' "$T/err")" = 2 ] &&
      [ "$(grep -c '(data 127\.0\.0\.1:[0-9]*, initial)' "$T/err")" = 2 ]
      echo $?) "rc=$rc"
  FTCOMM_SOCKET_FAMILY=ipv6 FTCOMM_BIND_HOST='*' FTCOMM_SOCKET_IFNAME=lo FTCOMM_LOG_LEVEL=info \
    timeout -k 5 120 "$RUN" -n 2 --timeout 100 -- "$PROG" all >"$T/out" 2>"$T/err"
  rc=$?
  check "ipv6: FTCOMM_SOCKET_IFNAME=lo advertises ::1 from a wildcard listener" \
    $([ $rc = 0 ] && grep -q "matched the reference at 2 ranks" "$T/out" &&
      [ "$(grep -c '(data \[::1\]:[0-9]*, initial)' "$T/err")" = 2 ]
      echo $?) "rc=$rc"
else
  echo "skip ipv6 and dual-stack cases: this host has no IPv6 loopback (::1 is not in /proc/net/if_inet6)"
fi
FTCOMM_SOCKET_FAMILY=ipv5 timeout -k 5 30 "$RUN" -q -n 1 -- "$PROG" all >"$T/out" 2>"$T/err"
rc=$?
check "an unknown FTCOMM_SOCKET_FAMILY is refused, naming the values" \
  $([ $rc != 0 ] && grep -q 'FTCOMM_SOCKET_FAMILY="ipv5" is not an address family; set auto, ipv4 or ipv6' "$T/err"; echo $?) "rc=$rc"
# FTCOMM_LOG_TIME: each log line starts with the time; a bad value is named.
FTCOMM_LOG_TIME=utc FTCOMM_LOG_LEVEL=info timeout -k 5 30 "$RUN" -q -n 2 -- "$PROG" all >"$T/out" 2>"$T/err"
rc=$?
check "FTCOMM_LOG_TIME=utc starts every log line with the UTC time" \
  $([ $rc = 0 ] && grep -q '^\[1\] [0-9]\{4\}-[0-9][0-9]-[0-9][0-9]T[0-9:]\{8\}\.[0-9]\{6\}Z ftcomm INFO ' "$T/err" &&
    ! grep 'ftcomm INFO' "$T/err" | grep -qv 'Z ftcomm INFO'; echo $?) "rc=$rc"
FTCOMM_LOG_TIME=often timeout -k 5 30 "$RUN" -q -n 1 -- "$PROG" all >"$T/out" 2>"$T/err"
rc=$?
check "a bad FTCOMM_LOG_TIME is named, the run goes on" \
  $([ $rc = 0 ] && grep -q 'FTCOMM_LOG_TIME=often is not one of none (0), utc (1), epoch' "$T/err"; echo $?) "rc=$rc"
FTCOMM_BIND_HOST=127.0.0.1 FTCOMM_ADVERTISE_HOST=fd00::1:7470 timeout -k 5 30 "$RUN" -q -n 1 -- "$PROG" all >"$T/out" 2>"$T/err"
rc=$?
check "an advertised IPv6 address the IPv4 listener cannot serve is refused, saying so" \
  $([ $rc != 0 ] && grep -q 'FTCOMM_ADVERTISE_HOST=fd00::1:7470 is an IPv6 address' "$T/out" "$T/err"; echo $?) "rc=$rc"

# Ranks whose settings choose different algorithms (docs/api.md, "Choosing
# the algorithm") are refused by the data-plane handshake: every rank's
# ftc_comm_create fails at once (not at the 20 s connect timeout) with
# FTC_ERR_CONFIG naming the other rank, the variable and both values.
# One slot gets its own value through a wrapper.
for c in "3 1 FTCOMM_RING_THRESHOLD 2048 262144" "2 0 FTCOMM_ALLREDUCE_ALGO ring auto"; do
  set -- $c
  t0=$(date +%s%N)
  timeout -k 5 60 "$RUN" -q -n "$1" --timeout 40 -- sh -c \
    'if [ "$FTCOMM_SLOT" = "$1" ]; then export "$2=$3"; fi; shift 3; exec "$0" "$@"' \
    "$PROG" "$2" "$3" "$4" all >"$T/out" 2>"$T/err"
  rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  ok=0
  for r in $(seq 0 $(($1 - 1))); do
    if [ "$r" = "$2" ]; then want="has $3=$5, this rank ($r) $4: set the same value on every rank"
    else want="rank $2 has $3=$4, this rank ($r) $5: set the same value on every rank"; fi
    grep -qF "[$r] ftc_comm_create: invalid configuration: " "$T/err" &&
      grep "^\[$r\] ftc_comm_create" "$T/err" | grep -qF "$want" || ok=1
  done
  check "ranks with different $3 are all refused at creation, saying what to set ($1 ranks)" \
    $([ $rc != 0 ] && [ $ok = 0 ] && [ $ms -lt 10000 ]; echo $?) "rc=$rc, ${ms} ms"
done

echo "mp: $pass passed, $fail failed"
[ $fail = 0 ]
