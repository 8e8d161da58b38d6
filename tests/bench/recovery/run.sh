#!/usr/bin/env bash
# tests/bench/recovery/run.sh - recovery latencies on this host, printed as a
# markdown table (also written to ${BENCH_OUT:-build/bench}/recovery.md); part of
# `make bench`, the table is in docs/recovery.md.
#
# For each size N (BENCH_RECOVERY_SIZES, default "4 8 16"), with
# BENCH_RECOVERY_TRIALS (default 20) failures each:
#   crash  ftcomm-run --replace runs recovery_bench; every trial one rank
#          SIGKILLs itself; the others print when their collective failed
#          (detection), when their first collective at N-1 succeeded
#          (shrink); the replacement prints when it is ready to create its
#          communicator and every rank when its first collective at N
#          succeeded (grow: excludes process start and application state).
#          The replacement begins its communicator (ftc_comm_create_begin)
#          at its start, initializes for 2 ms plus a random 0-2 ms, prints
#          "ready" and finishes it (docs/recovery.md, "Joining early").
#   create the same, the replacement calling ftc_comm_create when ready (the
#          grow without the early start, side by side).
#          The victim fails at the end of its 1 ms of compute, as the others
#          enter the next step's collective (BENCH_RECOVERY_KILL_AT=step,
#          the default); =after kills it right after a collective, so the
#          others notice only after their own 1 ms of compute (see
#          recovery_bench.c and docs/recovery.md "Benchmark").
#   hang   the same with SIGSTOP and a collective timeout of
#          BENCH_RECOVERY_HANG_TIMEOUT_MS (default 1000): detection is the
#          stop to every survivor's collective returning.
#   restart-everything baseline: one rank SIGKILLs itself; the launcher
#          (ftcomm-run --grace 0) sees it exit, kills the others and ends;
#          the job is launched again (coordinator, process start,
#          bootstrap) until every rank finished its first collective. The
#          time from the kill to that collective.
# The table opens with the stamp of tests/bench/stamp.sh (commit, host, date).
# BENCH_RECOVERY_KEEP=1 keeps the rank logs and prints their directory;
# `python3 tests/bench/recovery/report.py DIR` prints the same stamped table
# again from them (the report mode: DIR/meta.txt holds the stamp and knobs).
set -uo pipefail
cd "$(dirname "$0")/../../.."
BUILD=${BUILD:-build/release}
RUN=$BUILD/bin/ftcomm-run
PROG=$BUILD/bench/recovery_bench
TRIALS=${BENCH_RECOVERY_TRIALS:-20}
SIZES=${BENCH_RECOVERY_SIZES:-4 8 16}
HANG_MS=${BENCH_RECOVERY_HANG_TIMEOUT_MS:-1000}
KILL_AT=${BENCH_RECOVERY_KILL_AT:-step}
case $KILL_AT in step|after) ;; *) echo "recovery bench: BENCH_RECOVERY_KILL_AT must be step or after, not '$KILL_AT'" >&2; exit 2;; esac
OUT=${BENCH_OUT:-build/bench}
mkdir -p "$OUT"
tmp=$(mktemp -d)
# BENCH_RECOVERY_KEEP=1 keeps the rank logs (the directory is printed).
if [ -n "${BENCH_RECOVERY_KEEP:-}" ]; then echo "recovery bench: logs in $tmp" >&2; else trap 'rm -rf "$tmp"' EXIT; fi
[ -x "$PROG" ] && [ -x "$RUN" ] || { echo "recovery bench: build $PROG and $RUN first (make bench)" >&2; exit 1; }
unset FTCOMM_FAULT
{
  echo "stamp=$(tests/bench/stamp.sh)"
  echo "trials=$TRIALS"
  echo "hang_ms=$HANG_MS"
  echo "sizes=$SIZES"
  echo "kill_at=$KILL_AT"
} >"$tmp/meta.txt"
export FTCOMM_HEARTBEAT_MS=100 FTCOMM_CONNECT_TIMEOUT_MS=30000 FTCOMM_RECOVER_TIMEOUT_MS=30000

for n in $SIZES; do
  echo "recovery bench: $n ranks, crash ($TRIALS trials)" >&2
  FTCOMM_HEARTBEAT_TIMEOUT_MS=3000 FTCOMM_TIMEOUT_MS=20000 \
    timeout -k 5 600 "$RUN" -n "$n" --min-size $((n - 1)) --replace --replace-delay 0.05 --quiet \
    --job "bench-crash-$n" --dump-dir "$tmp/dumps" -- "$PROG" --mode crash --kill-at "$KILL_AT" --trials "$TRIALS" \
    >"$tmp/crash-$n.log" 2>&1 || echo "recovery bench: the crash run at $n ranks failed (see below)" >&2
  echo "recovery bench: $n ranks, crash, joiners without ftc_comm_create_begin ($TRIALS trials)" >&2
  FTCOMM_HEARTBEAT_TIMEOUT_MS=3000 FTCOMM_TIMEOUT_MS=20000 \
    timeout -k 5 600 "$RUN" -n "$n" --min-size $((n - 1)) --replace --replace-delay 0.05 --quiet \
    --job "bench-create-$n" --dump-dir "$tmp/dumps" -- "$PROG" --mode crash --kill-at "$KILL_AT" --join create \
    --trials "$TRIALS" >"$tmp/create-$n.log" 2>&1 ||
    echo "recovery bench: the crash run (--join create) at $n ranks failed (see below)" >&2
  echo "recovery bench: $n ranks, hang ($TRIALS trials)" >&2
  FTCOMM_HEARTBEAT_TIMEOUT_MS=10000 FTCOMM_TIMEOUT_MS=$HANG_MS \
    timeout -k 5 900 "$RUN" -n "$n" --min-size $((n - 1)) --replace --replace-delay 0.05 --quiet \
    --job "bench-hang-$n" --dump-dir "$tmp/dumps" -- "$PROG" --mode hang --kill-at "$KILL_AT" --trials "$TRIALS" \
    >"$tmp/hang-$n.log" 2>&1 || echo "recovery bench: the hang run at $n ranks failed (see below)" >&2
  echo "recovery bench: $n ranks, restart-everything baseline ($TRIALS runs)" >&2
  for i in $(seq 1 "$TRIALS"); do
    # One rank dies; the launcher sees it exit, kills the others (--grace 0)
    # and ends; the job is started again and bootstraps.
    FTCOMM_TIMEOUT_MS=20000 timeout -k 5 120 "$RUN" -n "$n" --grace 0 --quiet --job "bench-base-$n" \
      --dump-dir "$tmp/dumps" -- "$PROG" --mode crash --kill-at "$KILL_AT" --trials 1 --gap 5 >>"$tmp/base-$n.log" 2>&1
    timeout -k 5 120 "$RUN" -n "$n" --quiet --job "bench-base-$n" --dump-dir "$tmp/dumps" -- \
      "$PROG" --mode baseline >>"$tmp/base-$n.log" 2>&1
  done
done

python3 tests/bench/recovery/report.py "$tmp" >"$OUT/recovery.md"
cat "$OUT/recovery.md"
for f in "$tmp"/crash-*.log "$tmp"/create-*.log "$tmp"/hang-*.log; do
  # (a stopped victim, resumed for its SIGKILL, finds itself excluded: expected)
  if grep -E 'recovery_bench: |failed first' "$f" | grep -qv excluded; then
    echo "--- problems in $(basename "$f"):" >&2
    grep -E 'recovery_bench: |failed first' "$f" | grep -v excluded | head -5 >&2
  fi
done
