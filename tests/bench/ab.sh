#!/usr/bin/env bash
# ab.sh - one allreduce size timed on two builds of ftcomm in alternating runs
# (A B A B ...), for a change whose cost is smaller than a busy host's noise:
# each run is `ftcomm-run -q -n RANKS -- ftcomm-bench` of its own build, and
# the table gives each run's mean time per call (the bench's time_us, rank 0)
# and the CPU time of the whole run (both ranks and the launcher, user + system)
# per call, then each build's median and mean of both.
#   tests/bench/ab.sh DIR_A DIR_B [PAIRS] [BYTES] [ITERS] [RANKS]
# DIR_A and DIR_B are trees with a built build/release (e.g. /work/main and
# this one); defaults: 8 pairs, 8 bytes, 30000 iterations, 2 ranks (and
# AB_WARMUP=100 warmup calls per run).
# FTCOMM_* in the environment reach both (FTCOMM_SPIN_US=0: a rank sleeps in
# poll() instead of spinning, so its CPU time is its work).
set -u
[ $# -ge 2 ] || { sed -n 2,12p "$0" >&2; exit 2; }
a=$1 b=$2 pairs=${3:-8} bytes=${4:-8} iters=${5:-30000} ranks=${6:-2}
run() { # DIR -> "time_us cpu_us_per_call"
  local out t cpu
  out=$(cd "$1" && /usr/bin/time -f "CPU %U %S" timeout 600 build/release/bin/ftcomm-run -q -n "$ranks" -- \
    build/release/bin/ftcomm-bench -b "$bytes" -e "$bytes" -w "${AB_WARMUP:-100}" -n "$iters" --csv 2>&1)
  t=$(echo "$out" | grep -m1 "ftcomm,allreduce" | cut -d, -f9)
  cpu=$(echo "$out" | awk -v n="$iters" -v w="${AB_WARMUP:-100}" '/^CPU/ {printf "%.3f", ($2 + $3) * 1e6 / (n + w)}')
  echo "${t:-nan} ${cpu:-nan}"
}
rows=$(for i in $(seq "$pairs"); do
  echo "$i A $(run "$a")"
  echo "$i B $(run "$b")"
done)
echo "run build time_us cpu_us_per_call"
echo "$rows"
echo "$rows" | awk '
  { t[$2] = t[$2] " " $3; c[$2] = c[$2] " " $4 }
  function stats(s,   v, n, i, j, x, sum) {
    n = split(s, v, " "); sum = 0
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { x = v[i]; v[i] = v[j]; v[j] = x }
    for (i = 1; i <= n; i++) sum += v[i]
    return sprintf("median %.2f mean %.2f", n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2, sum / n)
  }
  END { for (k in t) printf "%s: time_us %s; cpu_us_per_call %s\n", k, stats(t[k]), stats(c[k]) }' | sort
