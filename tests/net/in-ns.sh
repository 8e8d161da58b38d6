#!/bin/sh
# in-ns.sh PROGRAM [ARG]... - run one rank of ftcomm-run in its slot's
# network namespace (tests/net/lib.sh): ftcomm-run starts this for every
# rank, with FTCOMM_SLOT and NET_ID in the environment. ip netns exec execs
# PROGRAM, so the rank keeps this process's pid (ftcomm-run's process_gone).
[ -n "${NET_ID:-}" ] && [ -n "${FTCOMM_SLOT:-}" ] || {
  echo "in-ns.sh: NET_ID and FTCOMM_SLOT must be set (run under tests/net/ suites)" >&2
  exit 2
}
exec ip netns exec "ftn-$NET_ID-r$FTCOMM_SLOT" "$@"
