#!/usr/bin/env bash
# demo.sh - the local demo (make demo): a 4-rank data-parallel training job
# on this machine, launched by ftcomm-run with its own coordinator.
#   1. a rank is killed mid-training; the survivors shrink and go on, a
#      replacement joins at a step boundary, gets the model by broadcast,
#      and the job finishes with 4 ranks holding identical parameters;
#   2. a rank hangs (SIGSTOP); missed heartbeats exclude it, every live rank
#      writes a flight-recorder dump, and ftcomm-trace names the stopped rank.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD:-build/release}/bin
dumps=$(mktemp -d /tmp/ftcomm-demo-dumps.XXXXXX)
# Detection tuned for a demo: heartbeats every 200 ms, a rank silent for 2 s
# is dropped, a collective times out after 5 s.
export FTCOMM_HEARTBEAT_MS=200 FTCOMM_HEARTBEAT_TIMEOUT_MS=2000 FTCOMM_TIMEOUT_MS=5000
TRAIN=(--steps 200 --step-ms 10 --log-every 40)

echo "== ftcomm demo 1: 4 ranks train an MLP with data-parallel SGD over TCP; rank 2 is"
echo "   killed at step 60 and restarted as a joiner"
echo "\$ ftcomm-run -n 4 --replace --replace-delay 0.5 --inject kill:2@60 -- ftcomm-trainer ${TRAIN[*]}"
"$BIN/ftcomm-run" -n 4 --job demo --quiet --dump-dir "$dumps/kill" --replace --replace-delay 0.5 \
  --inject kill:2@60 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}" 2>&1 |
  grep -v -e ' WARN net ' -e ' WARN coll ' -e 'fault injection armed'
echo
echo "== ftcomm demo 2: rank 1 hangs (SIGSTOP at step 30); the others are released, dump,"
echo "   and go on without it"
echo "\$ ftcomm-run -n 4 --min-size 2 --inject stop:1@30 --dump-dir DIR -- ftcomm-trainer ${TRAIN[*]}"
"$BIN/ftcomm-run" -n 4 --job demo-hang --quiet --min-size 2 --dump-dir "$dumps/hang" \
  --inject stop:1@30 -- "$BIN/ftcomm-trainer" "${TRAIN[@]}" 2>&1 |
  grep -v -e ' WARN net ' -e ' WARN coll ' -e 'fault injection armed'
incident=$(ls -d "$dumps"/hang/hang-* | head -1)
echo
echo "\$ ls $incident"
ls "$incident"
echo "\$ ftcomm-trace $incident"
"$BIN/ftcomm-trace" "$incident" | head -n 12 || true
echo
echo "(dumps kept in $dumps)"
