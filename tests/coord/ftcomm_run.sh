#!/usr/bin/env bash
# ftcomm_run.sh - ftcomm-run from the outside: the exit code and the rank of
# the first failure, output prefixing, the environment each rank gets, a real
# join through the hosted coordinator, Ctrl-C forwarding, straggler kill,
# --timeout, the terminal status line and the command-line errors.
#   tests/coord/ftcomm_run.sh [BUILD_DIR]     (default build/release)
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-${BUILD:-build/release}}
RUN=$BUILD/bin/ftcomm-run
PROBE=$BUILD/tests/coord/member_probe
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0

check() { # check NAME CONDITION-RESULT(0/1) DETAIL
  if [ "$2" = 0 ]; then
    pass=$((pass + 1)); echo "ok   $1"
  else
    fail=$((fail + 1)); echo "FAIL $1: $3"
    for f in "$T"/out "$T"/err; do [ -f "$f" ] && sed "s|^|     $(basename "$f"): |" "$f" | tail -n 20; done
  fi
}
has() { grep -q -- "$2" "$1"; echo $?; }

# 1. The first failing rank's exit code and which rank it was.
timeout 60 "$RUN" -n 3 -- sh -c 'exit $((FTCOMM_SLOT==1 ? 7 : 0))' >"$T/out" 2>"$T/err"
rc=$?
check "exit code of the failing rank" $([ $rc = 7 ]; echo $?) "rc=$rc, want 7"
check "names the failing rank and its code" $(has "$T/err" "rank 1 failed first: it exited with code 7") "no summary line"

timeout 60 "$RUN" -n 3 -- sh -c '[ $FTCOMM_SLOT = 2 ] && kill -9 $$; exit 0' >"$T/out" 2>"$T/err"
rc=$?
check "a rank killed by a signal gives 128+N" $([ $rc = 137 ]; echo $?) "rc=$rc, want 137"
check "names the signal" $(has "$T/err" "rank 2 failed first: it was killed by signal 9") "no signal summary"

timeout 60 "$RUN" -n 2 -- true >"$T/out" 2>"$T/err"
rc=$?
check "all ranks exit 0 gives 0" $([ $rc = 0 ]; echo $?) "rc=$rc"

# With --min-size below -n, losing ranks is survivable until the minimum.
timeout 60 "$RUN" -n 3 --min-size 2 -- sh -c '[ $FTCOMM_SLOT = 1 ] && exit 9; sleep 1; echo survived' >"$T/out" 2>"$T/err"
rc=$?
check "a tolerated failure does not stop the job (exit 0)" $([ $rc = 0 ] && [ "$(grep -c survived "$T/out")" = 2 ]; echo $?) "rc=$rc"
check "says the job went on" $(has "$T/err" "rank 1 exited with code 9; the job goes on with 2 of 3 ranks") "no message"
timeout 60 "$RUN" -n 3 --min-size 2 --grace 0.5 -- sh -c '[ $FTCOMM_SLOT = 0 ] && exec sleep 30; exit $((FTCOMM_SLOT + 10))' >"$T/out" 2>"$T/err"
rc=$?
check "going below --min-size stops the job with the first failure's code" $([ $rc = 11 ] || [ $rc = 12 ]; echo $?) "rc=$rc"
check "says it stops" $(has "$T/err" "stopping the other ranks") "no message"

# In such a job the coordinator's decisions are reported: the lost rank, the next epoch.
timeout 60 "$RUN" -n 3 --min-size 2 -- sh -c 'if [ $FTCOMM_SLOT = 2 ]; then exec timeout -s KILL 0.5 "$0" 5000; fi; exec "$0" 1500' "$PROBE" >"$T/out" 2>"$T/err"
rc=$?
check "a killed rank in a tolerant job: exit 0" $([ $rc = 0 ]; echo $?) "rc=$rc"
check "reports the lost rank" $(has "$T/err" "slot 2 (rank 2 of epoch 1) was killed by signal 9") "no message"
check "reports the next epoch" $(has "$T/err" "epoch 2: 2 ranks") "no message"
# A rank that is ftcomm-run's own child (exec'd, not behind timeout): its session closes
# while the kernel tears it down, and ftcomm-run, asked by its coordinator, finds it
# exiting in /proc (or, on a crowded host, its SIGCHLD comes first).
timeout 60 "$RUN" -n 3 --min-size 2 -- sh -c 'if [ $FTCOMM_SLOT = 2 ]; then (sleep 0.5; kill -9 $$) & exec "$0" 5000; fi; exec "$0" 1500' "$PROBE" >"$T/out" 2>"$T/err"
rc=$?
check "a killed child rank in a tolerant job: exit 0" $([ $rc = 0 ]; echo $?) "rc=$rc"
check "reports it lost" $(grep -qE "slot 2 \(rank 2 of epoch 1\) (its process is exiting \(its session closed as it died\)|was killed by signal 9)" "$T/err"; echo $?) "$(cat "$T/err")"
grep -o "slot 2 (rank 2 of epoch 1) [^;]*" "$T/err" | sed 's/^/# /'
check "and does not try to kill it again" $(grep -q "slot 2 (pid [0-9]*) .*killing it" "$T/err"; [ $? = 1 ]; echo $?) "$(cat "$T/err")"

# 2. Output lines carry the slot, on the stream the rank wrote them to.
timeout 60 "$RUN" -n 3 -- sh -c 'echo "line one"; echo "line two"; echo "oops $FTCOMM_SLOT" >&2; printf "no newline"' >"$T/out" 2>"$T/err"
ok=0
for s in 0 1 2; do
  grep -qx "\[$s\] line one" "$T/out" && grep -qx "\[$s\] line two" "$T/out" &&
    grep -qx "\[$s\] no newline" "$T/out" && grep -qx "\[$s\] oops $s" "$T/err" || ok=1
done
check "stdout and stderr lines are prefixed with the slot" $ok "missing prefixed lines"
check "no unprefixed line on stdout" $(grep -qv '^\[[0-9]\] ' "$T/out"; [ $? = 1 ]; echo $?) "stray line"

# 3. The environment of each rank.
timeout 60 "$RUN" -n 2 --job envjob --min-size 1 --dump-dir "$T/dumps" -- \
  sh -c 'echo "$FTCOMM_JOB|$FTCOMM_COORDINATOR|$FTCOMM_TOKEN|$FTCOMM_SLOT|$FTCOMM_WORLD_SIZE|$FTCOMM_MIN_SIZE|$FTCOMM_DUMP_DIR"' >"$T/out" 2>"$T/err"
ok=0
for s in 0 1; do
  grep -Eq "^\[$s\] envjob\|127\.0\.0\.1:[0-9]+\|[0-9a-f]{64}\|$s\|2\|1\|$T/dumps\$" "$T/out" || ok=1
done
check "FTCOMM_* environment is set for every rank" $ok "bad environment"
check "dump directory is created" $([ -d "$T/dumps" ]; echo $?) "no $T/dumps"
tok1=$(sed -n 's/^\[0\] [^|]*|[^|]*|\([^|]*\)|.*/\1/p' "$T/out")
timeout 60 "$RUN" -n 1 -- sh -c 'echo "$FTCOMM_TOKEN"' >"$T/out" 2>"$T/err"
tok2=$(sed -n 's/^\[0\] //p' "$T/out")
check "a fresh token per run" $([ -n "$tok1" ] && [ "$tok1" != "$tok2" ]; echo $?) "$tok1 vs $tok2"

# 3b. Scheduling: the launcher's own thread is SCHED_BATCH (it waits for the
# running thread's turn); the coordinator thread and the ranks keep the
# policy ftcomm-run was started with, SCHED_OTHER or the user's own.
policies='chrt -p $$ | head -1; for t in /proc/$PPID/task/*; do echo "$(cat $t/comm): $(chrt -p ${t##*/} | head -1)"; done'
timeout 60 "$RUN" -n 1 --quiet -- sh -c "$policies" >"$T/out" 2>"$T/err"
ok=0
grep -Eq "^\[0\] pid [0-9]+'s current scheduling policy: SCHED_OTHER$" "$T/out" || ok=1
grep -Eq "^\[0\] ftcomm-run: .*policy: SCHED_BATCH$" "$T/out" || ok=1
grep -Eq "^\[0\] ftc-coord: .*policy: SCHED_OTHER$" "$T/out" || ok=1
check "main is SCHED_BATCH; the coordinator thread and the ranks SCHED_OTHER" $ok "$(tr '\n' ' ' <"$T/out")"
timeout 60 chrt -i 0 "$RUN" -n 1 --quiet -- sh -c "$policies" >"$T/out" 2>"$T/err"
# (the rank, main, ftc-coord; under ThreadSanitizer also its own thread, named as main)
check "started as SCHED_IDLE, all of them stay SCHED_IDLE" \
  $([ "$(grep -c 'policy: SCHED_IDLE$' "$T/out")" -ge 3 ] && ! grep 'policy:' "$T/out" | grep -qv 'SCHED_IDLE$'; echo $?) "$(tr '\n' ' ' <"$T/out")"

# 4. Ranks really join the hosted coordinator: epoch 1, rank = slot.
timeout 60 "$RUN" -n 4 -- "$PROBE" >"$T/out" 2>"$T/err"
rc=$?
ok=$([ $rc = 0 ]; echo $?)
for s in 0 1 2 3; do grep -qx "\[$s\] rank $s of 4 epoch 1 slot $s" "$T/out" || ok=1; done
check "4 ranks join and form epoch 1 through ftcomm-run" $ok "rc=$rc"
timeout 60 "$RUN" -n 2 -- env FTCOMM_TOKEN=wrong "$PROBE" >"$T/out" 2>"$T/err"
rc=$?
check "a rank with a wrong token fails with FTC_ERR_AUTH (7)" $([ $rc = 7 ]; echo $?) "rc=$rc"

# 5. SIGINT is forwarded once to every rank; the run ends with their code.
"$RUN" -n 3 -- sh -c 'trap "echo got INT; exit 5" INT; echo ready; sleep 30 & wait $!' >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 100); do [ "$(grep -c ready "$T/out")" = 3 ] && break; sleep 0.1; done
kill -INT $pid
t0=$(date +%s)
wait $pid
rc=$?
ok=$([ $rc = 5 ]; echo $?)
for s in 0 1 2; do [ "$(grep -c "^\[$s\] got INT" "$T/out")" = 1 ] || ok=1; done
check "SIGINT reaches each rank once; exit code is the ranks'" $ok "rc=$rc"
check "SIGINT run ends promptly" $([ $(($(date +%s) - t0)) -lt 10 ]; echo $?) "took too long"
check "says who sent it (this script's shell)" $(grep -q "got Interrupt; forwarding it to the ranks (again to kill them now) (sent by pid $$: .*ftcomm_run.sh" "$T/err"; echo $?) "$(cat "$T/err")"

# A second SIGINT kills ranks that ignore the first.
"$RUN" -n 2 --grace 30 -- sh -c 'trap "" INT TERM; echo ready; while :; do sleep 0.1; done' >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 100); do [ "$(grep -c ready "$T/out")" = 2 ] && break; sleep 0.1; done
kill -INT $pid; sleep 0.5; kill -INT $pid
t0=$(date +%s)
wait $pid
rc=$?
check "a second SIGINT kills the ranks at once" $([ $rc != 0 ] && [ $(($(date +%s) - t0)) -lt 10 ]; echo $?) "rc=$rc"
check "says it kills them" $(has "$T/err" "again; killing the ranks") "no message"

# SIGUSR1 is forwarded and the run goes on.
"$RUN" -n 2 -- sh -c 'trap "echo got USR1" USR1; echo ready; sleep 2 & wait $!; wait $!; echo done' >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 100); do [ "$(grep -c ready "$T/out")" = 2 ] && break; sleep 0.1; done
kill -USR1 $pid
wait $pid
rc=$?
ok=$([ $rc = 0 ]; echo $?)
for s in 0 1; do grep -qx "\[$s\] got USR1" "$T/out" && grep -qx "\[$s\] done" "$T/out" || ok=1; done
check "SIGUSR1 reaches every rank and does not stop the run" $ok "rc=$rc"

# 6. After the first failure, stragglers get SIGTERM after the grace period
# (a rank writes the dumps it captured first), and those that ignore it are
# killed FTCOMM_DUMP_DRAIN_MS + 0.5 s later.
t0=$(date +%s%N)
FTCOMM_DUMP_DRAIN_MS=1000 timeout 60 "$RUN" -n 3 --grace 1 -- sh -c 'trap "" TERM; [ $FTCOMM_SLOT = 0 ] && exit 3; sleep 51.7' >"$T/out" 2>"$T/err"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
check "straggler run exits with the first failure's code" $([ $rc = 3 ]; echo $?) "rc=$rc"
check "stragglers are killed after the grace period and the dump drain" $([ $ms -ge 2400 ] && [ $ms -lt 10000 ]; echo $?) "took ${ms} ms"
check "stragglers get SIGTERM first" $(has "$T/err" "stopping 2 ranks still running after the grace period (SIGTERM; SIGKILL in 1.5 s") "no message"
check "says how many stragglers it killed" $(has "$T/err" "killing 2 ranks still running") "no message"
check "no straggler left behind" $(pgrep -f "sleep 51.7" >/dev/null; [ $? = 1 ]; echo $?) "a sleep 51.7 survived"

# 7. --timeout bounds the whole run.
t0=$(date +%s)
timeout 60 "$RUN" -n 2 --timeout 1 -- sleep 30 >"$T/out" 2>"$T/err"
rc=$?
check "--timeout exits 124" $([ $rc = 124 ]; echo $?) "rc=$rc"
check "--timeout is prompt" $([ $(($(date +%s) - t0)) -lt 8 ]; echo $?) "too slow"
check "--timeout says so" $(has "$T/err" "timed out after 1 s") "no message"

# 8. A status line on a terminal (script(1) gives ftcomm-run a pty).
if command -v script >/dev/null; then
  timeout 60 script -qec "$RUN -n 2 -- $PROBE 800" /dev/null >"$T/out" 2>&1
  check "status line on a terminal" $(has "$T/out" "ranks alive, epoch 1") "no status line"
  timeout 60 "$RUN" -n 2 -- "$PROBE" 300 >"$T/out" 2>"$T/err"
  check "no status line when stderr is not a terminal" $(grep -q "ranks alive" "$T/err"; [ $? = 1 ]; echo $?) "status on a pipe"
fi

# 8b. --replace backs off a replacement that keeps failing at once: with a
# 0.05 s delay, 2.5 s hold about 5 restarts (0.05, 0.1, 0.2, 0.4, 0.8 ...),
# not the ~40 of a fixed delay.
timeout 60 "$RUN" -n 2 --replace --replace-delay 0.05 --grace 0.5 -- \
  sh -c '[ "${FTCOMM_JOINER:-0}" = 1 ] && exit 3; [ $FTCOMM_SLOT = 1 ] && exit 5; sleep 2.5' >"$T/out" 2>"$T/err"
restarts=$(grep -c "restarted rank 1 as a joiner" "$T/err")
check "--replace backs off a replacement that fails at once" \
  $([ "$restarts" -ge 3 ] && [ "$restarts" -le 8 ] && grep -q "exited within 10 s of its start, 2 times in a row: backing off" "$T/err"; echo $?) \
  "$restarts restarts in 2.5 s, want 3 to 8, and the backing-off line"

# ... but not one killed by a signal (the node's, an operator's or --inject's
# doing; every trial of the recovery benchmark kills a replacement).
timeout 60 "$RUN" -n 2 --replace --replace-delay 0.05 --grace 0.5 -- \
  sh -c '[ "${FTCOMM_JOINER:-0}" = 1 ] && kill -9 $$; [ $FTCOMM_SLOT = 1 ] && exit 5; sleep 1.5' >"$T/out" 2>"$T/err"
restarts=$(grep -c "restarted rank 1 as a joiner" "$T/err")
check "--replace does not back off a replacement killed by a signal" \
  $([ "$restarts" -ge 10 ] && ! grep -q "backing off" "$T/err"; echo $?) \
  "$restarts restarts in 1.5 s, want 10 or more, and no backing off"

# 9. The command line.
"$RUN" --help >"$T/out" 2>"$T/err"; rc=$?
check "--help" $([ $rc = 0 ] && grep -q -- "--timeout SECONDS" "$T/out"; echo $?) "rc=$rc"
"$RUN" --version >"$T/out" 2>"$T/err"; rc=$?
check "--version" $([ $rc = 0 ] && grep -q "^ftcomm-run (ftcomm) [0-9]" "$T/out"; echo $?) "rc=$rc"
for bad in "-n 0 -- true" "-n x -- true" "-- true" "-n 2" "--bogus -n 1 -- true" "-n 2 --min-size 3 -- true" "-n 1 --timeout -1 -- true" "-n 1 --job" "-n 2 --inject kill:+1@3 -- true" "-n 2 --inject kill:1@1234567890123 -- true"; do
  # shellcheck disable=SC2086
  "$RUN" $bad >"$T/out" 2>"$T/err"; rc=$?
  check "bad command line '$bad' exits 2 with a message" $([ $rc = 2 ] && [ -s "$T/err" ]; echo $?) "rc=$rc"
done
"$RUN" -n 1 -- /no/such/program >"$T/out" 2>"$T/err"; rc=$?
check "a missing program exits 127" $([ $rc = 127 ] && grep -q "cannot run /no/such/program" "$T/err"; echo $?) "rc=$rc"

echo "ftcomm_run.sh: $pass passed, $fail failed"
[ $fail = 0 ]
