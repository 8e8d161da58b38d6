#!/usr/bin/env bash
# recovery.sh [BUILD [CASE...]] - recovery end to end: ftcomm-trainer under ftcomm-run
# with faults injected through --inject (FTCOMM_FAULT in the target rank).
# Every case is bounded by `timeout` and checks behaviour: the run's exit
# status, how many ranks finish, that every finishing rank holds the same
# parameter bytes, and that the final loss matches the failure-free run
# within 1e-8 relative (the global batch is fixed and re-split over the
# current ranks, so only the floating-point summation order differs; see
# docs/recovery.md).
#
# Every case runs, in the order of CASES below, unless CASE names (or
# FTC_RECOVERY_CASES="CASE...", for `make test`) select some: those run, in
# the suite's order, and the failure-free reference once, before the first
# check that compares a loss with it. FTC_RECOVERY_SKIP="CASE..." leaves cases
# out.
# `recovery.sh --list` prints the names. BUILD defaults to $BUILD, then
# build/release.
set -uo pipefail
cd "$(dirname "$0")/../.."

# The cases, by the name each gives `run` (two-joiners: its rounds are
# two-joiners-1..3), each a function case_NAME below.
CASES=(kill-rank0 kill-rank1 kill-rank3 two-kills one-report kill-in-recovery replace grow late-view
  late-view-dropped joiner-killed two-joiners superseded-connected stopped ten-failures
  dropped-connection late-completion coord-restart blink below-min late-verdict wrong-token
  garbage joiner-differs slow-disk ipv6-replace)
usage="usage: tests/recovery/recovery.sh [BUILD [CASE...]], or --list for the CASE names"
# one_of WORD LIST...: WORD is one of LIST.
one_of() {
  local w=$1 x
  shift
  for x in "$@"; do [ "$x" = "$w" ] && return 0; done
  return 1
}
case ${1:-} in
  --list) printf '%s\n' "${CASES[@]}"; exit 0 ;;
  -h | --help) echo "$usage"; exit 0 ;;
  -*) echo "recovery: unknown option $1; $usage" >&2; exit 2 ;;
esac
BUILD=${1:-${BUILD:-build/release}}
BIN=$BUILD/bin
[ $# -gt 0 ] && shift
from="the arguments"
if [ $# -gt 0 ]; then selected=("$@"); else from=FTC_RECOVERY_CASES; read -ra selected <<<"${FTC_RECOVERY_CASES:-}"; fi
read -ra skip <<<"${FTC_RECOVERY_SKIP:-}"
for c in "${selected[@]}"; do
  one_of "$c" "${CASES[@]}" || { echo "recovery: no case named '$c' (in $from); the cases are: ${CASES[*]}" >&2; exit 2; }
done
for c in "${skip[@]}"; do
  one_of "$c" "${CASES[@]}" || { echo "recovery: no case named '$c' (in FTC_RECOVERY_SKIP); the cases are: ${CASES[*]}" >&2; exit 2; }
done
if ! [ -x "$BIN/ftcomm-run" ] || ! [ -x "$BIN/ftcomm-trainer" ]; then
  if one_of "$BUILD" "${CASES[@]}"; then
    echo "recovery: '$BUILD' is a case, not a build directory: name the build first, as in tests/recovery/recovery.sh build/release $BUILD" >&2
  else
    echo "recovery: $BIN/ftcomm-run or $BIN/ftcomm-trainer is missing: build them (make), or pass the build directory first ($usage)" >&2
  fi
  exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Fast detection for tests: heartbeats every 100 ms, a silent rank is
# dropped after 1.5 s, a collective times out after 4 s.
export FTCOMM_HEARTBEAT_MS=100 FTCOMM_HEARTBEAT_TIMEOUT_MS=1500 FTCOMM_TIMEOUT_MS=4000
export FTCOMM_CONNECT_TIMEOUT_MS=20000 FTCOMM_RECOVER_TIMEOUT_MS=20000
unset FTCOMM_FAULT
TRAIN=(--steps 60 --step-ms 5 --batch 96 --samples 2048 --seed 7 --log-every 1000)
pass=0 fail=0 ref_loss=

# run NAME LIMIT_S FTCOMM-RUN-ARGS... -- PROGRAM...: output in $tmp/NAME.out, status in $tmp/NAME.rc
run() {
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  # (past the limit, every process's stacks go into the case's output: a hang
  # is then more than "it timed out")
  tests/bounded.sh "$limit" "$BIN/ftcomm-run" --quiet --dump-dir "$tmp/dumps-$name" --job "rec-$name" "$@" \
    >"$tmp/$name.out" 2>&1 </dev/null
  echo $? >"$tmp/$name.rc"
  echo "     ($name: $((SECONDS - t0)) s)"
}
finals() { grep -o 'final: rank [0-9]*/[0-9]* loss [^ ]* checksum [^ ]* params_hash [0-9a-f]*' "$tmp/$1.out"; }
bad() {
  echo "FAIL $1: $2"
  # all of a case that ran past its limit (the stacks), the end of any other
  if [ "$(cat "$tmp/$1.rc" 2>/dev/null)" = 124 ]; then sed 's/^/    | /' "$tmp/$1.out"
  else sed 's/^/    | /' "$tmp/$1.out" | tail -n 40; fi
  fail=$((fail + 1))
}
ok() { echo "ok   $1${2:+: $2}"; pass=$((pass + 1)); }

# check NAME EXPECTED_RANKS: exit 0, that many identical finishers, loss as the reference
# (not with other_run=1: a run with other trainer arguments than TRAIN).
check() {
  local name=$1 want=$2
  local rc n hashes loss
  rc=$(cat "$tmp/$name.rc")
  [ "$rc" = 0 ] || { bad "$name" "ftcomm-run exited $rc"; return 1; }
  # Under SANITIZE=..., a report from any rank fails the case.
  if grep -q 'Sanitizer' "$tmp/$name.out"; then bad "$name" "a sanitizer report"; return 1; fi
  n=$(finals "$name" | wc -l)
  [ "$n" = "$want" ] || { bad "$name" "$n ranks finished, expected $want"; return 1; }
  hashes=$(finals "$name" | awk '{print $9}' | sort -u | wc -l)
  [ "$hashes" = 1 ] || { bad "$name" "ranks ended with different parameters"; return 1; }
  # A collective timeout here would mean ranks ran different collectives
  # (or waited on a dead peer) instead of being told at once.
  if [ "${allow_timeouts:-}" != 1 ] && grep -q 'operation timed out' "$tmp/$name.out"; then
    bad "$name" "a collective timed out"; return 1
  fi
  [ "${other_run:-}" = 1 ] && return 0
  need_reference
  loss=$(finals "$name" | head -1 | awk '{print $5}')
  awk -v a="$loss" -v b="$ref_loss" 'BEGIN { r = (a - b) / b; if (r < 0) r = -r; exit !(r <= 1e-8) }' ||
    { bad "$name" "final loss $loss, failure-free run $ref_loss"; return 1; }
  return 0
}

# need_reference: the failure-free reference's loss in ref_loss, from its
# run (once); without it the suite stops.
need_reference() {
  [ -n "$ref_loss" ] && return 0
  run reference 60 -n 4 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  ref_loss=$(finals reference | head -1 | awk '{print $5}')
  if [ -z "$ref_loss" ]; then bad reference "no final line"; echo "recovery: the reference run failed"; exit 1; fi
}

# verdict_names NAME RANK REASON: every survivor's failure dump (the newest
# dump of each rank in the job's dump directory, incidents aside) carries the
# coordinator's verdict dropping RANK for REASON, and ftcomm-trace agrees.
verdict_names() {
  local name=$1 rank=$2 reason=$3 why
  why=$(python3 tests/recovery/failure_dumps.py "$tmp/dumps-$name" "$rank" "$reason" 2>&1) || { bad "$name" "$why"; return 1; }
  local head
  head=$("$BIN/ftcomm-trace" "$tmp/dumps-$name" 2>/dev/null | head -1)
  case $head in
    *"coordinator agrees: rank $rank $reason"* | "VERDICT: rank $rank $reason"*) ;;
    *) bad "$name" "ftcomm-trace does not name rank $rank ($reason) from the verdict: $head"; return 1 ;;
  esac
  echo "     ($name: $why; trace: $head)"
}

# lost_names NAME RANK REASON: every survivor's ftc_comm_lost after its
# recovery (the trainer prints it) names RANK of the epoch before, for REASON.
lost_names() {
  local n
  n=$(grep -c "ftcomm-trainer: epoch [0-9]* left out rank $2 (slot $2) of the epoch before: $3\$" "$tmp/$1.out")
  [ "$n" = 3 ] || { bad "$1" "$n survivors' ftc_comm_lost name rank $2 ($3), want 3"; return 1; }
}

kill_at() { # a kill at rank position $1 shrinks the job to 3
  local name=kill-rank$1
  run "$name" 60 -n 4 --min-size 2 --inject "kill:$1@5" -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  check "$name" 3 && verdict_names "$name" "$1" crashed && lost_names "$name" "$1" crashed &&
    ok "$name" "3 survivors, identical parameters, loss $ref_loss; their failure dumps and ftc_comm_lost name rank $1 (crashed)"
}
case_kill-rank0() { kill_at 0; }
case_kill-rank1() { kill_at 1; }
case_kill-rank3() { kill_at 3; }

case_two-kills() {
  run two-kills 60 -n 4 --min-size 2 --inject kill:1@5 --inject kill:2@5 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  check two-kills 2 && ok two-kills "2 survivors"
}

# Rank 2 dies: its successor, rank 3, reports it; ranks 0 and 1 saw its
# connections end too but hold their reports back (here for a minute, far
# beyond the next epoch), and a held report of an epoch already replaced is
# never sent. The coordinator forms the next epoch on the one report (or on
# ftcomm-run's word that the slot is lost, whichever comes first). TCP only:
# the NCCL backend's watchdog reports once the coordinator's epoch names
# whom to blame.
case_one-report() {
  if [ "${FTCOMM_BACKEND:-tcp}" != tcp ]; then
    echo "skip one-report: FTCOMM_BACKEND=${FTCOMM_BACKEND} (the TCP data plane sees the peer's end)"
    return
  fi
  FTCOMM_REPORT_DEFER_MS=60000 FTCOMM_LOG_LEVEL=debug FTCOMM_LOG_SUBSYS=coord,recovery \
    run one-report 60 -n 4 --min-size 3 --inject kill:2@5 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  check one-report 3 || return
  local o=$tmp/one-report.out
  if grep -E '^\[[01]\] .*reporting [0-9]+ failed rank.* in epoch 1 ' "$o"; then
    bad one-report "rank 0 or 1 reported rank 2's end, which its successor reports"
  elif ! grep -qE '^\[[01]\] .*epoch 1: rank 2.s connection ended; its successor reports it' "$o" &&
    ! grep -qE '^\[[01]\] .*epoch 1 failed.*not reported, epoch [0-9]+ is formed' "$o"; then
    bad one-report "neither rank 0 nor rank 1 held a report back or dropped a stale one"
  else
    ok one-report "only rank 3, rank 2's successor, reported it ($(grep -cE 'reporting [0-9]+ failed rank.* in epoch 1 ' "$o") report)"
  fi
}

# Rank 0 dies; rank 2 dies in the recovery that follows, after learning the
# new epoch and before connecting it: the others move on to the next one.
case_kill-in-recovery() {
  run kill-in-recovery 60 -n 4 --min-size 2 --inject kill:0@5 --inject kill-recover:2@1 -- \
    "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  if check kill-in-recovery 2; then
    grep -q 'killing this process in recovery 1' "$tmp/kill-in-recovery.out" &&
      ok kill-in-recovery "2 survivors" || bad kill-in-recovery "the kill during recovery did not happen"
  fi
}

case_replace() {
  run replace 60 -n 4 --replace --replace-delay 0.2 --inject kill:1@5 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  if check replace 4; then
    grep -q 'joined at epoch' "$tmp/replace.out" && grep -q 'took the model at step' "$tmp/replace.out" &&
      ok replace "the replacement joined, got the model and finished with the others" ||
      bad replace "no joiner took the model"
  fi
}

# A joiner that grows a job running at reduced size (min 3 of 4).
# The survivors connect to the joiner between steps, once it is announced
# (logged at info by net: "... made early"), before the step boundary, and
# keep their connections among themselves at it (the grow is the very next
# epoch after the shrink: "... socket(s) kept from epoch ..."); the
# steps are 30 ms apart so that even a slow (sanitized) joiner is in its
# bootstrap by then. The joiner (rank 2) makes none of those connections: it
# accepts those of ranks 0 and 1 too (debug: "rank 2 accepted rank 0 (socket
# 0)"; a spare's line says "spare"), where the rank rule has it connect. The
# replacement "loads a model" for 200 ms between ftc_comm_create_begin and
# _finish: the others connect to it on the coordinator's prospect meanwhile,
# and it finds their handshakes waiting ("accepted while standby").
case_grow() {
  FTCOMM_LOG_LEVEL=debug FTCOMM_LOG_SUBSYS=net run grow 60 -n 4 --min-size 3 --replace \
    --replace-delay 0.2 --inject kill:2@5 -- \
    "$BIN/ftcomm-trainer" --steps 80 --step-ms 30 --start-ms 200 --batch 96 --samples 2048 \
    --seed 7 --log-every 1000
  if [ "$(cat "$tmp/grow.rc")" = 0 ] && [ "$(finals grow | wc -l)" = 4 ] &&
     [ "$(finals grow | awk '{print $9}' | sort -u | wc -l)" = 1 ] &&
     grep -q 'joined (new ranks: 2), now rank' "$tmp/grow.out" &&
     { [ "${FTCOMM_BACKEND:-tcp}" != tcp ] || { grep -q 'to new members made early' "$tmp/grow.out" &&
       grep -q 'socket(s) kept from epoch' "$tmp/grow.out" &&
       grep -q 'rank 2: 6 connection(s) accepted while standby' "$tmp/grow.out" &&
       grep -q 'rank 2 accepted rank 0 (socket 0) (' "$tmp/grow.out" &&
       grep -q 'rank 2 accepted rank 1 (socket 1) (' "$tmp/grow.out"; }; } &&
     ! grep -q 'Sanitizer' "$tmp/grow.out"; then
    ok grow "shrank to 3, grew back to 4 at a step boundary, the running ranks' connections kept, those to the joiner made while it was standby, by the ranks below it too"
  else
    bad grow "expected 4 identical finishers after a grow at a step boundary"
  fi
}

# The step boundary moves every rank as soon as one has heard of the
# joiner's epoch (an allreduce MAX): rank 1's session stalls 300 ms on that
# view, so at the step boundary after the others heard of it, rank 1 moves
# to an epoch it has not heard of yet and waits for its view; the others
# wait for it in the new epoch's bootstrap. Nobody times out or recovers.
case_late-view() {
  FTCOMM_LOG_LEVEL=info FTCOMM_LOG_SUBSYS=recovery run late-view 60 -n 4 --min-size 3 --replace \
    --replace-delay 0.2 --inject kill:2@5 --inject late-view:1:300 -- \
    "$BIN/ftcomm-trainer" --steps 80 --step-ms 30 --batch 96 --samples 2048 --seed 7 --log-every 1000
  if other_run=1 check late-view 4; then
    if ! grep -q 'taking epoch [0-9]* 300 ms late' "$tmp/late-view.out"; then
      bad late-view "rank 1's late view was not injected"
    elif ! grep -q '\[rank 1\] step boundary: moving to epoch [0-9]*, which this rank has not heard of yet' \
        "$tmp/late-view.out"; then
      bad late-view "the others did not move before rank 1 heard of the joiner's epoch"
    elif [ "$(grep -c 'ftcomm INFO recovery .*recovered: epoch' "$tmp/late-view.out")" != 3 ]; then
      bad late-view "expected only the 3 survivors' recovery from the kill"
    else
      ok late-view "moved at the first step boundary after one rank heard; the late one waited for its view"
    fi
  fi
}

# The bound of that wait: rank 1's session stalls 2.5 s, past the 1.5 s
# heartbeat timeout; the coordinator drops rank 1 (ftcomm-run replaces it),
# the others give up the joiner's epoch for the next one and go on.
case_late-view-dropped() {
  FTCOMM_LOG_LEVEL=info FTCOMM_LOG_SUBSYS=recovery run late-view-dropped 60 -n 4 --min-size 3 \
    --replace --replace-delay 0.2 --inject kill:2@5 --inject late-view:1:2500 -- \
    "$BIN/ftcomm-trainer" --steps 80 --step-ms 30 --batch 96 --samples 2048 --seed 7 --log-every 1000
  if other_run=1 check late-view-dropped 4; then
    if ! grep -q 'taking epoch [0-9]* 2500 ms late' "$tmp/late-view-dropped.out"; then
      bad late-view-dropped "rank 1's late view was not injected"
    # The others gave up the epoch rank 1 never took: in its first
    # collective, revoked when the coordinator dropped rank 1 (their planned
    # move kept their connections with rank 1, so their data plane was up),
    # or, had they connected anew, in its bootstrap: given up by the
    # watchdog ("supersedes") or by the bootstrap itself when it polls first.
    elif ! grep -Eq 'recovered: epoch [0-9]+ -> [0-9]+ in .* 1 lost|supersedes epoch [0-9]+ being connected|connecting epoch [0-9]+ failed: .*was superseded by epoch' \
        "$tmp/late-view-dropped.out"; then
      bad late-view-dropped "the others did not give up the epoch rank 1 never took"
    else
      ok late-view-dropped "rank 1 dropped at the heartbeat timeout, the others went on, it was replaced"
    fi
  fi
}

case_joiner-killed() {
  run joiner-killed 60 -n 4 --replace --replace-delay 0.2 --inject kill:1@5 --inject kill-joiner:1 -- \
    "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  if check joiner-killed 4; then
    grep -q 'killing this joiner after its admission' "$tmp/joiner-killed.out" &&
      ok joiner-killed "the second replacement made it" || bad joiner-killed "the joiner was not killed"
  fi
}

# Two replacements admitted in back-to-back epochs into a job running at
# reduced size (min 2 of 4): ranks 1 and 2 die at step 5, the survivors go
# on as 2, and the two joiners start together. When the first is admitted
# at epoch E and the second at E+1 before the first connected, the first
# must drop E at once and connect E+1 with the others (before the fix it
# waited out FTCOMM_CONNECT_TIMEOUT_MS, refused by ranks already at E+1,
# and failed). Three rounds: the admissions fall in separate epochs about
# half the time; the case says how often they did.
case_two-joiners() {
  local two_joiners_ok=1 split=0 round name t0 why
  for round in 1 2 3; do
    name=two-joiners-$round t0=$SECONDS
    run "$name" 60 -n 4 --min-size 2 --replace --replace-delay 0.2 --inject kill:1@5 --inject kill:2@5 -- \
      "$BIN/ftcomm-trainer" "${TRAIN[@]}"
    if grep -q 'within FTCOMM_CONNECT_TIMEOUT_MS\|cannot join the job' "$tmp/$name.out"; then
      bad "$name" "a joiner waited out the connect timeout at a superseded epoch"; two_joiners_ok=0; continue
    fi
    [ $((SECONDS - t0)) -le 15 ] || { bad "$name" "took $((SECONDS - t0)) s"; two_joiners_ok=0; continue; }
    check "$name" 4 || { two_joiners_ok=0; continue; }
    # Every rank of an epoch names the same new ranks (ftc_comm_rank_is_new),
    # and a joiner at its admission names itself: lines
    # "epoch E: rank R of N[ (joiner)]: new ranks: A B".
    why=$(grep -o 'epoch [0-9]*: rank [0-9]* of [0-9]*\( (joiner)\)\?: new ranks:.*' "$tmp/$name.out" | awk '
      { e = $2; sub(":", "", e); set = $0; sub(/.*new ranks:/, "", set)
        if (e in seen && seen[e] != set) { printf "epoch %s: \"%s\" and \"%s\"; ", e, seen[e], set; bad = 1 }
        seen[e] = set; n++
        if (/\(joiner\)/ && (" " set " ") !~ (" " $4 " ")) { printf "epoch %s: joiner rank %s not in \"%s\"; ", e, $4, set; bad = 1 }
        if (set != "") grew = 1 }
      END { if (!n) print "no \"new ranks\" lines"; else if (!grew) print "no epoch names a new rank"; exit bad || !n || !grew }')
    [ $? = 0 ] || { bad "$name" "ranks disagree on who is new: $why"; two_joiners_ok=0; continue; }
    grep -q '3 ranks (with joiners)' "$tmp/$name.out" && split=$((split + 1))
  done
  [ "$two_joiners_ok" = 1 ] &&
    ok two-joiners "3 rounds, 4 identical finishers each, every rank of an epoch names the same new ranks; joiners admitted in separate epochs in $split"
}

# An epoch superseded just after it connected (the two-joiners flake,
# forced): rank 2 dies at step 5 under --replace, and rank 0's move to the
# survivors' epoch holds, once connected, until the joiner's epoch is
# announced (hold-move:0@1), as a recovering thread descheduled on a busy
# host does. Rank 0 keeps the epoch it connected and the next step boundary
# takes the joiner's, with rank 1. Before the fix (b04bcd6) rank 0's watchdog
# still took the epoch for one being connected and marked it superseded;
# rank 0's first collective there failed without shutting its sockets and
# rank 1 waited out FTCOMM_TIMEOUT_MS for it (10 runs of 10).
case_superseded-connected() {
  local name=superseded-connected t0=$SECONDS held
  run "$name" 60 -n 3 --min-size 2 --replace --replace-delay 0.2 --inject kill:2@5 \
    --inject hold-move:0@1 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  if check "$name" 3; then
    held=$(grep -o 'holding move 1 after connecting epoch [0-9]*' "$tmp/$name.out" | awk '{print $NF}')
    if [ -z "$held" ]; then
      bad "$name" "rank 0's move was not held"
    elif grep -q "^\[0\] .*epoch $held failed" "$tmp/$name.out"; then
      bad "$name" "rank 0 gave up epoch $held after it connected it"
    elif [ $((SECONDS - t0)) -gt 10 ]; then
      bad "$name" "took $((SECONDS - t0)) s"
    else
      ok "$name" "rank 0 kept epoch $held, connected before the joiner's superseded it; 3 finish identical"
    fi
  fi
}

# A stopped rank (SIGSTOP): missed heartbeats exclude it, every live rank
# dumps, and ftcomm-trace names it, with the coordinator's word: from the
# dumps' verdict when the next epoch came before they were written, else
# from the folder's incident.json (rank 2 hung, its dump never came).
case_stopped() {
  local inc head
  run stopped 60 -n 4 --min-size 2 --inject stop:2@5 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  if allow_timeouts=1 check stopped 3; then
    inc=$(ls -d "$tmp"/dumps-stopped/hang-* 2>/dev/null | head -1)
    if [ -z "$inc" ]; then
      bad stopped "no dump incident directory"
    else
      head=$("$BIN/ftcomm-trace" "$inc" | head -1)
      case $head in
        *"coordinator agrees: rank 2 hung"* | *"incident.json: rank 2's dump: hung ("*)
          verdict_names stopped 2 hung && lost_names stopped 2 hung &&
          ok stopped "excluded; $(ls "$inc" | grep -c "^rank-") dumps and incident.json; trace: $head" ;;
        *) bad stopped "ftcomm-trace does not name rank 2 (hung, by the coordinator's word): $head" ;;
      esac
    fi
  fi
}

# Ten failures in a row, one every two steps, from 12 ranks down to 2.
case_ten-failures() {
  local injects=() i
  for i in $(seq 0 9); do injects+=(--inject "kill:$i@$((3 + 2 * i))"); done
  run ten-failures 120 -n 12 --min-size 2 "${injects[@]}" -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  check ten-failures 2 && ok ten-failures "12 -> 2 ranks"
}

# A broken connection between two live ranks: nobody is dropped, the epoch
# is formed again with the same members.
case_dropped-connection() {
  local kept
  run dropped-connection 60 -n 4 --inject drop:1@20 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  if check dropped-connection 4; then
    # The failure dumps carry the verdict that nobody was dropped.
    kept=$(python3 - "$tmp/dumps-dropped-connection" <<'PY'
import glob, json, os, sys
n = 0
for f in glob.glob(os.path.join(sys.argv[1], "rank-*.json")):
    j = json.load(open(f))
    if not j.get("failure"): continue
    v = j.get("verdict") or {}
    if not v.get("decided") or v.get("dropped"):
        sys.exit("rank %d's failure dump: %s" % (j["rank"], json.dumps(v)))
    n += 1
if n < 2: sys.exit("%d failure dumps, want at least the two ends of the connection" % n)
print("%d failure dumps say epoch %d keeps every member" % (n, v["next_epoch"]))
PY
    ) || { bad dropped-connection "$kept"; kept=; }
    if [ -n "$kept" ]; then
      grep -q 'recoveries 1' "$tmp/dropped-connection.out" &&
        ok dropped-connection "same 4 ranks in a new epoch; $kept" || bad dropped-connection "no recovery happened"
    fi
  fi
}

# Late completion, forced: rank 1 fails the last step's allreduce (#120 of
# epoch 1: steps 0..59 each run ftc_comm_step's allreduce, then the
# gradients') after it completed on the other three (giveup@SEQ). They hold
# step 60, rank 1 step 59. Ending right after that allreduce would leave
# rank 1 to redo step 59 without them; the trainer ends only at the step
# boundary after it, which fails, so all 4 recover and rank 1 takes the
# model at step 60 from a rank that completed the step (docs/recovery.md,
# "What a survivor must do after recover").
case_late-completion() {
  run late-completion 60 -n 4 --min-size 2 -- sh -c \
    'if [ "$FTCOMM_SLOT" = 1 ]; then FTCOMM_FAULT=giveup@120; export FTCOMM_FAULT; fi; exec "$0" "$@"' \
    "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  if check late-completion 4; then
    if ! grep -q 'giving up on collective #120' "$tmp/late-completion.out"; then
      bad late-completion "the fault was not injected"
    elif ! grep -q 'rank 1: took the model at step 60 from rank' "$tmp/late-completion.out"; then
      bad late-completion "the rank that gave up did not take the completed step from a peer"
    elif [ "$(grep -c 'recoveries 1$' "$tmp/late-completion.out")" != 4 ]; then
      bad late-completion "expected one recovery on every rank"
    else
      ok late-completion "3 completed the last step, 1 gave up: it took their model; 4 identical"
    fi
  fi
}

case_coord-restart() {
  run coord-restart 60 -n 4 --inject coord-restart:0.4 -- \
    "$BIN/ftcomm-trainer" --steps 150 --step-ms 8 --batch 96 --samples 2048 --seed 7 --log-every 1000
  if [ "$(cat "$tmp/coord-restart.rc")" = 0 ] && [ "$(finals coord-restart | wc -l)" = 4 ] &&
     grep -q 'restarting the coordinator' "$tmp/coord-restart.out" &&
     grep -q 'reconnected to the coordinator' "$tmp/coord-restart.out" &&
     [ "$(finals coord-restart | awk '{print $9}' | sort -u | wc -l)" = 1 ]; then
    ok coord-restart "ranks kept training and reconnected"
  else
    bad coord-restart "expected 4 identical finishers across a coordinator restart"
  fi
}

# A blinking coordinator session: rank 1's session drops at step 20 and
# reconnects while its data plane is fine. It keeps its place (same member,
# no new epoch, nobody killed or replaced) and the 4 ranks finish together.
case_blink() {
  run blink 60 -n 4 --inject blink:1@20 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  if check blink 4; then
    if ! grep -q 'reconnected to the coordinator .*kept' "$tmp/blink.out"; then
      bad blink "rank 1 did not come back as the same member"
    elif grep -q 'killing it' "$tmp/blink.out" || grep 'final: ' "$tmp/blink.out" | grep -qv 'recoveries 0$'; then
      bad blink "the blink cost a rank or a recovery"
    else
      ok blink "rank 1 reconnected as the same member; no new epoch"
    fi
  fi
}

# Below the minimum with no joiner: the survivors wait, then fail clearly.
case_below-min() {
  local pending
  FTCOMM_RECOVER_TIMEOUT_MS=1500 run below-min 60 -n 3 --grace 30 --inject kill:1@5 -- \
    "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  # Their failure dumps were written without a verdict and say why.
  pending=$(python3 - "$tmp/dumps-below-min" <<'PY'
import glob, json, os, sys
n = 0
for f in glob.glob(os.path.join(sys.argv[1], "rank-*.json")):
    j = json.load(open(f))
    if not j.get("failure"): continue
    v = j.get("verdict") or {}
    if v.get("decided") is not False or "below its minimum size" not in v.get("pending", ""):
        sys.exit("rank %d's failure dump: %s" % (j["rank"], json.dumps(v)))
    n += 1
if n < 2: sys.exit("%d failure dumps, want 2" % n)
print("%d failure dumps say no verdict yet: %s" % (n, v["pending"]))
PY
  )
  if [ "$(cat "$tmp/below-min.rc")" != 0 ] && grep -q 'fewer ranks than FTCOMM_MIN_SIZE' "$tmp/below-min.out" &&
    [ -n "$pending" ]; then
    ok below-min "survivors failed with FTC_ERR_BELOW_MIN_SIZE; $pending"
  elif [ -z "$pending" ]; then
    bad below-min "the survivors' failure dumps do not say why they have no verdict"
  else
    bad below-min "expected a clear below-minimum failure"
  fi
}

# Below the minimum until a replacement comes 4 s later: the survivors'
# failure dumps are written before the verdict (the watchdog waits 1.6 s
# for it here) and replaced, whole, by the same dumps with it once the
# joiner's epoch is announced.
case_late-verdict() {
  local n why
  FTCOMM_LOG_LEVEL=info FTCOMM_LOG_SUBSYS=recovery run late-verdict 60 -n 3 --min-size 3 --replace \
    --replace-delay 4 --inject kill:1@5 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  if check late-verdict 3; then
    n=$(grep -c "came after its failure dump was written; rewrote" "$tmp/late-verdict.out")
    if ! why=$(python3 tests/recovery/failure_dumps.py "$tmp/dumps-late-verdict" 1 crashed --exactly 2 2>&1); then
      bad late-verdict "$why"
    elif [ "$n" != 2 ]; then
      bad late-verdict "$n survivors rewrote their failure dump with the late verdict, want 2"
    else
      ok late-verdict "written before the verdict, rewritten with it: $why"
    fi
  fi
}

# A rank with the wrong job token is refused by the coordinator.
case_wrong-token() {
  run wrong-token 30 -n 2 --grace 1 -- sh -c \
    'if [ "$FTCOMM_SLOT" = 1 ]; then FTCOMM_TOKEN=not-the-token; export FTCOMM_TOKEN; fi; exec "$0" "$@"' \
    "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  if [ "$(cat "$tmp/wrong-token.rc")" != 0 ] && grep -q 'token was refused' "$tmp/wrong-token.out"; then
    ok wrong-token "refused"
  else
    bad wrong-token "the wrong token was not refused"
  fi
}

# Garbage at the coordinator's port while the job trains: refused, the
# coordinator stays up and the job finishes.
case_garbage() {
  run garbage 60 -n 2 -- bash -c \
    'if [ "$FTCOMM_SLOT" = 0 ]; then p=${FTCOMM_COORDINATOR##*:}; for i in 1 2 3; do
       (exec 3<>/dev/tcp/127.0.0.1/$p && printf "GET /ftcomm/v1 HTTP/1.1\r\nHost: x\r\n\r\n\x00\xff garbage" >&3 && sleep 0.1) 2>/dev/null; done; fi
     exec "$0" "$@"' "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  [ "$(cat "$tmp/garbage.rc")" = 0 ] && [ "$(finals garbage | wc -l)" = 2 ] &&
    ok garbage "the job finished" || bad garbage "garbage at the coordinator broke the job"
}

# A replacement whose FTCOMM_ALLREDUCE_ALGO differs from the job's: the
# data-plane handshake refuses it, its ftc_comm_create fails saying what to
# set (each of ftcomm-run's restarts too), and the survivors go on at 3
# without a collective timeout (TCP only: NCCL chooses its own algorithms).
case_joiner-differs() {
  if [ "${FTCOMM_BACKEND:-tcp}" = tcp ]; then
    run joiner-differs 60 -n 4 --min-size 3 --replace --replace-delay 0.2 --inject kill:1@5 -- sh -c \
      'if [ "${FTCOMM_JOINER:-0}" = 1 ]; then export FTCOMM_ALLREDUCE_ALGO=ring; fi; exec "$@"' sh \
      "$BIN/ftcomm-trainer" --steps 60 --step-ms 30 --batch 96 --samples 2048 --seed 7 --log-every 1000
    if other_run=1 check joiner-differs 3; then
      grep -q '^\[1\] ftcomm-trainer: cannot join the job: invalid configuration: rank [0-9] has FTCOMM_ALLREDUCE_ALGO=auto, this rank (1) ring: set the same value on every rank' \
        "$tmp/joiner-differs.out" &&
        ok joiner-differs "the replacement with FTCOMM_ALLREDUCE_ALGO=ring was refused, saying so; 3 finished" ||
        bad joiner-differs "the replacement's ftc_comm_create did not fail with the settings' message"
    fi
  else
    echo "skip joiner-differs: FTCOMM_BACKEND=${FTCOMM_BACKEND} (the TCP handshake checks the settings)"
  fi
}

# A slow disk: every rank's dump writes take 5 s (dumpwrite:5000). Rank 1
# is killed at step 5; soon after that recovery, while the survivors' dumps
# of it are being written, rank 2 hangs at step 25 in a process ftcomm-run
# cannot kill (its own session: as a killed process stuck in the kernel,
# docs/nccl.md), so its connections stay open and only the watchdogs' revoke
# (when the coordinator drops it, 1.5 s) releases the survivors' collective
# before FTCOMM_TIMEOUT_MS (4 s). A watchdog that wrote the dumps itself
# revoked after 5 s: a collective timeout. The dumps all land (the drain at
# ftc_comm_destroy waits for them: FTCOMM_DUMP_DRAIN_MS).
case_slow-disk() {
  local linger=$tmp/slow-disk.linger why
  # The lingering rank goes once the survivors finished (ftcomm-run waits for it).
  (for _ in $(seq 600); do
     n=$(grep -sc 'final: rank' "$tmp/slow-disk.out"); [ "${n:-0}" -ge 2 ] && break; sleep 0.2
   done; [ -s "$linger" ] && kill -9 "$(cat "$linger")" 2>/dev/null) &
  LINGER=$linger FTCOMM_DUMP_DRAIN_MS=40000 run slow-disk 120 -n 4 --min-size 2 -- sh -c '
    case $FTCOMM_SLOT in
      1) FTCOMM_FAULT=kill@5,dumpwrite:5000 ;;
      2) FTCOMM_FAULT=stop@25,dumpwrite:5000; export FTCOMM_FAULT
         setsid "$0" "$@" >"$LINGER.out" 2>&1 & echo $! >"$LINGER"; wait; exit ;;
      *) FTCOMM_FAULT=dumpwrite:5000 ;;
    esac
    export FTCOMM_FAULT; exec "$0" "$@"' "$BIN/ftcomm-trainer" "${TRAIN[@]}"
  wait
  [ -s "$linger" ] && kill -9 "$(cat "$linger")" 2>/dev/null
  if check slow-disk 2; then
    if ! why=$(python3 - "$tmp/dumps-slow-disk" <<'PY'
import glob, json, os, sys
fails = set()
for f in glob.glob(os.path.join(sys.argv[1], "rank-*.json")):
    j = json.load(open(f))
    if j.get("failure"):
        fails.add((j["epoch"], j["rank"]))
if len(fails) < 4:
    sys.exit("%d failure dumps landed, want one from each of the 2 survivors of each failure: %s"
             % (len(fails), sorted(fails)))
print("%d failure dumps landed" % len(fails))
PY
    ); then
      bad slow-disk "$why"
    elif [ "$(grep -c 'fault injection: delaying a dump write by 5000 ms' "$tmp/slow-disk.out")" -lt 4 ]; then
      bad slow-disk "fewer than 4 dump writes were delayed"
    elif ! grep -q 'communicator epoch revoked; .*the coordinator announced epoch 3 without rank 1' "$tmp/slow-disk.out"; then
      bad slow-disk "the survivors' collective was not released by the watchdog's revoke"
    else
      ok slow-disk "2 survivors of a kill and a hang that only a revoke releases, no collective timeout with 5 s dump writes; $why"
    fi
  fi
}

# Kill and replace with the coordinator and the data plane on IPv6 loopback.
case_ipv6-replace() {
  if grep -q '^00000000000000000000000000000001 ' /proc/net/if_inet6 2>/dev/null; then
    FTCOMM_SOCKET_FAMILY=ipv6 run ipv6-replace 60 -n 4 --replace --replace-delay 0.2 --inject kill:1@5 -- \
      "$BIN/ftcomm-trainer" "${TRAIN[@]}"
    if check ipv6-replace 4; then
      grep -q 'joined at epoch' "$tmp/ipv6-replace.out" && grep -q 'took the model at step' "$tmp/ipv6-replace.out" &&
        ok ipv6-replace "over ::1, the replacement joined, got the model and finished with the others" ||
        bad ipv6-replace "no joiner took the model"
    fi
  else
    echo "skip ipv6-replace: this host has no IPv6 loopback (::1 is not in /proc/net/if_inet6)"
  fi
}

# Every case is in CASES and every name there has its case.
for c in $(declare -F | awk '$3 ~ /^case_/ { sub(/^case_/, "", $3); print $3 }'); do
  one_of "$c" "${CASES[@]}" || { echo "recovery: case_$c is not in CASES" >&2; exit 2; }
done
for c in "${CASES[@]}"; do
  declare -F "case_$c" >/dev/null || { echo "recovery: $c in CASES has no case_$c" >&2; exit 2; }
done

# Whole, the suite runs the reference first, as it always has (a broken build
# fails there, once); a selection runs it at the first check that needs it.
[ ${#selected[@]} = 0 ] && need_reference
for c in "${CASES[@]}"; do
  [ ${#selected[@]} = 0 ] || one_of "$c" "${selected[@]}" || continue
  if one_of "$c" "${skip[@]}"; then echo "skip $c: FTC_RECOVERY_SKIP"; continue; fi
  "case_$c"
done

echo "recovery: $pass passed, $fail failed"
[ "$fail" = 0 ]
