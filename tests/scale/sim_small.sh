#!/bin/sh
# sim_small.sh BUILD - the member simulator at 200 members, 500 ms
# heartbeats: the first epoch, a crash, a hang (every member uploads a dump)
# and a join, each seen by every member with the size and order it should
# have (the whole views, about 22 KB, go in several 16 KiB pieces; the
# others as deltas). A behaviour test: the timings it prints are not checked.
# The coordinator must wait in epoll (libwebsockets' libev loop, which
# scripts/deps.sh installs with libwebsockets-dev): a silent fall back to
# poll(2) would bring back its walk of every session per wake-up.
set -eu
BUILD=${1:?usage: sim_small.sh BUILD}
out=$("$BUILD/tests/scale/coord_sim" --members 200 --heartbeat-ms 500 --steady-s 1 --timeout-s 60)
printf '%s\n' "$out"
if printf '%s\n' "$out" | grep -q 'loop=poll'; then
  echo "sim_small: the coordinator fell back to poll(2) (its log says why)" >&2
  exit 1
fi
