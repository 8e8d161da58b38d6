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
# measurement), CTL_BENCH_WORKERS (controller --workers, 2), BENCH_OUT.
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
ctl=$root/$BUILD/bin/ftcomm-controller
cluster=$root/tests/cluster/cluster.sh

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
cat >"$work/sa.kubeconfig" <<KC
apiVersion: v1
kind: Config
current-context: ftcomm
contexts:
- name: ftcomm
  context: {cluster: local, user: ftcomm-controller, namespace: ftcomm-system}
clusters:
- name: local
  cluster: {server: "$FTC_APISERVER_URL", certificate-authority: "$FTC_CA_FILE"}
users:
- name: ftcomm-controller
  user: {token: "$token"}
KC

FTCOMM_LOG_LEVEL=warn "$ctl" --kubeconfig "$work/sa.kubeconfig" --listen-address 127.0.0.1:0 \
  --identity bench-ctl --workers "$WORKERS" --coordinator-address coord.bench:7470 --dump-dir /dumps \
  >"$work/controller.log" 2>&1 &
ctl_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's/.*health and metrics on port \([0-9]*\).*/\1/p' "$work/controller.log" | tail -1)
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
  sleep 0.2
done
[ -n "$port" ] || { cat "$work/controller.log" >&2; echo "bench-controller: the controller did not start" >&2; exit 1; }

meta="$(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), controller --workers $WORKERS as its ServiceAccount with leader election"
echo "bench-controller: controller PID $ctl_pid, metrics on :$port; $JOBS x $REPLICAS pods on $NODES kwok nodes" >&2
rc=0
timeout -k 10 "$TIMEOUT" python3 tests/bench/controller/ctlbench.py --server "$FTC_APISERVER_URL" --ca "$FTC_CA_FILE" \
  --token-file "$FTC_ADMIN_TOKEN_FILE" --ns bench --jobs "$JOBS" --replicas "$REPLICAS" --nodes "$NODES" \
  --failures "$FAILURES" --idle "$IDLE" --create-timeout "$CREATE_TIMEOUT" --ctl-pid "$ctl_pid" --ctl-port "$port" \
  --out "$OUT" --meta "$meta" || rc=$?
kill -0 "$ctl_pid" 2>/dev/null || { echo "bench-controller: the controller died" >&2; rc=1; }
if [ -f "$OUT/controller.md" ]; then
  cat tests/bench/controller/compare.md >>"$OUT/controller.md"
  cat "$OUT/controller.md"
fi
exit "$rc"
