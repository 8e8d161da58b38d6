#!/bin/sh
# mpi-agent.sh HOST COMMAND... - Open MPI's launch agent (plm_rsh_agent, in
# place of ssh) for ranks in network namespaces (tests/net/lib.sh): HOST is
# a rank's address 198.18.0.(10+S); the daemon (orted) starts in slot S's
# namespace, with the command line as ssh would hand it to a remote shell.
host=$1
shift
slot=$((${host##*.} - 10))
[ -n "${NET_ID:-}" ] && [ "$slot" -ge 0 ] 2>/dev/null || {
  echo "mpi-agent.sh: needs NET_ID and a rank address 198.18.0.(10+S), not '$host'" >&2
  exit 2
}
exec ip netns exec "ftn-$NET_ID-r$slot" sh -c "$*"
