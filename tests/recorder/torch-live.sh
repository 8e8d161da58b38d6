#!/usr/bin/env bash
# torch-live.sh - ftcomm-trace on Flight Recorder dumps that real torch jobs
# write now: each scenario of tests/recorder/torch/make-fr-dumps.py (gloo on
# CPU, 4 ranks; healthy, a rank that skips a collective, a sub-group hang,
# a killed rank) is run afresh, and ftcomm-trace must give, on the pickles
# and on the JSON alike, the exit status, headline and lines that the
# committed case tests/recorder/cases/torch-gloo-SCENARIO-FORMAT/expected.txt
# asks for. PyTorch's own analyzer (torch.distributed.flight_recorder.fr_trace)
# runs on the same pickles, and its last line is shown beside ours.
#
# Needs the torch 2.15.0 environment that make deps installs (FTC_TORCH_VENV,
# default ~/.cache/ftcomm/torch-2.15.0), as the binding's suite does.
set -u
cd "$(dirname "$0")/../.."
trace=${FTC_REC_TRACE:-build/release/bin/ftcomm-trace}
venv=${FTC_TORCH_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ftcomm/torch-2.15.0}
py=$venv/bin/python
[ -x "$trace" ] || { echo "missing $trace (run make)"; exit 1; }
"$py" -c 'import torch.distributed' 2>/dev/null ||
  { echo "tests/recorder/torch-live.sh: no torch environment at $venv: run make deps"; exit 1; }
echo "torch $("$py" -c 'import torch; print(torch.__version__)')"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for sc in healthy skip subgroup killed; do
  if ! timeout 300 "$py" tests/recorder/torch/make-fr-dumps.py "$sc" "$tmp/$sc" >"$tmp/$sc.log" 2>&1; then
    echo "FAIL $sc: the torch job did not leave its dumps"; sed 's/^/    | /' "$tmp/$sc.log" | tail -n 20
    fail=1; continue
  fi
  for fmt in pickle json; do
    exp=tests/recorder/cases/torch-gloo-$sc-$fmt/expected.txt
    timeout 60 "$trace" "$tmp/$sc/$fmt" >"$tmp/out" 2>&1
    rc=$?
    ok=1
    [ "$rc" = "$(sed -n 's/^exit //p' "$exp")" ] || { echo "FAIL $sc $fmt: exit $rc"; ok=0; }
    [ "$(head -n 1 "$tmp/out")" = "$(sed -n 's/^first //p' "$exp")" ] || { echo "FAIL $sc $fmt: first line"; ok=0; }
    while IFS= read -r line; do
      grep -qF -- "${line#contains }" "$tmp/out" || { echo "FAIL $sc $fmt: report lacks: ${line#contains }"; ok=0; }
    done < <(grep '^contains ' "$exp")
    if [ $ok = 1 ]; then echo "ok   $sc $fmt: $(head -n 1 "$tmp/out")"; else fail=1; sed 's/^/    | /' "$tmp/out" | head -n 20; fi
  done
  theirs=$(timeout 120 "$py" -m torch.distributed.flight_recorder.fr_trace "$tmp/$sc/pickle" -p rank_ 2>&1 | tail -n 1)
  echo "     PyTorch's fr_trace on $sc: ${theirs:-(no output)}"
done
exit $fail
