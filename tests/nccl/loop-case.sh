#!/usr/bin/env bash
# loop-case.sh BUILD CASE N OUTDIR - hunt a flake: run one case of
# tests/recovery/recovery.sh (two-joiners: one round; ten-failures) N times on
# the NCCL double (V=2.32.3 by default) with that suite's environment and
# checks (exit 0, the finishers, identical parameters, no collective timeout,
# no joiner waiting out the connect timeout, two-joiners within 15 s). A
# failing run's output, double log and dumps are kept in OUTDIR/CASE-I
# (KEEP=1 keeps every run's, in /tmp). Set FTCOMM_LOG_LEVEL/FTCOMM_LOG_SUBSYS
# for more. One line per run, then "CASE: P passed, F failed of N".
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=$1 CASE=$2 N=$3 OUT=$4 V=${V:-2.32.3}
BIN=$BUILD/bin D=$PWD/$BUILD/tests/nccl
mkdir -p "$OUT"
export FTCOMM_HEARTBEAT_MS=100 FTCOMM_HEARTBEAT_TIMEOUT_MS=1500 FTCOMM_TIMEOUT_MS=4000
export FTCOMM_CONNECT_TIMEOUT_MS=20000 FTCOMM_RECOVER_TIMEOUT_MS=20000
unset FTCOMM_FAULT
export FTCOMM_BACKEND=nccl FTCOMM_NCCL_LIBRARY=$D/libnccl_double_$V.so FTCOMM_CUDA_RUNTIME_LIBRARY=$D/libcudart_double.so
TRAIN=(--steps 60 --step-ms 5 --batch 96 --samples 2048 --seed 7 --log-every 1000)
pass=0 fail=0
for i in $(seq 1 "$N"); do
  w=$(mktemp -d /tmp/ftcomm-loop-XXXXXX)
  export NCCL_DOUBLE_DIR=$w NCCL_DOUBLE_LOG=$w/double.log
  t0=$(date +%s.%N)
  case $CASE in
    two-joiners) want=4 limit=60; args=(-n 4 --min-size 2 --replace --replace-delay 0.2 --inject kill:1@5 --inject kill:2@5) ;;
    ten-failures) want=2 limit=120; args=(-n 12 --min-size 2); for k in $(seq 0 9); do args+=(--inject "kill:$k@$((3 + 2 * k))"); done ;;
  esac
  timeout -k 5 $limit "$BIN/ftcomm-run" --quiet --dump-dir "$w/dumps" --job "rec-$CASE" "${args[@]}" -- \
    "$BIN/ftcomm-trainer" "${TRAIN[@]}" >"$w/out" 2>&1 </dev/null
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  n=$(grep -c 'final: rank' "$w/out")
  h=$(grep -o 'params_hash [0-9a-f]*' "$w/out" | sort -u | wc -l)
  why=
  [ $rc = 0 ] || why="rc=$rc"
  [ "$n" = $want ] || why="$why finals=$n"
  [ "$h" = 1 ] || why="$why hashes=$h"
  grep -q 'operation timed out' "$w/out" && why="$why collective-timed-out"
  grep -q 'within FTCOMM_CONNECT_TIMEOUT_MS\|cannot join the job' "$w/out" && why="$why joiner-connect-timeout"
  [ $CASE = two-joiners ] && awk -v s=$secs 'BEGIN{exit !(s > 15)}' && why="$why slow"
  if [ -z "$why" ]; then pass=$((pass+1)); echo "$CASE #$i ok ${secs}s load $(cut -d' ' -f1 /proc/loadavg)"; [ -n "${KEEP:-}" ] || rm -rf "$w"
  else fail=$((fail+1)); mv "$w" "$OUT/$CASE-$i"; echo "$CASE #$i FAIL ${secs}s ($why) load $(cut -d' ' -f1 /proc/loadavg) -> $OUT/$CASE-$i"; fi
done
echo "$CASE: $pass passed, $fail failed of $N"
