#!/usr/bin/env bash
# bandwidth.sh [BUILD] - allreduce over rate-limited links: each rank in a
# network namespace of its own (tests/net/lib.sh) whose link is limited by
# tbf to RATE both ways, ftcomm (TCP, under ftcomm-run), Open MPI (TCP btl)
# and Gloo (ring) in one run, the same sizes and data (tests/bench/common).
# Prints a markdown table, stamped by tests/bench/stamp.sh: busbw per system,
# rate and size, and busbw as a fraction of the link rate. On loopback the
# system that spends the least CPU wins; behind a link of a fixed rate, the
# one whose algorithm keeps the wire busy does, as on a cluster.
#   NET_BW_RANKS (4), NET_BW_RATES ("1gbit 5gbit"), NET_BW_MIN (16M),
#   NET_BW_MAX (64M), NET_BW_ITERS (8), NET_BW_REPEAT (2: the best of each),
#   NET_BW_SYSTEMS ("ftcomm openmpi gloo"), NET_BW_OUT (build/bench/net-bandwidth.md).
# Root and iproute2; every run is bounded by a timeout.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-${BUILD:-build/release}}
BIN=$(cd "$BUILD/bin" 2>/dev/null && pwd) || { echo "bandwidth: no $BUILD/bin: build first (make)" >&2; exit 2; }
BB=$(cd "$BUILD/bench" 2>/dev/null && pwd) || BB=
N=${NET_BW_RANKS:-4}
RATES=${NET_BW_RATES:-1gbit 5gbit}
MIN=${NET_BW_MIN:-16M} MAX=${NET_BW_MAX:-64M}
ITERS=${NET_BW_ITERS:-8}
REPEAT=${NET_BW_REPEAT:-2}
SYSTEMS=${NET_BW_SYSTEMS:-ftcomm openmpi gloo}
OUT=${NET_BW_OUT:-build/bench/net-bandwidth.md}
. tests/net/lib.sh
tmp=$(mktemp -d)
cleanup() { net_down; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
stamp=$(tests/bench/stamp.sh)
net_up "$N" || exit 1
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
export NET_ID
sweep=(-c allreduce -d f32 -o sum -b "$MIN" -e "$MAX" -f 2 -n "$ITERS" -w 2 --csv -t 120000)
hosts=$(for r in $(seq 0 $((N - 1))); do net_addr "$r"; done | paste -sd,)
nss=$(for r in $(seq 0 $((N - 1))); do net_ns "$r"; done | paste -sd,)

# run SYSTEM: its CSV rows on stdout (bounded by 300 s).
run() {
  case $1 in
    ftcomm)
      FTCOMM_BIND_HOST=0.0.0.0 FTCOMM_SOCKET_IFNAME==eth0 net_in c timeout -k 5 300 \
        "$BIN/ftcomm-run" -q --coordinator-host "$NET_COORD_ADDR" -n "$N" -- \
        "$PWD/tests/net/in-ns.sh" "$BIN/ftcomm-bench" "${sweep[@]}" -l ftcomm-tcp ;;
    openmpi)  # one orted per rank, started in its namespace by mpi-agent.sh (as ssh would)
      net_in c timeout -k 5 300 mpirun --allow-run-as-root --oversubscribe --bind-to none \
        -np "$N" --host "$hosts" --mca plm_rsh_agent "$PWD/tests/net/mpi-agent.sh" \
        --mca oob_tcp_if_include eth0 --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include eth0 "$BB/mpi_bench" "${sweep[@]}" -l openmpi-tcp ;;
    gloo)
      GLOO_BENCH_NETNS=$nss GLOO_BENCH_HOSTS=$hosts timeout -k 5 300 \
        "$BB/gloo_bench" -N "$N" -A ring "${sweep[@]}" -l gloo-ring ;;
  esac
}

echo "rate,system,size,busbw_GBps" >"$tmp/rows.csv"
for rate in $RATES; do
  for r in c $(seq 0 $((N - 1))); do net_rate "$r" "$rate" || { echo "bandwidth: tc failed" >&2; exit 1; }; done
  for pass in $(seq 1 "$REPEAT"); do
    order=$SYSTEMS
    [ $((pass % 2)) = 0 ] && order=$(echo "$SYSTEMS" | tr ' ' '\n' | tac | tr '\n' ' ')
    for sys in $order; do
      echo "bandwidth: $sys at $rate, pass $pass (load $(cut -d' ' -f1 /proc/loadavg))" >&2
      if ! run "$sys" >"$tmp/out.csv" 2>"$tmp/err.log"; then
        echo "bandwidth: $sys at $rate failed:" >&2; tail -n 5 "$tmp/err.log" | sed 's/^/    /' >&2
        continue
      fi
      # (the rows' columns: system,collective,ranks,size,...,busbw_GBps is the 11th)
      awk -F, -v rate="$rate" -v sys="$sys" '$2 == "allreduce" { print rate "," sys "," $4 "," $11 }' \
        "$tmp/out.csv" >>"$tmp/rows.csv"
    done
  done
done

mkdir -p "$(dirname "$OUT")"
python3 - "$tmp/rows.csv" "$N" "$stamp" "$SYSTEMS" >"$OUT" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
n, stamp, systems = sys.argv[2], sys.argv[3], sys.argv[4].split()
best = {}
for r in rows:
    k = (r["rate"], r["system"], int(r["size"]))
    best[k] = max(best.get(k, 0.0), float(r["busbw_GBps"]))
def gbit(rate):
    v = float(rate.rstrip("gbitm"))
    return v if rate.endswith("gbit") else v / 1000
print(f"Allreduce f32 sum, {n} ranks, each in its own network namespace behind a tbf-limited link "
      f"(both ways), best of the passes; busbw in GB/s and as a fraction of the link rate. {stamp}.")
print()
print("| link | size | " + " | ".join(systems) + " |")
print("|---|---|" + "---|" * len(systems))
for rate in sorted({k[0] for k in best}, key=gbit):
    link = gbit(rate) / 8  # GB/s
    for size in sorted({k[2] for k in best if k[0] == rate}):
        cells = []
        for s in systems:
            v = best.get((rate, s, size))
            cells.append("failed" if v is None else f"{v:.3f} ({100 * v / link:.0f}%)")
        print(f"| {rate} | {size // (1 << 20)} MiB | " + " | ".join(cells) + " |")
PY
cat "$OUT"
echo "bandwidth: wrote $OUT" >&2
