#!/usr/bin/env bash
# stamp.sh - prints the line that stamps a benchmark table: the commit that was
# measured ("+changes" when the working tree differs from it), the host (CPUs,
# CPU model, kernel), the date of the run and the load average at its start.
# The benchmark pages (docs/benchmarks.md, docs/recovery.md) show each table
# with this line, so a table says what it measured and where.
#   tests/bench/stamp.sh   ->  commit 1a2b3c4, 2 CPUs (AMD EPYC), Linux 6.1.0, 2026-12-07, load average 0.52 at the start
set -u
cd "$(dirname "$0")/../.." || exit 1
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then commit="$commit+changes"; fi
model=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//')
printf 'commit %s, %s CPUs (%s), %s %s, %s, load average %s at the start\n' \
  "$commit" "$(nproc)" "${model:-unknown model}" "$(uname -s)" "$(uname -r)" "$(date -u +%Y-%m-%d)" \
  "$(cut -d' ' -f1 /proc/loadavg)"
