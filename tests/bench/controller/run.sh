#!/usr/bin/env bash
# run.sh - the controller at scale: ftcomm-controller against a real
# kube-apiserver + etcd with kwok nodes (tests/cluster/cluster.sh --kwok),
# CTL_BENCH_JOBS TrainingJobs x CTL_BENCH_REPLICAS replicas (100 x 32 = 3,200
# pods). The controller runs as its ServiceAccount with deploy/rbac.yaml and
# leader election on; tests/bench/controller/ctlbench.py plays the scheduler
# (binds pods to the kwok nodes), measures the time until every pod exists and
# runs, the controller's RSS and CPU (/proc), its API requests (its /metrics)
# and the API server's apiserver_request_total in an idle window, and the time
# from a pod patched to Failed to its replacement's creation. Writes
# build/bench/controller.md (printed), controller.json and controller-raw/.
#   BUILD=build/release tests/bench/controller/run.sh
# Knobs (environment): CTL_BENCH_JOBS (100), CTL_BENCH_REPLICAS (32),
# CTL_BENCH_NODES (100), CTL_BENCH_FAILURES (20), CTL_BENCH_IDLE (30 s),
# CTL_BENCH_CREATE_TIMEOUT (300 s), CTL_BENCH_TIMEOUT (900 s, the whole
# measurement), CTL_BENCH_WORKERS (controller --workers, 2), CTL_BENCH_RESYNC
# (controller --resync, its default when empty), CTL_BENCH_RESTART (1: then
# restart the controller at full scale and measure its start), BENCH_OUT.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$PWD

BUILD=${BUILD:-build/release}
OUT=${BENCH_OUT:-build/bench}
JOBS=${CTL_BENCH_JOBS:-100}
REPLICAS=${CTL_BENCH_REPLICAS:-32}
NODES=${CTL_BENCH_NODES:-100}
FAILURES=${CTL_BENCH_FAILURES:-20}
IDLE=${CTL_BENCH_IDLE:-30}
CREATE_TIMEOUT=${CTL_BENCH_CREATE_TIMEOUT:-300}
TIMEOUT=${CTL_BENCH_TIMEOUT:-900}
WORKERS=${CTL_BENCH_WORKERS:-2}
RESYNC=${CTL_BENCH_RESYNC:-}
RESTART=${CTL_BENCH_RESTART:-1}
ctl=$root/$BUILD/bin/ftcomm-controller
cluster=$root/tests/cluster/cluster.sh
# shellcheck source=../../cluster/util.sh
. "$root/tests/cluster/util.sh"

if [ ! -x "$ctl" ]; then
  echo "bench-controller: $ctl is not built (make)" >&2
  exit 1
fi
mkdir -p "$OUT"
rm -rf "$OUT/controller-raw" "$OUT/controller.md" "$OUT/controller.json"
mkdir -p "$OUT/controller-raw"
work=$(mktemp -d "${TMPDIR:-/tmp}/ftcb-controller.XXXXXX")
dir=$work/cluster
ctl_pid=
cleanup() {
  local rc=$?
  if [ -n "$ctl_pid" ]; then kill -TERM "$ctl_pid" 2>/dev/null || true; wait "$ctl_pid" 2>/dev/null || true; fi
  timeout 60 "$cluster" stop "$dir" >/dev/null 2>&1 || true
  cp "$work/controller.log" "$OUT/controller-raw/" 2>/dev/null || true
  cp "$dir/logs/kube-apiserver.log" "$OUT/controller-raw/" 2>/dev/null || true
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bench-controller: building/starting the control plane (etcd, kube-apiserver, kwok)" >&2
timeout 3600 tests/cluster/build.sh >/dev/null
timeout 120 "$cluster" start --kwok --owner $$ "$dir" >"$work/start.log" 2>&1 || { cat "$work/start.log" >&2; exit 1; }
# shellcheck disable=SC1091
. "$dir/env"
kc() { timeout 60 "$FTC_KUBECTL" "$@"; }

kc apply -f crds/ftcomm.dev_trainingjobs.yaml -f deploy/namespace.yaml -f deploy/rbac.yaml >/dev/null
kc wait --for=condition=Established crd/trainingjobs.ftcomm.dev --timeout=30s >/dev/null
kc create namespace bench >/dev/null
token=$(kc -n ftcomm-system create token ftcomm-controller --duration=2h)
write_sa_kubeconfig "$work/sa.kubeconfig" "$token"

# Flags of newer controllers: the embedded coordinators' port and the incident folder.
extra=()
help=$("$ctl" --help 2>&1 || true)
if grep -q -- '--coordinator-bind' <<<"$help"; then extra+=(--coordinator-bind 127.0.0.1:0); fi
if grep -q -- '--dump-volume' <<<"$help"; then mkdir -p "$work/dumps"; extra+=(--dump-volume "$work/dumps"); fi
start_ctl() {  # start_ctl ID: start the controller (identity bench-ID); sets ctl_pid and port
  # shellcheck disable=SC2086
  FTCOMM_LOG_LEVEL=warn "$ctl" --kubeconfig "$work/sa.kubeconfig" --listen-address 127.0.0.1:0 \
    --identity "bench-$1" --workers "$WORKERS" --coordinator-address coord.bench:7470 --dump-dir /dumps \
    ${RESYNC:+--resync "$RESYNC"} "${extra[@]}" >>"$work/controller.log" 2>&1 &
  ctl_pid=$!
  port=
  for _ in $(seq 600); do
    port=$(sed -n "s/.*health and metrics on port \([0-9]*\).*identity bench-$1\$/\1/p" "$work/controller.log" | tail -1)
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && return 0
    sleep 0.2
  done
  return 1
}
metrics() { curl -sf --max-time 10 "http://127.0.0.1:$port/metrics"; }
proc_kb() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$ctl_pid/status"; }
cpu_s() { awk '{ sub(/^.*\) /, ""); split($0, f, " "); printf "%.2f", (f[12] + f[13]) / '"$(getconf CLK_TCK)"' }' "/proc/$ctl_pid/stat"; }
verbs() {  # the api_requests_total counters by verb and HTTP code: "GET 200 12, POST 409 3"
  awk -F'[{}" ]+' '/^ftcomm_controller_api_requests_total/ { n[$3 " " $5] += $NF } END { for (v in n) printf "%s %d\n", v, n[v] }' |
    sort | paste -sd, - | sed 's/,/, /g'
}

start_ctl 1 || { cat "$work/controller.log" >&2; echo "bench-controller: the controller did not start" >&2; exit 1; }

meta="$(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), controller --workers $WORKERS${RESYNC:+ --resync $RESYNC} as its ServiceAccount with leader election"
echo "bench-controller: controller PID $ctl_pid, metrics on :$port; $JOBS x $REPLICAS pods on $NODES kwok nodes" >&2
rc=0
timeout -k 10 "$TIMEOUT" python3 tests/bench/controller/ctlbench.py --server "$FTC_APISERVER_URL" --ca "$FTC_CA_FILE" \
  --token-file "$FTC_ADMIN_TOKEN_FILE" --ns bench --jobs "$JOBS" --replicas "$REPLICAS" --nodes "$NODES" \
  --failures "$FAILURES" --idle "$IDLE" --create-timeout "$CREATE_TIMEOUT" --ctl-pid "$ctl_pid" --ctl-port "$port" \
  --out "$OUT" --meta "$meta" || rc=$?
kill -0 "$ctl_pid" 2>/dev/null || { echo "bench-controller: the controller died" >&2; rc=1; }

# A restart at full scale (a new leader, or a crash): the first releases the Lease on
# SIGTERM, the second lists every cache (a page at a time) and must create nothing.
if [ "$rc" = 0 ] && [ "$RESTART" = 1 ] && [ -f "$OUT/controller.md" ]; then
  kill -TERM "$ctl_pid"
  wait "$ctl_pid" || true
  t0=$(date +%s%N)
  if start_ctl 2; then
    ready_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    sleep 15
    m=$(metrics)
    created=$(awk '$1 == "ftcomm_controller_pods_created_total" { print $2 }' <<<"$m")
    lists=$(awk '/^ftcomm_controller_lists_total/ { n += $2 } END { print n + 0 }' <<<"$m")
    {
      echo
      echo "Restart at full scale (SIGTERM, a new controller; load $(cut -d' ' -f1-3 /proc/loadavg)):"
      echo
      echo "| measure | value |"
      echo "|---|---|"
      echo "| start to /readyz (every cache listed) | $ready_ms ms |"
      echo "| RSS 15 s after ready / peak (VmHWM) | $(awk "BEGIN { printf \"%.1f MiB / %.1f MiB\", $(proc_kb VmRSS) / 1024, $(proc_kb VmHWM) / 1024 }") |"
      echo "| CPU until then | $(cpu_s) s |"
      echo "| API requests until then (lists: $lists) | $(verbs <<<"$m") |"
      echo "| pods created by the new controller | ${created:-?} |"
    } >>"$OUT/controller.md"
    [ "${created:-1}" = 0 ] || { echo "bench-controller: the restarted controller created pods" >&2; rc=1; }
  else
    echo "bench-controller: the controller did not start again" >&2
    rc=1
  fi
fi
if [ -f "$OUT/controller.md" ]; then
  cat tests/bench/controller/compare.md >>"$OUT/controller.md"
  cat "$OUT/controller.md"
fi
exit "$rc"
