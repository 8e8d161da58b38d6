# tests/net/lib.sh - a small multi-host network in Linux network namespaces,
# sourced by the suites in tests/net/ (bash, root).
#
# net_up N makes one namespace for the coordinator and one per rank, each with
# one veth whose other end is on a bridge of this run, and an address from
# 198.18.0.0/15 (RFC 2544's benchmark range): the coordinator 198.18.0.1, rank
# slot S 198.18.0.(10+S). The bridge has no address, nothing is routed out:
# traffic flows only between this run's namespaces. Names carry this shell's
# pid and a random tag (namespaces "ftn-PID-TAG-c", "ftn-PID-TAG-rS"; links
# "fnTAGb", "fnTAGhS"), so a leftover never collides with a later run, and
# net_sweep removes what a run killed with SIGKILL left (its pid is gone).
#
# Faults are routes and qdiscs inside a namespace: a blackhole route drops
# what that namespace sends to an address, silently (no RST, no ICMP), which
# is what a dead link or a cut switch port looks like to TCP; tbf limits a
# link's rate. This kernel has no netem, so there is no delay or loss qdisc.
#
# net_down (installed as the EXIT/INT/TERM trap by net_up) kills what runs in
# the run's namespaces (only those: they are this run's), deletes them (their
# veths go with them) and the bridge. Every wait here is bounded.

NET_COORD_ADDR=198.18.0.1
NET_ID=
NET_N=0

# net_addr SLOT: the address of rank slot SLOT.
net_addr() { echo "198.18.0.$((10 + $1))"; }
# net_ns SLOT|c: the namespace of rank slot SLOT, or of the coordinator.
net_ns() { echo "ftn-$NET_ID-$( [ "$1" = c ] && echo c || echo "r$1")"; }

# net_sweep: remove the namespaces and links of earlier runs whose shell is
# gone (killed before its trap ran).
net_sweep() {
  local ns pid tag l
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^ftn-[0-9]*-[0-9a-f]*-' || true); do
    pid=${ns#ftn-}; pid=${pid%%-*}
    kill -0 "$pid" 2>/dev/null && continue
    tag=${ns#ftn-"$pid"-}; tag=${tag%%-*}
    net__kill_ns "$ns"
    ip netns del "$ns" 2>/dev/null
    ip link del "fn${tag}b" 2>/dev/null
  done
  # Host ends of veth pairs whose namespace is gone (links named fnTAGh*
  # whose bridge fnTAGb no longer exists).
  for l in $(ip -o link show 2>/dev/null | sed -n 's/^[0-9]*: \(fn[0-9a-f]\{4\}h[0-9c]*\)@.*/\1/p'); do
    tag=${l#fn}; tag=${tag%%h*}
    ip link show "fn${tag}b" >/dev/null 2>&1 || ip link del "$l" 2>/dev/null
  done
  return 0
}

# net__kill_ns NS: SIGKILL every process in NS (bounded: 20 rounds).
net__kill_ns() {
  local i pids
  for i in $(seq 1 20); do
    pids=$(ip netns pids "$1" 2>/dev/null) || return 0
    [ -z "$pids" ] && return 0
    # (a stopped process dies on SIGKILL too)
    kill -KILL $pids 2>/dev/null
    sleep 0.05
  done
}

# net_up N: the coordinator's and N ranks' namespaces on one bridge; sets the
# trap that tears them down.
net_up() {
  local n=$1 s tag
  [ "$(id -u)" = 0 ] || { echo "net: needs root (network namespaces)" >&2; return 1; }
  command -v ip >/dev/null || { echo "net: needs iproute2 (ip, tc)" >&2; return 1; }
  net_sweep
  tag=$(od -An -N2 -tx2 /dev/urandom | tr -d ' ')
  NET_ID=$$-$tag NET_N=$n NET_TAG=$tag
  trap net_down EXIT
  trap 'net_down; exit 130' INT
  trap 'net_down; exit 143' TERM
  ip link add "fn${tag}b" type bridge || return 1
  ip link set "fn${tag}b" up || return 1
  for s in c $(seq 0 $((n - 1))); do
    net__host "$s" "$( [ "$s" = c ] && echo "$NET_COORD_ADDR" || net_addr "$s")" || return 1
  done
}

# net__host SLOT|c ADDR: a namespace with lo and eth0 (ADDR/24) on the bridge.
net__host() {
  local ns h
  ns=$(net_ns "$1") h=fn${NET_TAG}h$1
  ip netns add "$ns" &&
    ip link add "$h" type veth peer name eth0 netns "$ns" &&
    ip link set "$h" master "fn${NET_TAG}b" up &&
    ip -n "$ns" link set lo up &&
    ip -n "$ns" addr add "$2/24" dev eth0 &&
    ip -n "$ns" link set eth0 up
}

# net_down: everything net_up made (idempotent).
net_down() {
  local s ns
  [ -n "$NET_ID" ] || return 0
  for s in $(seq 0 $((NET_N - 1))) c; do
    ns=$(net_ns "$s")
    net__kill_ns "$ns"
    ip netns del "$ns" 2>/dev/null
    # (the kernel frees a namespace, and its veth pairs, later and
    # asynchronously: the host end goes now)
    ip link del "fn${NET_TAG}h$s" 2>/dev/null
  done
  ip link del "fn${NET_TAG}b" 2>/dev/null
  NET_ID=
  return 0
}

# net_in SLOT|c CMD...: run CMD in that namespace.
net_in() { local ns; ns=$(net_ns "$1"); shift; ip netns exec "$ns" "$@"; }

# net__hole add|del FROM TO: FROM's packets to TO are dropped (FROM, TO: a
# slot or c).
net__hole() {
  local to
  [ "$3" = c ] && to=$NET_COORD_ADDR || to=$(net_addr "$3")
  ip -n "$(net_ns "$2")" route "$1" blackhole "$to/32"
}
# net_cut FROM TO: FROM cannot reach TO (one way: TO's packets still reach FROM).
net_cut() { net__hole add "$1" "$2"; }
net_uncut() { net__hole del "$1" "$2" 2>/dev/null; return 0; }
# net_cut2 A B: A and B cannot reach each other.
net_cut2() { net__hole add "$1" "$2" && net__hole add "$2" "$1"; }
net_uncut2() { net_uncut "$1" "$2"; net_uncut "$2" "$1"; }

# net_rate SLOT|c RATE: the namespace's link sends at most RATE (tbf, e.g.
# 1gbit); the bridge port limits what it receives to the same rate, so both
# directions of the link are limited.
net_rate() {
  local ns=$(net_ns "$1") h=fn${NET_TAG}h$1 burst
  # A burst of at least rate x 1 ms (and 64 KiB for GSO segments).
  burst=$(awk -v r="$2" 'BEGIN { v = r + 0; if (r ~ /gbit$/) v *= 1e9; else if (r ~ /mbit$/) v *= 1e6
    b = v / 8 / 1000; if (b < 65536) b = 65536; printf "%d", b }')
  tc -n "$ns" qdisc replace dev eth0 root tbf rate "$2" burst "$burst" latency 20ms &&
    tc qdisc replace dev "$h" root tbf rate "$2" burst "$burst" latency 20ms
}
