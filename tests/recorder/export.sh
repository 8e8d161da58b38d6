#!/usr/bin/env bash
# export.sh - ftcomm-trace --export pytorch-json|pytorch-pickle: dumps written
# in PyTorch Flight Recorder's layout must be read back by ftcomm-trace with
# the same verdict, have the keys a real torch 2.15 JSON dump has, and be read
# by PyTorch's own analyzer (torch.distributed.flight_recorder.fr_trace, which
# loads pickles only), which must name the same culprit. Bad arguments get a
# clear message and exit 2.
#
# Needs the torch 2.15.0 environment that make deps installs (FTC_TORCH_VENV,
# default ~/.cache/ftcomm/torch-2.15.0), as torch-live.sh does.
set -u
cd "$(dirname "$0")/../.."
trace=${FTC_REC_TRACE:-build/release/bin/ftcomm-trace}
venv=${FTC_TORCH_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ftcomm/torch-2.15.0}
py=$venv/bin/python
cases=tests/recorder/cases
[ -x "$trace" ] || { echo "missing $trace (run make)"; exit 1; }
"$py" -c 'import torch.distributed.flight_recorder' 2>/dev/null ||
  { echo "tests/recorder/export.sh: no torch environment at $venv: run make deps"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL $*"; fail=1; }

# Case, then what ftcomm-trace must still say on the export (the culprit and
# the kind; dtypes are PyTorch's names there), then what PyTorch's analyzer
# must print on the pickles ("-" for a healthy set: no finding at all).
while IFS='|' read -r case ours theirs; do
  [ -n "$case" ] || continue
  src=$cases/$case
  timeout 60 "$trace" "$src" >/dev/null 2>&1
  want_rc=$?
  for fmt in json pickle; do
    out=$tmp/$case-$fmt
    if ! timeout 60 "$trace" --export "pytorch-$fmt" "$out" "$src" >"$tmp/log" 2>&1; then
      bad "$case $fmt: export failed"; sed 's/^/    | /' "$tmp/log"; continue
    fi
    grep -q "^ftcomm-trace: wrote [0-9]* PyTorch Flight Recorder dump" "$tmp/log" ||
      bad "$case $fmt: no 'wrote' line"
    timeout 60 "$trace" "$out" >"$tmp/rep" 2>&1
    rc=$?
    if [ "$rc" != "$want_rc" ] || ! grep -qF -- "$ours" "$tmp/rep"; then
      bad "$case $fmt: read back: exit $rc (want $want_rc), want '$ours' in:"
      sed 's/^/    | /' "$tmp/rep" | head -n 8
    else
      echo "ok   $case $fmt: $(head -n 1 "$tmp/rep")"
    fi
  done
  # PyTorch's analyzer on the pickles.
  timeout 120 "$py" -m torch.distributed.flight_recorder.fr_trace "$tmp/$case-pickle" -p rank_ \
    >"$tmp/theirs" 2>&1
  if [ "$theirs" = "-" ]; then
    if grep -qE "has errors|Not all ranks joining|Missing dump|Traceback" "$tmp/theirs"; then
      bad "$case: PyTorch's fr_trace found something in a healthy set:"
      sed 's/^/    | /' "$tmp/theirs" | head -n 12
    else
      echo "ok   $case: PyTorch's fr_trace reads the export and finds nothing"
    fi
  elif grep -qF -- "$theirs" "$tmp/theirs"; then
    echo "ok   $case: PyTorch's fr_trace: $theirs"
  else
    bad "$case: PyTorch's fr_trace does not say '$theirs':"
    sed 's/^/    | /' "$tmp/theirs" | tail -n 12
  fi
done <<'EOF'
healthy|healthy: 6 ranks|-
never-entered|rank 4 never entered world epoch 0 seq 21 (allreduce BFloat16 x2048)|missing ranks: {4}
missing-dump|no dump from rank 1|Missing dump files from ranks {1}
mismatch-op|rank 1 called allgather BFloat16 x2048|Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH
mismatch-count|rank 5 called allreduce BFloat16 x2064|Culprit rank 5; Error type: SIZE_OR_SYNTAX_MISMATCH
mismatch-dtype|rank 3 called allreduce Double x2048|Error type: COLLECTIVE_DTYPE_MISMATCH, Expected dtypes: '{'Double'}'
stuck-started|rank 2 stuck in world epoch 0 seq 21|Collective sequence number: 21 has errors
two-epochs|rank 1 never entered world epoch 0 seq 17 (broadcast Float x4096)|missing ranks: {1}
wrapped-ring|rank 2 never entered world epoch 0 seq 57|missing ranks: {2}
alltoallv-uneven-counts|healthy: 6 ranks|-
torch-gloo-subgroup-json|rank 1 never entered pg 1 epoch 0 seq 6|missing ranks: {1}
torch-gloo-killed-pickle|no dump from rank 3|Missing dump files from ranks {3}
EOF

# The JSON has the keys a real torch 2.15 job's JSON dump has (one of the
# committed cases that tests/recorder/torch-live.sh checks against a live run).
"$py" - "$cases/torch-gloo-healthy-json/rank_0.json" "$tmp/healthy-json/rank_0" <<'PY' || fail=1
import json, sys
real, ours = (json.load(open(p)) for p in sys.argv[1:3])
bad = []
if sorted(real) != sorted(ours):
    bad.append(f"top-level keys {sorted(ours)} != torch's {sorted(real)}")
missing = set(real["entries"][0]) - set(ours["entries"][0])
if missing:
    bad.append(f"entries lack {sorted(missing)}")
if ours["version"] != "2.10":
    bad.append(f"version {ours['version']!r}")
cfg = next(iter(ours["pg_config"].values()))
if sorted(cfg) != ["desc", "name", "ranks"] or not isinstance(cfg["ranks"], str):
    bad.append(f"pg_config entry {cfg}")
st = next(iter(ours["pg_status"].values()))
if not all(isinstance(v, str) for v in st.values()):
    bad.append(f"pg_status values are not strings as in torch's JSON: {st}")
raw = open(sys.argv[2]).read()
if raw.endswith("\n") or ", " in raw.split('"ranks"')[0]:
    bad.append("not compact as nlohmann writes it")
for b in bad:
    print("FAIL json layout:", b)
if not bad:
    print("ok   json layout: the keys and types of a real torch 2.15 dump")
sys.exit(1 if bad else 0)
PY

# Bad arguments: a clear message, exit 2, nothing written.
expect_refusal() {
  local want=$1; shift
  timeout 30 "$trace" "$@" >"$tmp/log" 2>&1
  local rc=$?
  if [ $rc = 2 ] && grep -qF -- "$want" "$tmp/log"; then echo "ok   refused: $*"
  else bad "'$*' gave exit $rc, want 2 and '$want':"; sed 's/^/    | /' "$tmp/log"; fi
}
expect_refusal "the formats are pytorch-json and pytorch-pickle" --export pytorch-xml "$tmp/o1" "$cases/healthy"
expect_refusal "needs a format and a directory" "$cases/healthy" --export pytorch-json
expect_refusal "cannot make $tmp/no/such" --export pytorch-json "$tmp/no/such" "$cases/healthy"
[ ! -e "$tmp/o1" ] || bad "a refused export left $tmp/o1"
exit $fail
