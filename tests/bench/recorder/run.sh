#!/usr/bin/env bash
# run.sh - flight-recorder benchmarks, printed as a markdown table:
#   - ns per recorded collective (schedule + started + completed), recorder
#     on (2000 entries) and off (0 entries), best of 5 runs of 2M records;
#   - instructions per recorded collective under valgrind --tool=callgrind;
#   - the recorder's share of an 8-byte allreduce at 2 ranks: the record cost
#     over the allreduce's latency, and the latency with the recorder on and
#     off (FTCOMM_RECORDER_ENTRIES=2000 / 0), alternating, median of 5 each;
#   - ftcomm-trace wall time and peak RSS on generated dumps of 1024 and
#     4096 ranks x 2000 entries (in a temporary directory, removed after).
# BUILD (default build/release) selects the build; the binaries are made
# first. BENCH_RANKS overrides the analyzer sizes (e.g. "1024"). The table
# opens with the stamp of tests/bench/stamp.sh (commit, host, date).
set -u
cd "$(dirname "$0")/../../.."
build=${BUILD:-build/release}
make --no-print-directory -s "$build/bench/recorder/bench_record" "$build/bin/ftcomm-trace" \
  "$build/tests/recorder/ftcomm-trace-gen" "$build/bin/ftcomm-run" "$build/bin/ftcomm-bench" >&2 || exit 1
bench=$build/bench/recorder/bench_record
trace=$build/bin/ftcomm-trace
gen=$build/tests/recorder/ftcomm-trace-gen
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

row() { printf '| %s | %s | %s | %s |\n' "$1" "$2" "$3" "$4"; }
verdict() { awk -v v="$1" -v t="$2" 'BEGIN { print (v + 0 <= t + 0) ? "ok" : "OVER" }'; }

echo "Measured at $(tests/bench/stamp.sh)."
echo
echo "| measure | value | target | |"
echo "|---|---|---|---|"
"$bench" 2000000 >"$tmp/rec" || exit 1
on=$(awk '$1 == "record_on_ns" { print $2 }' "$tmp/rec")
off=$(awk '$1 == "record_off_ns" { print $2 }' "$tmp/rec")
sched=$(awk '$1 == "schedule_on_ns" { print $2 }' "$tmp/rec")
clk=$(awk '$1 == "clock_ns" { print $2 }' "$tmp/rec")
row "record one collective, recorder on (ns)" "$on" "<= 50" "$(verdict "$on" 50)"
row "record one collective, recorder off (ns)" "$off" "" ""
row "ftc_rec_schedule alone, reads the clock (ns)" "$sched" "" "clock_gettime here: $clk ns"

if command -v valgrind >/dev/null; then
  n=100000
  valgrind --tool=callgrind --toggle-collect=record_one --callgrind-out-file="$tmp/cg.out" \
    "$bench" --callgrind $n >/dev/null 2>"$tmp/cg.err"
  ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$tmp/cg.out")
  if [ -n "$ir" ]; then
    row "instructions per recorded collective (callgrind)" "$(awk -v a="$ir" -v n=$n 'BEGIN { printf "%.1f", a / n }')" "" ""
  else
    row "instructions per recorded collective (callgrind)" "failed" "" "$(tail -n 1 "$tmp/cg.err")"
  fi
else
  row "instructions per recorded collective (callgrind)" "skipped: no valgrind" "" ""
fi

# One 8-byte allreduce at 2 ranks: the time column of ftcomm-bench, in us.
allreduce_us() {
  FTCOMM_RECORDER_ENTRIES=$1 timeout 120 "$build/bin/ftcomm-run" -n 2 -- \
    "$build/bin/ftcomm-bench" -b 8 -e 8 -n 20000 -w 2000 2>/dev/null |
    awk '$2 == 8 && $3 == 2 && $4 == "f32" { print $7; exit }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
for i in 1 2 3 4 5; do
  allreduce_us 2000 >>"$tmp/lat_on"
  allreduce_us 0 >>"$tmp/lat_off"
done
lat_on=$(median <"$tmp/lat_on")
lat_off=$(median <"$tmp/lat_off")
if [ -n "$lat_on" ] && [ -n "$lat_off" ]; then
  share=$(awk -v r="$on" -v l="$lat_on" 'BEGIN { printf "%.2f", 100 * r / (l * 1000) }')
  row "recorder's share of an 8-byte allreduce, 2 ranks (%)" "$share" "<= 1" \
    "$(verdict "$share" 1) ($on ns of $lat_on us)"
  row "8-byte allreduce, 2 ranks, recorder on / off (us, median of 5)" "$lat_on / $lat_off" "" \
    "difference within run-to-run noise unless it exceeds the record cost"
else
  row "recorder's share of an 8-byte allreduce" "failed" "" "ftcomm-bench gave no row"
fi

for ranks in ${BENCH_RANKS:-1024 4096}; do
  limit=$(( ranks <= 1024 ? 2 : 8 ))
  dir="$tmp/r$ranks"
  "$gen" --ranks "$ranks" --entries 2000 --seed 5 stuck "$dir" >"$tmp/want" || exit 1
  size=$(du -sm "$dir" | awk '{ print $1 }')
  "$trace" "$dir" >/dev/null 2>&1 # warm the page cache like a second look would
  /usr/bin/time -f "%e %M" -o "$tmp/time" "$trace" --json "$dir" >"$tmp/out.json" 2>/dev/null
  read -r secs rss < <(tail -n 1 "$tmp/time")
  want=$(cut -d' ' -f2 "$tmp/want")
  found=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print([f['ranks'] for f in r['findings'] if f['primary']][0])" "$tmp/out.json" 2>/dev/null)
  row "ftcomm-trace, $ranks ranks x 2000 entries (${size} MB), wall s" "$secs" "<= $limit" "$(verdict "$secs" "$limit") (culprit $want, found $found)"
  row "ftcomm-trace, $ranks ranks x 2000 entries, peak RSS MB" "$(awk -v k="$rss" 'BEGIN { printf "%.0f", k / 1024 }')" "" ""
  rm -rf "$dir"
done
