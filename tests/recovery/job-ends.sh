#!/usr/bin/env bash
# job-ends.sh [BUILD [CASE...]] - a hang always leaves its dumps, however the
# job ends next (docs/recovery.md, "When a job ends after a failure").
#
# Rank 2 of 4 hangs (SIGSTOP, --inject stop:2@STEP) under ftcomm-run; then
# the job goes on smaller, a replacement joins, the job stops below its
# minimum size (with a 3 s collective timeout, and with every default), or
# ftcomm-run is interrupted (SIGINT) during the recovery, on a normal disk
# and on one where every dump write takes 1.5 s. Each case checks, with
# job_end_dumps.py: every survivor's own failure dump is in the dump
# directory, on disk at most 1 s after its capture (the rank's log says
# when); the incident folder holds every survivor's dump (stored at most 1 s
# after capture) and incident.json, which says why rank 2's is missing; and
# ftcomm-trace on that folder names rank 2 and why. It prints the case table.
#
# CASE names (or FTC_JOB_ENDS_CASES) select cases; `--list` prints them.
set -uo pipefail
cd "$(dirname "$0")/../.."

CASES=(smaller replacement below-min below-min-defaults sigint sigint-slow-disk)
case ${1:-} in
  --list) printf '%s\n' "${CASES[@]}"; exit 0 ;;
  -*) echo "job-ends: unknown option $1; usage: tests/recovery/job-ends.sh [BUILD [CASE...]]" >&2; exit 2 ;;
esac
BUILD=${1:-${BUILD:-build/release}}
BIN=$BUILD/bin
[ $# -gt 0 ] && shift
if [ $# -gt 0 ]; then selected=("$@"); else read -ra selected <<<"${FTC_JOB_ENDS_CASES:-}"; fi
for c in "${selected[@]}"; do
  printf '%s\n' "${CASES[@]}" | grep -qx -- "$c" || { echo "job-ends: no case '$c'; the cases are: ${CASES[*]}" >&2; exit 2; }
done
for b in ftcomm-run ftcomm-trainer ftcomm-trace; do
  [ -x "$BIN/$b" ] || { echo "job-ends: $BIN/$b is missing: build it (make), or name the build directory first" >&2; exit 2; }
done
export FTC_TRACE=$BIN/ftcomm-trace
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset FTCOMM_FAULT FTCOMM_HEARTBEAT_MS FTCOMM_HEARTBEAT_TIMEOUT_MS FTCOMM_TIMEOUT_MS FTCOMM_DUMP_DRAIN_MS
# The writers' log lines say how long after its capture each dump was on disk.
export FTCOMM_LOG_LEVEL=info FTCOMM_LOG_SUBSYS=recovery,coord
TRAIN=(--steps 400 --step-ms 5 --batch 96 --samples 2048 --seed 7 --log-every 1000)
pass=0 fail=0 rows=()

# run NAME LIMIT_S ARGS...: ftcomm-run with ARGS, output in $tmp/NAME.out, status in $tmp/NAME.rc
run() {
  local name=$1 limit=$2
  shift 2
  tests/bounded.sh "$limit" "$BIN/ftcomm-run" --quiet --dump-dir "$tmp/$name" --job "je-$name" "$@" \
    >"$tmp/$name.out" 2>&1 </dev/null
  echo $? >"$tmp/$name.rc"
}
bad() {
  echo "FAIL $1: $2"
  sed 's/^/    | /' "$tmp/$1.out" | grep -v ' heartbeat\| INFO coord .*uploading' | tail -n "${3:-40}"
  fail=$((fail + 1))
}
# verify NAME [CHECKER-ARGS...]: survivors 0,1,3 of a hang of rank 2
verify() {
  local name=$1 out
  shift
  # Under SANITIZE=..., a report from any process fails the case.
  if grep -q 'Sanitizer' "$tmp/$name.out"; then
    bad "$name" "a sanitizer report" 80; return
  fi
  if out=$(python3 tests/recovery/job_end_dumps.py "$name" "$tmp/$name" "$tmp/$name.out" 2 0,1,3 "$@" 2>&1); then
    echo "ok   $name"
    echo "$out" | sed 's/^/     /'
    rows+=("$(echo "$out" | head -1)")
    pass=$((pass + 1))
  else
    bad "$name" "$out"
  fi
}

# The job goes on with 3 ranks (--min-size 2): the coordinator drops rank 2
# at the heartbeat timeout and forms the next epoch.
case_smaller() {
  FTCOMM_HEARTBEAT_MS=100 FTCOMM_HEARTBEAT_TIMEOUT_MS=1500 FTCOMM_TIMEOUT_MS=4000 \
    run smaller 90 -n 4 --min-size 2 --inject stop:2@20 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  [ "$(cat "$tmp/smaller.rc")" = 0 ] || { bad smaller "ftcomm-run exited $(cat "$tmp/smaller.rc"), want 0 (3 finish)"; return; }
  verify smaller
}

# A replacement joins (--replace): 4 ranks finish.
case_replacement() {
  FTCOMM_HEARTBEAT_MS=100 FTCOMM_HEARTBEAT_TIMEOUT_MS=1500 FTCOMM_TIMEOUT_MS=4000 \
    run replacement 90 -n 4 --replace --replace-delay 0.5 --inject stop:2@20 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  [ "$(cat "$tmp/replacement.rc")" = 0 ] || { bad replacement "ftcomm-run exited $(cat "$tmp/replacement.rc"), want 0"; return; }
  grep -q 'joined at epoch' "$tmp/replacement.out" || { bad replacement "no replacement joined"; return; }
  verify replacement
}

# The reported case: the default minimum (all 4), no replacement, a 3 s
# collective timeout: the job stops (ftcomm-run kills the stopped rank, then
# the others after its grace period) and no next epoch ever comes.
case_below-min() {
  FTCOMM_TIMEOUT_MS=3000 run below-min 90 -n 4 --inject stop:2@20 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  [ "$(cat "$tmp/below-min.rc")" != 0 ] || { bad below-min "ftcomm-run exited 0, want the stopped rank's failure"; return; }
  verify below-min
}

# The same with every default: a 600 s collective timeout, so the 15 s
# heartbeat timeout finds the hang.
case_below-min-defaults() {
  run below-min-defaults 120 -n 4 --inject stop:2@20 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  [ "$(cat "$tmp/below-min-defaults.rc")" != 0 ] || { bad below-min-defaults "ftcomm-run exited 0"; return; }
  verify below-min-defaults
}

# ftcomm-run is interrupted (SIGINT, a terminal's Ctrl-C) while the
# survivors recover: below the minimum they wait for a replacement that is
# 60 s away. The ranks end on the forwarded SIGINT once their dumps are
# written (with FTCOMM_FAULT=dumpwrite:MS every write takes MS first: the
# signal comes while they are being written). $1: case name, $2: MS or "".
sigint_case() {
  local name=$1 slow=$2 t0
  (
    export FTCOMM_HEARTBEAT_MS=100 FTCOMM_HEARTBEAT_TIMEOUT_MS=1500 FTCOMM_TIMEOUT_MS=4000
    [ -n "$slow" ] && export FTCOMM_FAULT=dumpwrite:$slow
    exec "$BIN/ftcomm-run" --quiet --dump-dir "$tmp/$name" --job "je-$name" -n 4 --replace \
      --replace-delay 60 --inject stop:2@20 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}" >"$tmp/$name.out" 2>&1 </dev/null
  ) &
  local pid=$!
  # The survivors are recovering once they asked for a replacement's epoch
  # (below the minimum) and the dumps were asked for.
  for _ in $(seq 600); do
    grep -q 'asking every rank of epoch 1 for a dump' "$tmp/$name.out" 2>/dev/null &&
      [ "$(grep -c 'recovering$' "$tmp/$name.out")" -ge 3 ] && break
    sleep 0.05
  done
  t0=$(date +%s%N)
  kill -INT "$pid"
  local left=600
  while kill -0 "$pid" 2>/dev/null && [ $left -gt 0 ]; do sleep 0.1; left=$((left - 1)); done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid"
    echo 124 >"$tmp/$name.rc"
  fi
  wait "$pid"
  echo $? >"$tmp/$name.rc"
  echo "     ($name: the run ended $((($(date +%s%N) - t0) / 1000000)) ms after SIGINT)"
  grep -q 'got Interrupt; forwarding it to the ranks' "$tmp/$name.out" || { bad "$name" "ftcomm-run did not forward the SIGINT"; return 1; }
  if grep -q 'killing [0-9]* ranks* still running' "$tmp/$name.out"; then
    bad "$name" "ftcomm-run SIGKILLed survivors: they did not end on SIGINT"; return 1
  fi
  return 0
}
case_sigint() {
  sigint_case sigint "" || return
  verify sigint
}
# Every write takes 1.5 s: at the SIGINT the survivors' dumps are still
# being written, and each rank ends only once they are on disk.
case_sigint-slow-disk() {
  sigint_case sigint-slow-disk 1500 || return
  local n
  n=$(grep -c 'Interrupt: the dumps are written and sent' "$tmp/sigint-slow-disk.out")
  [ "$n" -ge 1 ] || { bad sigint-slow-disk "no rank waited for its dumps before ending on SIGINT"; return; }
  # 1.5 s of injected write time per dump (two per rank, one after the other).
  verify sigint-slow-disk --bound-ms 4500
}

for c in "${CASES[@]}"; do
  [ ${#selected[@]} = 0 ] || printf '%s\n' "${selected[@]}" | grep -qx -- "$c" || continue
  t0=$SECONDS
  "case_$c"
  echo "     ($c: $((SECONDS - t0)) s)"
done
echo
echo "| case | failure dumps (ranks, where) | incident dumps | slowest failure dump on disk after capture | slowest incident dump stored after capture | rank 2's entry in incident.json |"
echo "|---|---|---|---|---|---|"
for r in "${rows[@]}"; do echo "$r"; done
echo "job-ends: $pass passed, $fail failed"
[ "$fail" = 0 ]
