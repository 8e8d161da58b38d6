# lib.sh - the harness of the suites that run against the local control plane
# (tests/controller, tests/install, tests/e2e). Source it first:
#
#   . "$(dirname "$0")/../cluster/lib.sh"
#   start_cluster [--kwok] [--gc]   # etcd + kube-apiserver (+ kwok, + the GC) for this suite
#   check "the CRD applies" kc apply -f crds/...
#   ...
#   finish                          # prints "# N passed, M failed"; exit status 1 on a failure
#
# The checks (each prints "ok   - DESC" or "FAIL - DESC" and the command's last lines):
#   check DESC CMD...             CMD exits 0
#   check_out DESC REGEX CMD...   CMD exits 0 AND its output (stdout and stderr) matches
#                                 REGEX (bash =~, extended; '^$' = no output at all)
#   check_fails DESC REGEX CMD... CMD exits non-zero AND its output matches REGEX (a refusal
#                                 that must say what is wrong, `kubectl auth can-i` saying no)
#   eventually SECONDS CMD...     not a check: retry CMD every 0.2 s until it exits 0;
#                                 exits 1 if it never did (wrap it: check DESC eventually ...)
# Helpers: kc (the built kubectl, bounded), hm (the built helm), use_tools (FTC_HELM and
# FTC_KUBECTL without a cluster), metric NAME (a sample of the controller's /metrics on
# $port), ctrl_port (the health port the last controller in $ctrl_log logged), and from
# util.sh free_port and write_sa_kubeconfig.
# Suites whose pods run as local processes (the node agent, tests/e2e/agent):
#   agent_suite NS [--gc]         the binaries, the cluster, the CRD, namespace NS; sets ctl,
#                                 trainer, trace, ns, vol (dump volume), state (the agent's),
#                                 ctrl_log, coord_port
#   run_controller ID [FLAGS...]  the controller for $ns with the coordinator port on
#                                 $coord_port, in the background ($ctrl_pid); returns once it
#                                 leads and listens there (1 if not in 30 s); sets port
#   start_agent NODES             the agent for $ns on NODES (a comma list) ($agent_pid);
#                                 checks that they register
# Variables: root (the repository), build (the build
# directory: FTC_BUILD_DIR, default build/release; build/address runs sanitized
# binaries), chart, cluster (cluster.sh), work (a fresh directory, removed on exit when
# every check passed, kept and named otherwise), dir (the cluster's, after start_cluster).
# On exit the cluster is stopped, and so are a background controller and node agent
# whose pids a suite keeps in ctrl_pid and agent_pid. A suite with more to stop sets its own EXIT trap that calls on_exit.
# It sets -u and pipefail; -e is the suite's choice (the checks work under both).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cluster=$root/tests/cluster/cluster.sh
build=$root/${FTC_BUILD_DIR:-build/release}
chart=$root/charts/ftcomm
# shellcheck source=util.sh
. "$root/tests/cluster/util.sh"
pass=0 fail=0
work=$(mktemp -d "${TMPDIR:-/tmp}/ftct-$(basename "$(dirname "$0")")-$(basename "$0" .sh).XXXXXX")
dir=
ctrl_pid=
agent_pid=

ok() { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }
show() { if [ -n "$1" ]; then echo "$1" | tail -"$2" | sed 's/^/       /'; else echo "       (no output)"; fi; }

check() {  # check DESC CMD...: CMD exits 0
  local desc=$1 out; shift
  if out=$("$@" 2>&1); then ok "$desc"; else bad "$desc"; show "$out" 25; fi
}
check_out() {  # check_out DESC REGEX CMD...: CMD exits 0 and its output matches REGEX
  local desc=$1 re=$2 out rc=0; shift 2
  out=$("$@" 2>&1) || rc=$?
  if [ $rc -ne 0 ]; then bad "$desc (exit status $rc)"; show "$out" 25; return 0; fi
  if [[ $out =~ $re ]]; then ok "$desc"; else bad "$desc (wanted /$re/)"; show "$out" 25; fi
}
check_fails() {  # check_fails DESC REGEX CMD...: CMD exits non-zero and its output matches REGEX
  local desc=$1 re=$2 out; shift 2
  if out=$("$@" 2>&1); then bad "$desc (it succeeded)"; show "$out" 15; return 0; fi
  if [[ $out =~ $re ]]; then ok "$desc"; else bad "$desc (wanted /$re/)"; show "$out" 15; fi
}
eventually() {  # eventually SECONDS CMD...: retry CMD every 0.2 s until it exits 0
  local limit=$1; shift
  local end=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -ge "$end" ] && return 1
    sleep 0.2
  done
}
kc() { timeout 60 "$FTC_KUBECTL" "$@"; }
hm() { timeout 120 "$FTC_HELM" "$@"; }
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
ctrl_port() { sed -n 's/.*health and metrics on port \([0-9]*\).*/\1/p' "$ctrl_log" | tail -1; }

# The tools without a cluster: FTC_HELM and FTC_KUBECTL from the cached build.
use_tools() {
  local bin
  bin=$(timeout 3600 "$root/tests/cluster/build.sh") || { echo "FAIL - building helm and kubectl (tests/cluster/build.sh)"; exit 1; }
  export FTC_HELM=$bin/helm FTC_KUBECTL=$bin/kubectl
  export HELM_CACHE_HOME=$work/helm/cache HELM_CONFIG_HOME=$work/helm/config HELM_DATA_HOME=$work/helm/data
}

start_cluster() {  # start_cluster [--kwok] [--gc]: the suite's cluster in $work/cluster, its env sourced
  [ -x "$cluster" ] || { echo "FAIL - tests/cluster/cluster.sh is missing"; exit 1; }
  timeout 3600 "$root/tests/cluster/build.sh" >/dev/null || { echo "FAIL - building the control plane (tests/cluster/build.sh)"; exit 1; }
  dir=$work/cluster
  if ! timeout 120 "$cluster" start "$@" --owner $$ "$dir" >"$work/start.log" 2>&1; then
    cat "$work/start.log"
    echo "FAIL - cluster start"
    exit 1
  fi
  # shellcheck disable=SC1091
  . "$dir/env"
}

on_exit() {
  local rc=$?
  if [ -n "${agent_pid:-}" ]; then kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null; fi
  if [ -n "${ctrl_pid:-}" ]; then kill "$ctrl_pid" 2>/dev/null && wait "$ctrl_pid" 2>/dev/null; fi
  if [ -n "$dir" ]; then "$cluster" stop "$dir" >/dev/null 2>&1 || true; fi
  if [ "$fail" -eq 0 ] && [ $rc -eq 0 ]; then rm -rf "$work"; else echo "# kept $work for its logs"; fi
}
trap on_exit EXIT

# crd_ready [CRD]: the CRD is Established and kubectl's discovery serves it. `kubectl wait`
# alone is not enough: it fails at once ("accessor error") while the new CRD has no
# conditions yet, and a large CRD (the embedded pod template schema) takes a moment.
crd_ready() {
  local crd=${1:-trainingjobs.ftcomm.dev} i
  for ((i = 0; i < 150; i++)); do
    if [ "$(kc get crd "$crd" -o 'jsonpath={.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ] &&
       kc api-resources --api-group="${crd#*.}" -o name 2>/dev/null | grep -qx "$crd"; then
      return 0
    fi
    sleep 0.2
  done
  echo "# CRD $crd not established and served within 30 s" >&2
  return 1
}

agent_suite() {  # agent_suite NS [start_cluster options]
  ctl=$build/bin/ftcomm-controller trainer=$build/bin/ftcomm-trainer trace=$build/bin/ftcomm-trace
  [ -x "$ctl" ] && [ -x "$trainer" ] && [ -x "$trace" ] || { echo "FAIL - build first: make test-bins"; exit 1; }
  ns=$1
  shift
  start_cluster "$@"
  vol=$work/volume state=$work/agent ctrl_log=$work/controller.log
  mkdir -p "$vol" "$state"
  coord_port=$(free_port)
  check "CRD applies" kc apply -f "$root/crds/ftcomm.dev_trainingjobs.yaml"
  crd_ready
  kc create namespace "$ns" >/dev/null
}

run_controller() {  # run_controller ID [FLAGS...]: "=== controller ID" in $ctrl_log starts its lines
  local id=$1
  shift
  echo "=== controller $id" >>"$ctrl_log"
  FTCOMM_LOG_LEVEL=info "$ctl" --kubeconfig "$KUBECONFIG" --namespace "$ns" --identity "$id" --listen-address 127.0.0.1:0 \
    --coordinator-bind "127.0.0.1:$coord_port" --coordinator-address "127.0.0.1:$coord_port" \
    --dump-volume "$vol" --dump-dir "$work/pod-dumps" --dump-wait 4 \
    --lease-duration 15 --renew-deadline 10 --retry-period 2 "$@" >>"$ctrl_log" 2>&1 &
  ctrl_pid=$!
  eventually 10 grep -q "identity $id\$" "$ctrl_log" || return 1
  port=$(ctrl_port)
  eventually 30 bash -c "sed -n '/=== controller $id\$/,\$p' '$ctrl_log' | grep -q 'coordinator port $coord_port'"
}

agent_nodes_are() { [ "$(kc get nodes -l ftcomm.dev/e2e-agent -o name | wc -l)" = "$1" ]; }
start_agent() {  # start_agent NODES
  python3 "$root/tests/e2e/agent" --namespace "$ns" --nodes "$1" --state "$state" --root "$root" \
    >"$work/agent.log" 2>&1 &
  agent_pid=$!
  check "the node agent registers its Nodes" eventually 20 agent_nodes_are "$(tr ',' '\n' <<<"$1" | wc -l)"
}

finish() {
  echo "# $pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
