#!/usr/bin/env bash
# ftcomm_bench_test.sh - ftcomm-bench behaves: under ftcomm-run at 2 ranks it
# prints one well-formed row per size, blocking and async, in CSV and in the
# nccl-tests text layout, and the checked first iteration of every size is
# right (#wrong = 0). A behaviour test, not a timing test: the times only
# have to be positive.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/release}
run=$BUILD/bin/ftcomm-run
bench=$BUILD/bin/ftcomm-bench
for b in "$run" "$bench"; do
  [ -x "$b" ] || { echo "missing $b (run make first)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check_csv FILE RANKS FACTOR EXPECTED_SIZES...: rows match the sizes in
# order, fields are well-formed, busbw = algbw * FACTOR, #wrong is 0.
check_csv() {
  local file=$1 ranks=$2 factor=$3
  shift 3
  awk -F, -v ranks="$ranks" -v factor="$factor" -v want="$*" '
    BEGIN { n = split(want, sizes, " ") }
    $1 == "system" { header++; next }
    $1 == "test" {
      rows++
      if (NF != 13) { print "row " rows ": " NF " fields, want 13"; bad = 1 }
      if ($3 != ranks) { print "row " rows ": ranks " $3 ", want " ranks; bad = 1 }
      if ($4 != sizes[rows]) { print "row " rows ": size " $4 ", want " sizes[rows]; bad = 1 }
      if ($5 * ($6 == "f64" || $6 == "i64" ? 8 : $6 == "f16" || $6 == "bf16" ? 2 : $6 == "u8" ? 1 : 4) != $4) {
        print "row " rows ": count " $5 " does not make size " $4; bad = 1
      }
      if (!($9 > 0)) { print "row " rows ": time " $9 " not positive"; bad = 1 }
      d = $11 - $10 * factor; if (d < 0) d = -d
      if (d > 1e-4 + 1e-3 * $11) { print "row " rows ": busbw " $11 " != algbw " $10 " x " factor; bad = 1 }
      if ($12 != "0") { print "row " rows ": #wrong = " $12; bad = 1 }
      if (!($13 >= 1)) { print "row " rows ": iters " $13; bad = 1 }
    }
    END {
      if (header != 1) { print "want one CSV header, got " header + 0; bad = 1 }
      if (rows != n) { print "want " n " rows, got " rows + 0; bad = 1 }
      exit bad
    }' "$file"
}

runbench() {
  local out=$1
  shift
  if ! timeout -k 5 25 "$run" -q -n 2 --timeout 20 -- "$bench" "$@" >"$out.raw" 2>"$out.err"; then
    echo "ftcomm-bench $* failed:" >&2
    tail -n 20 "$out.raw" "$out.err" >&2
    return 1
  fi
  # ftcomm-run prefixes each rank's lines with "[slot] "; only rank 0 prints
  if grep -qv '^\[0\] ' "$out.raw"; then
    echo "lines from ranks other than 0:" >&2
    grep -v '^\[0\] ' "$out.raw" >&2
    return 1
  fi
  sed 's/^\[0\] //' "$out.raw" >"$out"
}

# allreduce f32 sum, blocking: 8 B, 1 KiB, 128 KiB, 1 MiB (the last one added
# because the factor does not land on it)
runbench "$tmp/blocking.csv" -b 8 -e 1M -f 128 -n 3 -w 1 --csv -l test
check_csv "$tmp/blocking.csv" 2 1 8 1024 131072 1048576 || { cat "$tmp/blocking.csv"; exit 1; }
grep -q '^test,allreduce,2,8,2,f32,sum,-1,' "$tmp/blocking.csv"

# the same through the nonblocking calls
runbench "$tmp/async.csv" -b 4K -e 256K -f 64 -n 3 -w 1 -a --csv -l test
check_csv "$tmp/async.csv" 2 1 4096 262144 || { cat "$tmp/async.csv"; exit 1; }

# the text layout: a header naming the columns, then rows whose #wrong is 0
runbench "$tmp/text.txt" -b 64 -e 64K -f 32 -n 2 -w 1
grep -q '#wrong' "$tmp/text.txt"
rows=$(grep -Ec '^ +[0-9]+ +[0-9]+ ' "$tmp/text.txt" || true)
[ "$rows" -eq 3 ] || { echo "want 3 text rows, got $rows"; cat "$tmp/text.txt"; exit 1; }
awk '/^ +[0-9]+ +[0-9]+ / { if (NF != 10 || $9 != 0) { print "bad row: " $0; exit 1 } }' "$tmp/text.txt"
grep -q '^# Out of bounds values : 0 OK' "$tmp/text.txt"
# -A: algorithms compared interleaved, one row per algorithm per size, in the
# order given, each checked; CSV labels carry the algorithm
runbench "$tmp/algos.txt" -b 64K -e 512K -f 8 -n 4 -w 1 -A ring,halving,doubling
awk '/^ +[0-9]+ +[0-9]+ / { n++; want = n % 3 == 1 ? "ring" : n % 3 == 2 ? "halving" : "doubling"
       if (NF != 11 || $9 != 0 || $11 != want || !($6 > 0)) { print "bad row " n ": " $0; exit 1 } }
     END { if (n != 6) { print "want 6 rows, got " n + 0; exit 1 } }' "$tmp/algos.txt" ||
  { cat "$tmp/algos.txt"; exit 1; }
grep -q '#wrong  iters  algo' "$tmp/algos.txt"
runbench "$tmp/algos.csv" -b 1M -e 1M -n 3 -w 1 -A Halving,auto --csv -l test
sed 's/^test:[a-z]*,/test,/' "$tmp/algos.csv" >"$tmp/algos-plain.csv"
check_csv "$tmp/algos-plain.csv" 2 1 1048576 1048576 || { cat "$tmp/algos.csv"; exit 1; }
[ "$(cut -d, -f1 "$tmp/algos.csv" | tr '\n' ' ')" = "system test:halving test:auto " ] ||
  { cat "$tmp/algos.csv"; exit 1; }

# what is refused, with the reason
for bad in "-A tree" "-A ring,,halving" "-A ring -c broadcast" "-A ring,halving -a"; do
  # shellcheck disable=SC2086
  if timeout -k 5 25 "$run" -q -n 2 --timeout 20 -- "$bench" $bad >"$tmp/bad.out" 2>&1; then
    echo "ftcomm-bench $bad was accepted"; exit 1
  fi
  grep -q 'ftcomm-bench: -A' "$tmp/bad.out" || { echo "ftcomm-bench $bad:"; cat "$tmp/bad.out"; exit 1; }
done
echo "ftcomm-bench: rows well-formed and correct at 2 ranks"
