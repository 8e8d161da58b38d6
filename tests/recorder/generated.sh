#!/usr/bin/env bash
# generated.sh - scenarios with a known culprit at 8 to 1024 ranks, written
# by ftcomm-trace-gen: ftcomm-trace's first finding must be of the right
# kind and name exactly the culprit rank, whichever rank it is (the
# majority decides, not rank 0). Also the real recorder's dumps.
set -u
cd "$(dirname "$0")/../.."
trace=${FTC_REC_TRACE:-build/release/bin/ftcomm-trace}
gen=${FTC_REC_GEN:-build/release/tests/recorder/ftcomm-trace-gen}
for b in "$trace" "$gen"; do [ -x "$b" ] || { echo "missing $b (run make test-bins)"; exit 1; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
check() { # ranks entries scenario seed [extra generator options]
  local ranks=$1 entries=$2 sc=$3 seed=$4; shift 4
  local dir="$tmp/$sc-$ranks-$seed"
  local want
  want=$("$gen" --ranks "$ranks" --entries "$entries" --seed "$seed" "$@" "$sc" "$dir") || { echo "FAIL generator $sc"; fail=1; return; }
  timeout 120 "$trace" --json "$dir" >"$dir.json" 2>/dev/null
  local rc=$?
  n=$((n + 1))
  if python3 - "$dir.json" "$want" "$rc" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
kind, culprit = sys.argv[2].split()
rc = int(sys.argv[3])
if kind == "-":
    assert rc == 0 and r["status"] == "healthy", (rc, r["headline"])
else:
    p = [f for f in r["findings"] if f["primary"]]
    assert rc == 1 and len(p) == 1, (rc, r["headline"])
    assert p[0]["kind"] == kind, (p[0]["kind"], kind, r["headline"])
    assert p[0]["ranks"] == [int(culprit)], (p[0]["ranks"], culprit, r["headline"])
PY
  then echo "ok   $sc ranks=$ranks seed=$seed ($want)"
  else echo "FAIL $sc ranks=$ranks seed=$seed: want '$want'"; fail=1; fi
  rm -rf "$dir" "$dir.json"
}
seed=1
for ranks in 8 64 256 1024; do
  entries=$(( ranks >= 1024 ? 40 : 60 ))
  for sc in healthy never_entered stuck op dtype count root straggler jitter missing corrupt epochs; do
    check "$ranks" "$entries" "$sc" "$seed"
    seed=$((seed + 1))
  done
  check "$ranks" "$entries" never_entered "$seed" --capacity 20
  seed=$((seed + 1))
done
for ranks in 8 64; do
  check "$ranks" 30 pytorch "$seed"; seed=$((seed + 1))
  FTCOMM_DUMP_SIGNAL=0 check "$ranks" 30 never_entered "$seed" --via-recorder; seed=$((seed + 1))
  FTCOMM_DUMP_SIGNAL=0 check "$ranks" 30 healthy "$seed" --via-recorder; seed=$((seed + 1))
done
echo "$n scenarios"
exit $fail
