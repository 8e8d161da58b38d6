#!/usr/bin/env bash
# faults.sh [BUILD [CASE...]] - network faults between hosts, each rank of
# ftcomm-trainer and the coordinator (ftcomm-run) in a network namespace of
# their own (tests/net/lib.sh), faults made with blackhole routes.
#
# Every case runs FTC_NET_TRIALS times (default 1; `make bench-net-faults`
# runs 20) and checks, in every trial: ftcomm-run ends within its bound (no
# hang); exactly one group finishes (the expected number of ranks print a
# final line, all with the same parameter hash, all of one epoch's size); a
# cut rank never recovers into an epoch of its own and ends with a message
# saying why; where a rank is dropped, the others go on within the
# collective timeout + 1 s of the cut (the issue's target; measured from the
# cut to the first survivor's "recovered" line). The rule behind each case
# is in docs/recovery.md, "Network faults".
#
# FTC_NET_LOGS=DIR keeps every trial's output there.
# FTC_NET_CASES="CASE..." selects cases (as the arguments do); `faults.sh
# --list` prints them. Needs root and iproute2 (ip, tc).
set -uo pipefail
cd "$(dirname "$0")/../.."

CASES=(everyone peers coordinator asymmetric node flap-short flap-long coordinator-outage heal)
case ${1:-} in
  --list) printf '%s\n' "${CASES[@]}"; exit 0 ;;
  -h | --help) echo "usage: tests/net/faults.sh [BUILD [CASE...]] (FTC_NET_TRIALS=N)"; exit 0 ;;
  -*) echo "faults: unknown option $1" >&2; exit 2 ;;
esac
BUILD=${1:-${BUILD:-build/release}}
BIN=$(cd "$BUILD/bin" 2>/dev/null && pwd) || { echo "faults: no $BUILD/bin: build first (make)" >&2; exit 2; }
[ $# -gt 0 ] && shift
if [ $# -gt 0 ]; then selected=("$@"); else read -ra selected <<<"${FTC_NET_CASES:-${CASES[*]}}"; fi
for c in "${selected[@]}"; do
  [[ " ${CASES[*]} " == *" $c "* ]] || { echo "faults: no case '$c'; the cases: ${CASES[*]}" >&2; exit 2; }
done
TRIALS=${FTC_NET_TRIALS:-1}
case $TRIALS in '' | *[!0-9]* | 0) echo "faults: FTC_NET_TRIALS must be a positive number" >&2; exit 2 ;; esac
for b in ftcomm-run ftcomm-trainer; do
  [ -x "$BIN/$b" ] || { echo "faults: $BIN/$b is missing: build it (make)" >&2; exit 2; }
done
. tests/net/lib.sh
# Where network namespaces cannot be made (a container without
# CAP_SYS_ADMIN/CAP_NET_ADMIN) the suite says so and passes, unless
# FTC_NET_REQUIRED=1.
probe_ns=ftn-$$-probe
if ! ip netns add "$probe_ns" 2>/dev/null; then
  echo "skip: cannot create network namespaces here (root with CAP_SYS_ADMIN and CAP_NET_ADMIN, and iproute2, are needed)"
  [ "${FTC_NET_REQUIRED:-0}" = 1 ] && exit 1
  exit 0
fi
ip netns del "$probe_ns"
tmp=$(mktemp -d)
# (net_up replaces the trap with net_down; this one runs after the run's)
cleanup() { net_down; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

# Fast detection, as tests/recovery: heartbeats every 100 ms, a silent rank
# is dropped after 1.5 s, a collective times out after 4 s; a rank that
# cannot recover gives up after 8 s.
export FTCOMM_HEARTBEAT_MS=100 FTCOMM_HEARTBEAT_TIMEOUT_MS=1500 FTCOMM_TIMEOUT_MS=4000
export FTCOMM_CONNECT_TIMEOUT_MS=8000 FTCOMM_RECOVER_TIMEOUT_MS=8000
# Each rank listens on its namespace's eth0 and advertises that address.
export FTCOMM_BIND_HOST=0.0.0.0 FTCOMM_SOCKET_IFNAME==eth0
unset FTCOMM_FAULT FTCOMM_ADVERTISE_HOST
COLL_MS=$FTCOMM_TIMEOUT_MS
N=4
pass=0 fail=0
declare -A ok_trials went_on_max

# no WHY: a check failed for WHY (in $why).
no() { why=$*; return 1; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# start STEPS: ftcomm-run in the coordinator's namespace, each rank in its
# own (tests/net/in-ns.sh); output in $out, pid in $run_pid.
start() {
  export NET_ID
  net_in c "$PWD/tests/bounded.sh" "$2" "$BIN/ftcomm-run" --quiet --keep-excluded \
    --coordinator-host "$NET_COORD_ADDR" -n $N --min-size 2 --job "net-$case" \
    --dump-dir "$tmp/dumps" -- "$PWD/tests/net/in-ns.sh" "$BIN/ftcomm-trainer" --steps "$1" \
    --step-ms 20 --batch 96 --samples 2048 --seed 7 --log-every 10 >"$out" 2>&1 </dev/null &
  run_pid=$!
}

# wait_for REGEX SECONDS: until $out has a line matching REGEX (0), or not
# within SECONDS (1).
wait_for() {
  local i
  for i in $(seq 1 $(($2 * 20))); do
    grep -Eqs "$1" "$out" && return 0
    kill -0 "$run_pid" 2>/dev/null || { grep -Eqs "$1" "$out"; return; }
    sleep 0.05
  done
  return 1
}

# finals: the final lines, "SLOT RANK/SIZE HASH".
finals() { sed -n 's/^\[\([0-9]*\)\] final: rank \([0-9]*\/[0-9]*\) .* params_hash \([0-9a-f]*\).*/\1 \2 \3/p' "$out"; }

# judge WANT_FINISH CUT_SLOTS...: the checks every case shares; prints why not.
judge() {
  local want=$1 s n sizes hashes
  shift
  [ "$rc" = 124 ] && { no "ftcomm-run still ran after its bound (a hang)"; return 1; }
  [ "$rc" = 0 ] || { no "ftcomm-run exited $rc"; return 1; }
  n=$(finals | wc -l)
  [ "$n" = "$want" ] || { no "$n ranks finished, expected $want"; return 1; }
  hashes=$(finals | awk '{print $3}' | sort -u | wc -l)
  [ "$hashes" = 1 ] || { no "the finishers hold different parameters (a split brain)"; return 1; }
  sizes=$(finals | awk '{split($2, a, "/"); print a[2]}' | sort -u)
  [ "$sizes" = "$want" ] || { no "finishers of epochs of size(s) $sizes, not one group of $want"; return 1; }
  for s in "$@"; do
    if grep -q "^\[$s\] final:" "$out"; then no "cut slot $s finished: it trained on"; return 1; fi
    if grep -Eq "^\[$s\] ftcomm-trainer: recovered at step .* of 1 \(" "$out"; then
      no "cut slot $s recovered into an epoch of its own"; return 1
    fi
    grep -Eq "^\[$s\] ftcomm-trainer: .*(cannot recover|cannot join|excluded|refused)" "$out" ||
      { no "cut slot $s ended without saying why"; return 1; }
  done
  if grep -q 'Sanitizer' "$out"; then no "a sanitizer report"; return 1; fi
  return 0
}

# went_on SLOTS_LEFT: ms from the cut until a survivor recovered into an
# epoch of SLOTS_LEFT ranks; fails past the collective timeout + 1 s.
went_on() {
  wait_for "^\[[0-9]+\] ftcomm-trainer: recovered at step .* of $1 \(" $(((COLL_MS + 5000) / 1000)) ||
    { no "no survivor recovered into an epoch of $1 within $(((COLL_MS + 5000) / 1000)) s"; return 1; }
  took=$(($(now_ms) - t_cut))
  tooks+=("$took")
  [ "$took" -le $((COLL_MS + 1000)) ] ||
    { no "the others went on $took ms after the cut, past $((COLL_MS + 1000)) ms"; return 1; }
}

# cut_off SLOT: SLOT can reach nobody, nobody can reach it.
cut_off() { local p; for p in $(seq 0 $((N - 1))) c; do [ "$p" = "$1" ] || net_cut2 "$1" "$p"; done; }
heal_all() {
  local a b
  for a in $(seq 0 $((N - 1))) c; do for b in $(seq 0 $((N - 1))) c; do
    [ "$a" = "$b" ] || net_uncut "$a" "$b"; done; done
}

# ---- the cases: each sets up its fault after the start and checks ----
# (Each runs in the trial's namespaces; t_cut is set when the fault is made.)

fault_everyone() { cut_off 2; }
check_everyone() { went_on 3 || return 1; finish; judge 3 2; }

fault_peers() { local p; for p in 0 1 3; do net_cut2 2 $p; done; }
check_peers() { went_on 3 || return 1; finish; judge 3 2; }

fault_coordinator() { net_cut2 2 c; }
check_coordinator() { went_on 3 || return 1; finish; judge 3 2; }

# Rank 1 cannot send to rank 0; rank 0's packets reach rank 1 (TCP needs
# both ways, so neither connects to the other). Ranks 0 and 1 exchange data
# in every allreduce (the first pair of recursive doubling, ring
# neighbours). The rule drops one side of an even cut: the higher rank.
fault_asymmetric() { net_cut 1 0; }
check_asymmetric() {
  went_on 3 || return 1
  finish
  local dropped
  if grep -q '^\[1\] final:' "$out"; then dropped=0; else dropped=1; fi
  judge 3 "$dropped" || return 1
  [ "$dropped" = 1 ] || { no "slot 0 was dropped, the rule drops the higher rank (1)"; return 1; }
}

# A "node" of slots 2 and 3 cut from everyone (the other node and the
# coordinator); between them the link works.
fault_node() { local p; for p in 0 1 c; do net_cut2 2 $p; net_cut2 3 $p; done; }
check_node() { went_on 2 || return 1; finish; judge 2 2 3; }

# Shorter than the heartbeat timeout: nobody is dropped, nothing fails.
fault_flap-short() { cut_off 2; sleep 0.5; heal_all; }
check_flap-short() {
  finish
  judge 4 || return 1
  if grep -Eq 'step [0-9]+ failed|recovered at step' "$out"; then no "a step failed after a 0.5 s flap"; return 1; fi
}

# judge_back SLOT: after a heal, the cut rank either ended with a message
# (3 finish) or came back as a joiner: admitted as a new rank, it took the
# model from a survivor and finished with the others (4 finish, identical).
judge_back() {
  if grep -q "^\[$1\] final:" "$out"; then
    grep -Eq "^\[$1\] ftcomm-trainer: rank [0-9]+: took the model at step" "$out" ||
      { no "cut slot $1 finished without taking the model as a joiner: it trained on its own"; return 1; }
    judge 4 || return 1
    rejoined=$((rejoined + 1))
  else
    judge 3 "$1"
  fi
}

# Longer (3 s > 1.5 s): the rank is dropped and the others go on; when the
# link comes back the rank is refused (it ends) or rejoins as a joiner.
fault_flap-long() { cut_off 2; sleep 3; heal_all; }
check_flap-long() { went_on 3 || return 1; finish; judge_back 2; }

# The coordinator unreachable from every rank for 30 s: training goes on,
# no step fails, nobody is dropped; the sessions come back.
# (a rank reconnects for FTCOMM_CONNECT_TIMEOUT_MS: its default, 60 s, here)
fault_coordinator-outage() { local p; for p in $(seq 0 $((N - 1))); do net_cut2 c "$p"; done; sleep 30; heal_all; }
check_coordinator-outage() {
  finish
  judge 4 || return 1
  if grep -Eq 'step [0-9]+ failed|recovered at step' "$out"; then no "a step failed while the coordinator was away"; return 1; fi
}

# Cut from everyone, healed 3 s after the job went on, while the cut rank
# still tries to recover: refused by the new epoch, it ends or rejoins.
fault_heal() { cut_off 2; }
check_heal() {
  went_on 3 || return 1
  sleep 3
  heal_all
  finish
  judge_back 2
}

# finish: wait for ftcomm-run (its bound is bounded.sh's) and take its status.
finish() { wait "$run_pid"; rc=$?; run_pid=; }

steps_of() { case $1 in coordinator-outage) echo 2200 ;; *) echo 400 ;; esac; }

trial() {
  local t=$2 why
  case=$1 out=$tmp/$1-$t.out rc=
  net_up $N || { echo "FAIL $case #$t: cannot make the namespaces"; return 1; }
  trap cleanup EXIT
  trap 'cleanup; exit 130' INT
  trap 'cleanup; exit 143' TERM
  if [ "$case" = coordinator-outage ]; then
    FTCOMM_CONNECT_TIMEOUT_MS=60000 start "$(steps_of "$case")" 120
  else
    start "$(steps_of "$case")" 120
  fi
  if ! wait_for '^\[0\] step +20 ' 30; then
    finish; why="training did not start (ftcomm-run exited $rc)"
  else
    t_cut=$(now_ms)
    # (a fault that heals later runs beside the check, which times the
    # others' recovery from the cut)
    "fault_$case" &
    fault_pid=$!
    [[ $case = flap-* || $case = coordinator-outage ]] || wait "$fault_pid"
    why=
    "check_$case"
    wait "$fault_pid"
  fi
  [ -n "$run_pid" ] && finish
  net_down
  [ -n "${FTC_NET_LOGS:-}" ] && mkdir -p "$FTC_NET_LOGS" && cp "$out" "$FTC_NET_LOGS/"
  if [ -z "$why" ]; then
    return 0
  fi
  echo "FAIL $case #$t: $why"
  sed 's/^/    | /' "$out" | grep -v '\] step ' | tail -n 30
  return 1
}

for case in "${selected[@]}"; do
  good=0 t0=$SECONDS tooks=() rejoined=0
  for t in $(seq 1 "$TRIALS"); do
    if trial "$case" "$t"; then good=$((good + 1)); fi
  done
  if [ $good = "$TRIALS" ]; then
    went=
    [ ${#tooks[@]} -gt 0 ] && went=$(printf '%s\n' "${tooks[@]}" | sort -n |
      awk '{ v[NR] = $1 } END { printf "; the others went on %d..%d ms after the cut (median %d)", v[1], v[NR], v[int((NR + 1) / 2)] }')
    [[ $case = flap-long || $case = heal ]] && went+="; the cut rank rejoined as a joiner in $rejoined, ended in $((TRIALS - rejoined))"
    echo "ok   $case: $good/$TRIALS trials$went ($((SECONDS - t0)) s)"; pass=$((pass + 1))
  else
    echo "FAIL $case: $good/$TRIALS trials ($((SECONDS - t0)) s)"; fail=$((fail + 1))
  fi
done
echo "net faults: $pass passed, $fail failed"
[ $fail = 0 ]
