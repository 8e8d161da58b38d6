#!/usr/bin/env bash
# make-cases.sh - (re)writes the real-torch fixture cases of run-cases.sh,
# tests/recorder/cases/torch-gloo-SCENARIO-{pickle,json}/, with dumps from
# real 4-rank torch jobs (make-fr-dumps.py). Each case's expected.txt is
# kept: it says what ftcomm-trace must find whatever the run's timings.
#   tests/recorder/torch/make-cases.sh [PYTHON]   (default: the torch 2.15.0
#                                                 environment of make deps)
set -eu
cd "$(dirname "$0")/../../.."
py=${1:-${FTC_TORCH_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ftcomm/torch-2.15.0}/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for sc in healthy skip subgroup killed; do
  "$py" tests/recorder/torch/make-fr-dumps.py "$sc" "$tmp/$sc"
  for fmt in pickle json; do
    dir=tests/recorder/cases/torch-gloo-$sc-$fmt
    mkdir -p "$dir"
    find "$dir" -maxdepth 1 -name 'rank_*' -delete
    cp "$tmp/$sc/$fmt"/rank_* "$dir/"
  done
done
