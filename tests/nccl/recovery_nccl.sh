#!/usr/bin/env bash
# recovery_nccl.sh BUILD - the public API end to end on the NCCL backend
# (FTCOMM_BACKEND=nccl) with the NCCL test double: every collective against
# the reference under ftcomm-run, a dying rank, and the whole recovery suite
# (tests/recovery/recovery.sh: kills, shrink, grow, replacements, a stopped
# rank, coordinator restart, ...) on the fast path (2.32.3: revoke, shrink,
# grow) and the fallback (2.26.5: abort and re-init). The double's call log
# must show the path taken and no communicator destroyed after a failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build/release}
D=$PWD/$BUILD/tests/nccl
tmp=$(mktemp -d /tmp/ftcomm-nccl-rec-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
# dumps_name DIR RANK REASON: every survivor's failure dump in DIR carries
# the coordinator's verdict dropping RANK for REASON, and names RANK as the
# peer its backend saw fail (NCCL names none; the backend takes the rank the
# coordinator's epoch leaves out). Prints what it saw; exit 1 otherwise.
dumps_name() { python3 tests/recovery/failure_dumps.py "$@" --exactly 3 --peer; }
# bad WHAT [FILE [LINES]]: a failure, with the last LINES (30) of FILE
bad() { echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/    | /' "$2" | tail -n "${3:-30}"; fail=$((fail + 1)); }

PROBE=$BUILD/tests/nccl/api_probe
probe() { # probe NAME EXPECT ENV...: two ranks of api_probe under ftcomm-run
  local name=$1 expect=$2
  shift 2
  env -u FTCOMM_BACKEND -u FTCOMM_NCCL_LIBRARY -u FTCOMM_CUDA_RUNTIME_LIBRARY NCCL_DOUBLE_DIR="$tmp" "$@" \
    FTCOMM_CONNECT_TIMEOUT_MS=20000 timeout -k 5 60 "$BUILD/bin/ftcomm-run" -q -n 2 --timeout 50 -- \
    "$PROBE" "$expect" >"$tmp/probe.out" 2>&1
  local rc=$?
  [ $rc = 0 ] && [ "$(grep -c "$expect: ok\|create: " "$tmp/probe.out")" -ge 2 ] && ok "$name" ||
    bad "$name (rc=$rc)" "$tmp/probe.out"
}
DBL=(FTCOMM_NCCL_LIBRARY=$D/libnccl_double_2.32.3.so FTCOMM_CUDA_RUNTIME_LIBRARY=$D/libcudart_double.so)
probe "FTCOMM_BACKEND=nccl: the NCCL backend, collectives on a stream given with ftc_comm_set_stream" \
  expect-nccl FTCOMM_BACKEND=nccl "${DBL[@]}"
probe "auto: NCCL where it loads and sees a GPU" expect-nccl FTCOMM_BACKEND=auto "${DBL[@]}"
probe "auto: TCP where NCCL loads but sees no GPU" expect-tcp FTCOMM_BACKEND=auto "${DBL[@]}" CUDA_DOUBLE_DEVICES=0
probe "auto: TCP where NCCL does not load" expect-tcp FTCOMM_BACKEND=auto FTCOMM_NCCL_LIBRARY=/nonexistent/libnccl.so.2
# auto without a library named: NCCL is loaded only on a host with a GPU device node
# or NVIDIA's driver (/dev/nvidiactl, /proc/driver/nvidia, /dev/dxg, /dev/kfd). The
# double, found by its usual names on LD_LIBRARY_PATH, sees a GPU, so loading it would
# pick NCCL; without one the info line says why TCP was taken.
mkdir -p "$tmp/libs"
ln -sf "$D/libnccl_double_2.32.3.so" "$tmp/libs/libnccl.so.2"
ln -sf "$D/libcudart_double.so" "$tmp/libs/libcudart.so.12"
ln -sf "$D/libcudart_double.so" "$tmp/libs/libcudart_double.so" # (the NCCL double's own dependency)
if [ -e /dev/nvidiactl ] || [ -e /proc/driver/nvidia ] || [ -e /dev/dxg ] || [ -e /dev/kfd ]; then
  probe "auto, a GPU device node here: NCCL found by its usual names" expect-nccl FTCOMM_BACKEND=auto \
    LD_LIBRARY_PATH="$tmp/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  probe "auto, no GPU device node here: TCP without loading NCCL" expect-tcp FTCOMM_BACKEND=auto \
    LD_LIBRARY_PATH="$tmp/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FTCOMM_LOG_LEVEL=info
  why="FTCOMM_BACKEND=auto: no nccl: none of /dev/nvidiactl, /proc/driver/nvidia, /dev/dxg, /dev/kfd here"
  grep -qF "$why" "$tmp/probe.out" && ok "auto, no GPU device node here: the info line says why" ||
    bad "auto, no GPU device node here: no line \"$why\"" "$tmp/probe.out"
fi
probe "tcp: ftc_comm_set_stream is not supported" expect-tcp FTCOMM_BACKEND=tcp "${DBL[@]}"
probe "FTCOMM_BACKEND=nccl without the library: create fails" expect-fail FTCOMM_BACKEND=nccl \
  FTCOMM_NCCL_LIBRARY=/nonexistent/libnccl.so.2
grep -q "create: backend library not found.*looked for /nonexistent/libnccl.so.2" "$tmp/probe.out" &&
  ok "  ... naming the library it looked for" || bad "  ... the message names the library" "$tmp/probe.out"

for v in 2.32.3 2.26.5; do
  export FTCOMM_BACKEND=nccl FTCOMM_NCCL_LIBRARY=$D/libnccl_double_$v.so
  export FTCOMM_CUDA_RUNTIME_LIBRARY=$D/libcudart_double.so
  export NCCL_DOUBLE_DIR=$tmp/$v NCCL_DOUBLE_LOG=$tmp/$v/log
  mkdir -p "$tmp/$v"
  log=$tmp/$v/log

  FTCOMM_CONNECT_TIMEOUT_MS=20000 FTCOMM_TIMEOUT_MS=30000 FTCOMM_LOG_LEVEL=info FTCOMM_LOG_SUBSYS=nccl \
    timeout -k 5 120 "$BUILD/bin/ftcomm-run" -q -n 3 --timeout 100 -- "$BUILD/tests/mp/mp_coll" all \
    >"$tmp/$v/coll.out" 2>&1
  rc=$?
  if [ $rc = 0 ] && grep -q "matched the reference at 3 ranks" "$tmp/$v/coll.out" &&
     grep -q "NCCL $v .*path" "$tmp/$v/coll.out"; then
    ok "$v: every collective through the public API matches the reference at 3 ranks"
  else
    bad "$v: collectives (rc=$rc)" "$tmp/$v/coll.out"
  fi

  FTCOMM_CONNECT_TIMEOUT_MS=20000 FTCOMM_TIMEOUT_MS=30000 \
    timeout -k 5 120 "$BUILD/bin/ftcomm-run" -q -n 4 --grace 10 --timeout 60 -- "$BUILD/tests/mp/mp_coll" die \
    >"$tmp/$v/die.out" 2>&1
  rc=$?
  survivors=$(grep -c "survivor saw a peer rank was lost" "$tmp/$v/die.out")
  [ $rc = 3 ] && [ "$survivors" = 3 ] && ok "$v: a dying rank makes every survivor fail with peer lost" ||
    bad "$v: die (rc=$rc, survivors $survivors)" "$tmp/$v/die.out"

  # NCCL does not say which peer died; the coordinator does (its next epoch
  # leaves rank 1 out): every survivor's error names it. A survivor whose NCCL
  # error comes after the coordinator's announcement fails with revoked instead
  # of peer lost (seen under load): the name is what this checks.
  FTCOMM_CONNECT_TIMEOUT_MS=20000 FTCOMM_TIMEOUT_MS=30000 \
    timeout -k 5 120 "$BUILD/bin/ftcomm-run" -q -n 4 --min-size 3 --grace 10 --timeout 60 \
    --dump-dir "$tmp/$v/blame-dumps" -- "$BUILD/tests/mp/mp_coll" die >"$tmp/$v/blame.out" 2>&1
  rc=$?
  named=$(grep -cE "survivor saw (a peer rank was lost|communicator epoch revoked; recover before the next collective) .*rank 1 \(slot 1\) is gone: the coordinator's epoch 2 leaves it out" "$tmp/$v/blame.out")
  [ $rc = 0 ] && [ "$named" = 3 ] && ok "$v: every survivor's error names the rank the coordinator dropped" ||
    bad "$v: blame (rc=$rc, named by $named survivors)" "$tmp/$v/blame.out"
  # ... and so does every survivor's failure dump.
  if why=$(dumps_name "$tmp/$v/blame-dumps" 1 crashed 2>&1); then ok "$v: $why"
  else echo "$why" >>"$tmp/$v/blame.out"; bad "$v: blame dumps: $why" "$tmp/$v/blame.out"; fi

  # A rank that stops (alive, silent): the survivors time out, their reports
  # convict it (silent past two heartbeats), and they wait for that epoch
  # (FTCOMM_NCCL_BLAME_MS) to name it in the timeout's error.
  FTCOMM_HEARTBEAT_MS=200 FTCOMM_HEARTBEAT_TIMEOUT_MS=60000 FTCOMM_CONNECT_TIMEOUT_MS=20000 \
    FTCOMM_TIMEOUT_MS=30000 MP_COLL_PIDFILE="$tmp/$v/stall.pid" \
    timeout -k 5 120 "$BUILD/bin/ftcomm-run" -q -n 4 --min-size 3 --grace 10 --timeout 60 \
    --dump-dir "$tmp/$v/stall-dumps" -- "$BUILD/tests/mp/mp_coll" stall >"$tmp/$v/stall.out" 2>&1
  rc=$?
  # (the first survivor to time out reports it; once it is dropped, ftcomm-run
  # kills it, and a survivor still waiting may see a lost peer instead)
  named=$(grep -c "survivor saw .*rank 1 (slot 1) is gone: the coordinator's epoch 2 leaves it out" "$tmp/$v/stall.out")
  timed=$(grep -c "survivor saw operation timed out .*rank 1 (slot 1) is gone" "$tmp/$v/stall.out")
  [ $rc = 0 ] && [ "$named" = 3 ] && [ "$timed" -ge 1 ] &&
    ok "$v: every survivor's error names the stopped rank the coordinator convicted ($timed timeouts)" ||
    bad "$v: stall (rc=$rc, named by $named survivors, $timed after a timeout)" "$tmp/$v/stall.out"
  if why=$(dumps_name "$tmp/$v/stall-dumps" 1 hung 2>&1); then ok "$v: $why"
  else echo "$why" >>"$tmp/$v/stall.out"; bad "$v: stall dumps: $why" "$tmp/$v/stall.out"; fi

  # All of it, two-joiners included on both paths: the view's "fresh" bits tell
  # every rank which members come without a communicator (docs/recovery.md).
  timeout 900 tests/recovery/recovery.sh "$BUILD" >"$tmp/$v/recovery.out" 2>&1
  rc=$?
  if [ $rc = 0 ]; then ok "$v: the recovery suite: $(grep '^recovery:' "$tmp/$v/recovery.out")"
  else # each failed case with what it printed, then the suite's last lines
    { awk '/^FAIL /{p=1} /^(ok|skip) /{p=0} p' "$tmp/$v/recovery.out"; echo ...
      tail -n 5 "$tmp/$v/recovery.out"; } >"$tmp/$v/recovery.fail"
    bad "$v: the recovery suite (rc=$rc)" "$tmp/$v/recovery.fail" 100000
  fi

  n_destroy_failed=$(grep -c ' destroy .*failed=1' "$log")
  [ "$n_destroy_failed" = 0 ] && ok "$v: no communicator destroyed after a failure ($(grep -c ' abort ' "$log") aborts)" ||
    bad "$v: $n_destroy_failed communicators destroyed after a failure"
  shrinks=$(grep -c ' shrink ' "$log") grows=$(grep -c ' grow ' "$log")
  if [ $v = 2.32.3 ]; then
    [ "$shrinks" -gt 0 ] && [ "$grows" -gt 0 ] && ok "$v: fast path ($shrinks shrinks, $grows grows)" ||
      bad "$v: expected shrinks and grows, saw $shrinks and $grows"
  else
    [ "$shrinks" = 0 ] && [ "$grows" = 0 ] && ok "$v: fallback ($(grep -c ' init ' "$log") inits, no shrink or grow)" ||
      bad "$v: the fallback shrank ($shrinks) or grew ($grows)"
  fi
done
echo "nccl recovery: $pass passed, $fail failed"
[ $fail = 0 ]
