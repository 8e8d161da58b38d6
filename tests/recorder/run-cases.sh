#!/usr/bin/env bash
# run-cases.sh - ftcomm-trace on every directory of dumps under
# tests/recorder/cases/. Each case holds the dumps and expected.txt:
#   exit N          the exit status ftcomm-trace must return
#   first LINE      its exact first line (the headline)
#   contains TEXT   a line of the full text report must contain TEXT (any number)
# Every case is also run with --json, which must be valid JSON carrying the
# same exit status and headline.
set -u
cd "$(dirname "$0")/../.."
trace=${FTC_REC_TRACE:-build/release/bin/ftcomm-trace}
[ -x "$trace" ] || { echo "missing $trace (run make)"; exit 1; }
fail=0 n=0
out=$(mktemp) json=$(mktemp)
trap 'rm -f "$out" "$json"' EXIT
for dir in tests/recorder/cases/*/; do
  name=$(basename "$dir")
  exp="$dir/expected.txt"
  [ -f "$exp" ] || { echo "FAIL $name: no expected.txt"; fail=1; continue; }
  n=$((n + 1))
  timeout 60 "$trace" "$dir" >"$out" 2>/dev/null
  rc=$?
  want_rc=$(sed -n 's/^exit //p' "$exp")
  want_first=$(sed -n 's/^first //p' "$exp")
  ok=1
  [ "$rc" = "$want_rc" ] || { echo "FAIL $name: exit $rc, want $want_rc"; ok=0; }
  got_first=$(head -n 1 "$out")
  [ "$got_first" = "$want_first" ] || { printf 'FAIL %s: first line\n  got:  %s\n  want: %s\n' "$name" "$got_first" "$want_first"; ok=0; }
  while IFS= read -r line; do
    text=${line#contains }
    grep -qF -- "$text" "$out" || { echo "FAIL $name: report lacks: $text"; ok=0; }
  done < <(grep '^contains ' "$exp")
  timeout 60 "$trace" --json "$dir" >"$json" 2>/dev/null
  jrc=$?
  if ! python3 - "$json" "$want_rc" "$want_first" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["exit_status"] == int(sys.argv[2]), r["exit_status"]
assert r["headline"] == sys.argv[3], r["headline"]
PY
  then echo "FAIL $name: --json output"; ok=0; fi
  [ "$jrc" = "$want_rc" ] || { echo "FAIL $name: --json exit $jrc, want $want_rc"; ok=0; }
  if [ $ok = 1 ]; then echo "ok   $name"; else fail=1; sed 's/^/    | /' "$out" | head -n 30; fi
done
# Usage errors are exit 2 with a message.
"$trace" >/dev/null 2>"$out"; rc=$?
{ [ $rc = 2 ] && grep -q "missing DIR" "$out"; } || { echo "FAIL usage: no DIR gives exit $rc"; fail=1; }
"$trace" /nonexistent/dir >/dev/null 2>"$out"; rc=$?
{ [ $rc = 2 ] && grep -q "not a directory" "$out"; } || { echo "FAIL usage: bad DIR gives exit $rc"; fail=1; }
"$trace" --help | grep -q "Exit status" || { echo "FAIL usage: --help"; fail=1; }
echo "$n cases"
exit $fail
