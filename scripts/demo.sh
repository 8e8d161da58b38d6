#!/usr/bin/env bash
# demo.sh - the local demo (make demo): a 4-rank data-parallel training job
# on this machine, launched by ftcomm-run with its own coordinator.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BUILD:-build/release}/bin
echo "== ftcomm demo: 4 ranks train a small MLP with data-parallel SGD over TCP"
echo "\$ ftcomm-run -n 4 -- ftcomm-trainer --steps 200"
"$BIN/ftcomm-run" -n 4 --job demo -- "$BIN/ftcomm-trainer" --steps 200
