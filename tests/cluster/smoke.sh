#!/usr/bin/env bash
# smoke.sh - the local control plane works end to end with the kubectl and helm we build.
#
# Builds the binaries (tests/cluster/build.sh; cached after the first run), starts
# etcd + kube-apiserver (+ kwok when built), then: kubectl version, create a
# namespace, apply a ConfigMap, RBAC of a limited service-account token (auth can-i
# and a real forbidden call), helm version + install/uninstall of a tiny chart,
# restart of the API server with the data kept, a kwok fake node and a pod bound to
# it, stop, and no process left behind; last, a cluster whose owner dies without
# calling stop is stopped by the watchdog. Every wait is bounded.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/cluster.sh

pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }
# CMD may be a function; every command that can wait runs under `timeout`.
check() {  # check DESC CMD...: pass when CMD exits 0
  local desc=$1; shift
  local out
  if out=$("$@" 2>&1); then ok "$desc"; else bad "$desc"; echo "$out" | sed 's/^/       /'; fi
}
check_out() {  # check_out DESC REGEX CMD...: CMD exits 0 and its output matches REGEX
  local desc=$1 re=$2; shift 2
  local out
  if out=$("$@" 2>&1) && [[ $out =~ $re ]]; then ok "$desc"; else bad "$desc (wanted /$re/)"; echo "$out" | sed 's/^/       /'; fi
}

t0=$(date +%s)
echo "# build"
bin=$(timeout 3600 "$here/build.sh")
echo "# binaries in $bin (build step took $(( $(date +%s) - t0 ))s)"

work=$(mktemp -d "${TMPDIR:-/tmp}/ftc-cluster-smoke.XXXXXX")
dir=$work/c1
cleanup() {
  "$cluster" stop "$dir" >/dev/null 2>&1 || true
  "$cluster" stop "$work/c2" >/dev/null 2>&1 || true
  if [ "$fail" -eq 0 ]; then rm -rf "$work"; else echo "# kept $work for its logs"; fi
}
trap cleanup EXIT

kw=()
[ -x "$bin/kwok" ] && kw=(--kwok)
echo "# start ${kw[*]:-}"
s=$(date +%s)
"$cluster" start "${kw[@]}" "$dir"
echo "# started in $(( $(date +%s) - s ))s"
set -a; . "$dir/env"; set +a
k() { timeout 60 "$FTC_KUBECTL" --request-timeout=30s "$@"; }
not() { ! "$@"; }
anyrc() { "$@" || true; }
# running PGID...: print the groups that still have a running process (an exited
# process that init has not reaped yet, a zombie with no thread left, does not count).
running() {
  local g pid st out=""
  for g in "$@"; do
    while read -r pid st; do
      if [[ $st != Z* ]] || [ "$(ls "/proc/$pid/task" 2>/dev/null | wc -l)" -gt 1 ]; then out="$out $g"; break; fi
    done < <(ps -o pid=,stat= --sid "$g" 2>/dev/null || true)
  done
  echo "$out"
}

check_out "kubectl version (client and server v1.34)" 'Client Version: v1\.34\..*Server Version: v1\.34\.' k version
check_out "kubectl is the one we built, not /usr/bin/kubectl" "^$bin/kubectl\$" echo "$FTC_KUBECTL"
check "create namespace" k create namespace smoke
cat >"$work/cm.yaml" <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata:
  name: smoke
  namespace: smoke
data:
  greeting: hello
EOF
check "apply a ConfigMap" k apply -f "$work/cm.yaml"
check_out "read it back" '^hello$' k -n smoke get configmap smoke -o 'jsonpath={.data.greeting}'

# A service account that may only read ConfigMaps in its namespace.
check "create service account" k -n smoke create serviceaccount limited
check "create role" k -n smoke create role cm-reader --verb=get,list --resource=configmaps
check "bind it" k -n smoke create rolebinding limited-cm-reader --role=cm-reader --serviceaccount=smoke:limited
token=$(k -n smoke create token limited --duration=10m) || token=
if [ -n "$token" ]; then ok "token for the service account"; else bad "token for the service account"; fi
sa() { k --token="$token" "$@"; }
check_out "limited: can get configmaps" '^yes$' sa -n smoke auth can-i get configmaps
check_out "limited: cannot delete configmaps" '^no' anyrc sa -n smoke auth can-i delete configmaps
check_out "limited: cannot list pods in kube-system" '^no' anyrc sa -n kube-system auth can-i list pods
check_out "limited: whoami" 'system:serviceaccount:smoke:limited' sa auth whoami
check_out "limited: get works" 'smoke' sa -n smoke get configmap smoke -o name
check_out "limited: delete is forbidden" 'Forbidden|forbidden' not sa -n smoke delete configmap smoke

# helm against the same API server.
check_out "helm version" 'v3\.' timeout 60 "$FTC_HELM" version --short
mkdir -p "$work/chart/templates"
cat >"$work/chart/Chart.yaml" <<'EOF'
apiVersion: v2
name: smoke
version: 0.1.0
EOF
cat >"$work/chart/templates/cm.yaml" <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-cm
data:
  from: helm
EOF
check "helm install" timeout 90 "$FTC_HELM" install smoke-rel "$work/chart" -n smoke --wait --timeout 60s
check_out "helm's ConfigMap is there" '^helm$' k -n smoke get configmap smoke-rel-cm -o 'jsonpath={.data.from}'
check_out "helm list" 'smoke-rel' timeout 60 "$FTC_HELM" list -n smoke
check "helm uninstall" timeout 90 "$FTC_HELM" uninstall smoke-rel -n smoke --wait --timeout 60s

# The API server restarts with its data kept (etcd stays up).
s=$(date +%s)
check "restart-apiserver" timeout 120 "$cluster" restart-apiserver "$dir"
echo "# restart took $(( $(date +%s) - s ))s"
check_out "data survives the restart" '^hello$' k -n smoke get configmap smoke -o 'jsonpath={.data.greeting}'
check "stop-apiserver --kill (a crash)" timeout 60 "$cluster" stop-apiserver --kill "$dir"
check "no API server while it is down" not timeout 10 "$FTC_KUBECTL" --request-timeout=3s get ns smoke
check "start-apiserver" timeout 120 "$cluster" start-apiserver "$dir"
check_out "data survives the crash" '^hello$' k -n smoke get configmap smoke -o 'jsonpath={.data.greeting}'

if [ -n "$FTC_KWOK_RUNNING" ] && [ "$FTC_KWOK_RUNNING" = 1 ]; then
  cat >"$work/node.yaml" <<'EOF'
apiVersion: v1
kind: Node
metadata:
  name: fake-0
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    type: kwok
spec:
  taints:
  - key: kwok.x-k8s.io/node
    value: fake
    effect: NoSchedule
EOF
  cat >"$work/pod.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: on-fake
  namespace: smoke
spec:
  nodeName: fake-0
  tolerations:
  - key: kwok.x-k8s.io/node
    operator: Exists
  containers:
  - name: c
    image: fake
EOF
  check "create a kwok node" k apply -f "$work/node.yaml"
  check "kwok makes it Ready" k wait --for=condition=Ready node/fake-0 --timeout=45s
  check "create a pod bound to it" k apply -f "$work/pod.yaml"
  check "kwok runs the pod" k -n smoke wait --for=condition=Ready pod/on-fake --timeout=45s
else
  echo "# kwok not built: skipping the fake-node checks"
fi

# Stop, and nothing of it is left.
pgids=$(cat "$dir"/run/*.pid)
s=$(date +%s)
check "stop" timeout 120 "$cluster" stop "$dir"
echo "# stop took $(( $(date +%s) - s ))s"
left=$(running $pgids)
if [ -z "$left" ]; then ok "no process left after stop"; else
  bad "processes left after stop (groups:$left)"; ps -o pid,sid,stat,args --sid "${left// /,}" || true; fi

# A test that dies without calling stop: the watchdog stops its cluster.
d2=$work/c2
timeout 120 bash -c '"$1" start "$2" >/dev/null 2>&1; exit 3' _ "$cluster" "$d2" || true
if [ -f "$d2/run/kube-apiserver.pid" ] || [ -f "$d2/run/ports" ]; then
  g2=$(cat "$d2"/run/*.pid 2>/dev/null || true)
  s=$(date +%s)
  for i in $(seq 1 600); do
    left=$(running $g2)
    [ -z "$left" ] && [ ! -f "$d2/run/ports" ] && break
    sleep 0.1
  done
  echo "# watchdog cleanup took $(( $(date +%s) - s ))s"
  if [ ! -f "$d2/run/ports" ] && [ -z "$left" ]; then
    ok "watchdog stopped the cluster of a dead owner"
  else
    bad "watchdog left processes (groups:$left)"; ps -o pid,sid,stat,args --sid "${left// /,}" || true
  fi
else
  bad "second cluster did not start"; tail -n 20 "$d2"/logs/*.log 2>/dev/null || true
fi

echo "# total $(( $(date +%s) - t0 ))s"
echo "cluster smoke: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
