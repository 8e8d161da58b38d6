#!/usr/bin/env bash
# run.sh [SIZES...] - the coordinator's scale benchmark: the member simulator
# at each size (default 1024 4096 16384) with the default heartbeat interval
# (1000 ms; 4000 from 16,384 members, SCALE_HB_MS sets it), one line per scenario (FTCOMM_COORD_LOOP=poll: the coordinator
# on libwebsockets' poll(2) loop instead of epoll, for comparison), then a table in $BUILD/bench/scale.md
# stamped by tests/bench/stamp.sh (docs/scale.md shows it).
#
# Descriptors: each side holds one per member, so the simulator raises its
# soft RLIMIT_NOFILE to the hard limit (as root it lifts the hard limit too,
# as containerd's LimitNOFILE=1048576 gives a pod); below that a size is
# skipped with the reason.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build/release}
SIM=$BUILD/tests/scale/coord_sim
OUT=$BUILD/bench
mkdir -p "$OUT"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1024 4096 16384)
stamp=$(tests/bench/stamp.sh)
raw=$OUT/scale.txt
: >"$raw"
rc=0
for n in "${sizes[@]}"; do
  echo "coord_sim --members $n" >&2
  # One simulating process cannot send 16,384 heartbeats a second on a small
  # host (the coordinator then finds members silent and drops them as hung):
  # from 16,384 members the heartbeat interval is 4 s (4,096 a second), and
  # a phase may take 10 minutes (docs/scale.md).
  hb=1000 limit=180
  if [ "$n" -ge 16384 ]; then hb=4000 limit=600; fi
  "$SIM" --members "$n" --heartbeat-ms "${SCALE_HB_MS:-$hb}" --steady-s 5 --timeout-s "$limit" \
    --rss-cap-mb "${SCALE_RSS_CAP_MB:-4096}" | tee -a "$raw" || rc=1
done
python3 - "$raw" "$stamp" >"$OUT/scale.md" <<'PY'
import sys
rows = [dict(kv.split("=", 1) for kv in line.split()) for line in open(sys.argv[1]) if "=" in line]
print(sys.argv[2])
print()
print("| members | views | loop | scenario | first view | last view | coordinator sent (views) | coordinator CPU | RSS (peak) |")
print("|---:|---|---|---|---:|---:|---:|---:|---:|")
for r in rows:
    if "stopped" in r:
        print(f"| {r['members']} | {r.get('views','')} | {r.get('loop','')} | {r['scenario']} | stopped: {r['stopped']} | | | | {r.get('coord_rss_mb','')} MB |")
        continue
    if r["scenario"] == "steady":
        print(f"| {r['members']} | {r['views']} | {r['loop']} | heartbeats, steady | | | {float(r['coord_bytes_per_s'])/1e6:.2f} MB/s | "
              f"{r['coord_cpu_pct']}% of a core | {r['coord_rss_mb']} MB |")
        continue
    extra = f" ({r['dumps']} dumps)" if "dumps" in r else ""
    print(f"| {r['members']} | {r['views']} | {r['loop']} | {r['scenario']}{extra} | {r['first_view_ms']} ms | {r['last_view_ms']} ms | "
          f"{int(r['coord_bytes'])/1e6:.2f} MB ({int(r['view_bytes'])/1e6:.2f} MB) | {r['coord_cpu_ms']} ms | "
          f"{r['coord_rss_mb']} ({r['coord_peak_rss_mb']}) MB |")
PY
cat "$OUT/scale.md"
exit $rc
