#!/usr/bin/env bash
# chart.sh - the Helm chart against a real kube-apiserver (tests/cluster), with the
# real helm and kubectl:
#   helm template | kubectl apply --dry-run=server; the controller's pod template
#   passes the "restricted" Pod Security Standard (a namespace enforcing it admits it
#   and refuses a weakened one); helm install (values checked by the schema at install
#   time, NOTES shown); the controller binary runs with the installed Deployment's
#   flags and the chart's ServiceAccount (ready, takes the Lease); helm upgrade with other values changes the objects (replicas,
#   dump claim size, ServiceMonitor off, log level); the example TrainingJob is
#   accepted; helm uninstall removes the release's objects and keeps the CRD, the
#   TrainingJobs and the dump claim (helm.sh/resource-policy: keep).
set -euo pipefail
. "$(dirname "$0")/../cluster/lib.sh"
start_cluster
cd "$root"
ns=ftcomm-system

# The ServiceMonitor API, for serviceMonitor.enabled=true (see the fixture's header).
check "ServiceMonitor CRD (fixture) established" kc apply -f tests/install/fixtures/servicemonitor-crd.yaml
check "... and served" kc wait --for=condition=Established --timeout=30s crd/servicemonitors.monitoring.coreos.com

# 1. Everything the chart renders (with its CRD and the ServiceMonitor) is accepted by
#    the API server, validated against the real schemas, without being stored.
check "namespace $ns" kc create namespace $ns
hm template ftcomm "$chart" -n $ns --include-crds >"$work/all.yaml"
check "CRD first (a dry run cannot validate TrainingJob-free objects without it)" kc apply -f charts/ftcomm/crds/
check "helm template --include-crds | kubectl apply --dry-run=server -f -" kc apply --dry-run=server -f "$work/all.yaml"
hm template ftcomm "$chart" -n $ns --set serviceMonitor.enabled=true >"$work/sm.yaml"
check "... with serviceMonitor.enabled=true" kc apply --dry-run=server -f "$work/sm.yaml"
hm template ftcomm "$chart" -n $ns --set controller.watchNamespace=team-a >"$work/np.yaml"
check "... with controller.watchNamespace (the TrainingJob pods' NetworkPolicy there too)" \
  bash -c '"$0" create namespace team-a >/dev/null && "$0" apply --dry-run=server -f "$1"' "$FTC_KUBECTL" "$work/np.yaml"
check_out "NetworkPolicies rendered: the controller's (on by default), the watched namespace's" \
  '^NetworkPolicy ftcomm-controller ftcomm-system NetworkPolicy ftcomm-trainingjobs team-a $' \
  bash -c 'python3 -c "
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d[\"kind\"] == \"NetworkPolicy\": print(d[\"kind\"], d[\"metadata\"][\"name\"], d[\"metadata\"][\"namespace\"], end=\" \")
print()" "$0"' "$work/np.yaml"
check_out "networkPolicy.enabled=false renders none" '^0$' \
  bash -c '"$0" template ftcomm "$1" --set networkPolicy.enabled=false | grep -c "kind: NetworkPolicy" || true' "$FTC_HELM" "$chart"
check_out "the dry run stored nothing" '^No resources found' kc -n $ns get deploy,svc,pvc,sa

# 2. Restricted Pod Security: the Deployment's pod template as a Pod in a namespace
#    that enforces the restricted profile.
pod_of() {  # pod_of RENDERED_YAML: the Deployment's pod template as a Pod (JSON)
  python3 -c '
import json, sys, yaml
d = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"][0]
t = d["spec"]["template"]
print(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "psa-check", "labels": t["metadata"]["labels"]}, "spec": t["spec"]}))' "$1"
}
check "namespace enforcing pod-security restricted" kc create namespace psa
check "... labelled" kc label namespace psa pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest
pod_of "$work/all.yaml" >"$work/pod.json"
psa_ok() {  # admitted, and without a Pod Security warning
  local out
  out=$(kc -n psa create --dry-run=server -f "$1" 2>&1) || { echo "$out"; return 1; }
  ! grep -qi 'violate\|PodSecurity' <<<"$out" || { echo "$out"; return 1; }
}
check "the controller's pod passes the restricted profile (server dry run)" psa_ok "$work/pod.json"
hm template ftcomm "$chart" -n $ns --set securityContext.allowPrivilegeEscalation=true --set 'securityContext.capabilities.drop={}' >"$work/weak.yaml"
pod_of "$work/weak.yaml" >"$work/weak.json"
check_fails "... a weakened one is refused (the namespace really enforces it)" \
  'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false.*unrestricted capabilities' \
  kc -n psa create --dry-run=server -f "$work/weak.json"

# 3. helm install. The claim's class allows expansion so that the upgrade can grow it
#    (there is no volume provisioner: the test marks the claim Bound itself, as the
#    PV controller would).
cat >"$work/sc.yaml" <<'Y'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: expandable
provisioner: example.com/none
allowVolumeExpansion: true
Y
check "StorageClass that allows expansion" kc apply -f "$work/sc.yaml"
check_fails "helm install refuses bad values (schema) before creating anything" "/controller/replicas': minimum: got -3, want 0" \
  hm install ftcomm "$chart" -n $ns --set controller.replicas=-3
check_out "... and nothing was created" '^No resources found' kc -n $ns get deploy,svc,pvc,sa
check_out "helm install shows the NOTES (what to do next; the unlabelled namespace and how to enforce restricted)" \
  'kubectl get tj.*ftcomm-trace.*NOTE: namespace "'$ns'" enforces no Pod Security level.*kubectl label namespace '$ns' pod-security.kubernetes.io/enforce=restricted' \
  hm install ftcomm "$chart" -n $ns --set dumps.persistence.storageClassName=expandable --set serviceMonitor.enabled=true
check_out "release deployed" 'deployed' hm -n $ns status ftcomm
check "Deployment, Service, ServiceAccount, claim, Role, RoleBinding, ServiceMonitor exist" \
  kc -n $ns get deploy/ftcomm-controller svc/ftcomm-controller sa/ftcomm-controller pvc/ftcomm-dumps \
  role/ftcomm-controller-leader-election rolebinding/ftcomm-controller-leader-election servicemonitor/ftcomm-controller
check_out "the controller's NetworkPolicy: the coordinator port from pods of TrainingJobs in any namespace, metrics from anywhere" \
  '^coordinator ftcomm.dev/job Exists [{][}] metrics$' \
  kc -n $ns get networkpolicy/ftcomm-controller -o jsonpath='{.spec.ingress[0].ports[0].port} {.spec.ingress[0].from[0].podSelector.matchExpressions[0].key} {.spec.ingress[0].from[0].podSelector.matchExpressions[0].operator} {.spec.ingress[0].from[0].namespaceSelector} {.spec.ingress[1].ports[0].port}'
check "ClusterRole, ClusterRoleBinding and the CRD exist" kc get clusterrole/ftcomm-controller clusterrolebinding/ftcomm-controller crd/trainingjobs.ftcomm.dev
check_out "the Deployment as installed: 1 replica, leader election, probes, restricted" \
  '^1 --leader-elect=true /healthz /readyz true true ftcomm-controller$' \
  kc -n $ns get deploy/ftcomm-controller -o jsonpath='{.spec.replicas} {.spec.template.spec.containers[0].args[1]} {.spec.template.spec.containers[0].livenessProbe.httpGet.path} {.spec.template.spec.containers[0].readinessProbe.httpGet.path} {.spec.template.spec.securityContext.runAsNonRoot} {.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem} {.spec.template.spec.serviceAccountName}'
check_out "the Service: coordinator 7470, metrics 8080, selecting the controller's pods that lead" \
  '^coordinator=7470 metrics=8080 controller true$' \
  kc -n $ns get svc/ftcomm-controller -o jsonpath='{range .spec.ports[*]}{.name}={.port} {end}{.spec.selector.app\.kubernetes\.io/component} {.spec.selector.ftcomm\.dev/leader}'
check_out "the ServiceAccount can do what the controller needs (and no more)" '^yes no yes no$' bash -c '
  a=$("$0" auth can-i update trainingjobs.ftcomm.dev --subresource=status -n default --as=system:serviceaccount:ftcomm-system:ftcomm-controller || true)
  b=$("$0" auth can-i delete secrets -n default --as=system:serviceaccount:ftcomm-system:ftcomm-controller || true)
  c=$("$0" auth can-i patch pods -n ftcomm-system --as=system:serviceaccount:ftcomm-system:ftcomm-controller || true)
  d=$("$0" auth can-i patch pods -n default --as=system:serviceaccount:ftcomm-system:ftcomm-controller || true)
  echo "$a $b $c $d"' "$FTC_KUBECTL"
# The controller binary takes the flags and environment the chart gives it, and with the
# chart's ServiceAccount and RBAC it becomes ready and takes the chart's Lease (run here
# as a process: this cluster has no container runtime).
ctl=$root/${FTC_BUILD_DIR:-build/release}/bin/ftcomm-controller
run_chart_controller() {
  [ -x "$ctl" ] || { echo "$ctl is missing: run make first"; return 1; }
  local token port args=() a pid rc=0 end
  token=$(kc -n $ns create token ftcomm-controller --duration=10m)
  cat >"$work/sa.kubeconfig" <<KC
apiVersion: v1
kind: Config
current-context: sa
contexts: [{name: sa, context: {cluster: local, user: sa, namespace: $ns}}]
clusters: [{name: local, cluster: {server: "$FTC_APISERVER_URL", certificate-authority: "$FTC_CA_FILE"}}]
users: [{name: sa, user: {token: "$token"}}]
KC
  port=$(free_port)
  while IFS= read -r a; do
    case $a in
      --listen-address=*) a=--listen-address=127.0.0.1:$port ;;
      --coordinator-bind=*) a=--coordinator-bind=127.0.0.1:0 ;;
      --dump-volume=*) a=--dump-volume=$work/dumps ;;
    esac
    a=${a//\$(POD_NAMESPACE)/$ns}  # what the kubelet does with $(VAR) of the container's env
    args+=("$a")
  done < <(kc -n $ns get deploy/ftcomm-controller -o json | jq -r '.spec.template.spec.containers[0].args[]')
  # Its pod (never run here: no kubelet) gets the leader label while it leads.
  kc -n $ns run chart-ctl-0 --image=ftcomm-controller:test --restart=Never >/dev/null || rc=1
  POD_NAME=chart-ctl-0 POD_NAMESPACE=$ns FTCOMM_LOG_LEVEL=info \
    "$ctl" --kubeconfig="$work/sa.kubeconfig" "${args[@]}" >"$work/chart-controller.log" 2>&1 &
  pid=$!
  if ! eventually 30 curl -sf "http://127.0.0.1:$port/readyz"; then echo "not ready within 30 s"; rc=1; fi
  if [ $rc = 0 ] && ! eventually 30 bash -c '[ "$("$0" -n ftcomm-system get lease ftcomm-controller -o jsonpath="{.spec.holderIdentity}")" = chart-ctl-0 ]' "$FTC_KUBECTL"; then
    echo "it did not take the Lease ftcomm-controller"; rc=1
  fi
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null || { echo "/healthz failed"; rc=1; }
  if [ $rc = 0 ] && ! eventually 30 bash -c '[ "$("$0" -n "$1" get pod chart-ctl-0 -o jsonpath="{.metadata.labels.ftcomm\.dev/leader}")" = true ]' "$FTC_KUBECTL" "$ns"; then
    echo "its pod did not get the label ftcomm.dev/leader=true"; rc=1
  fi
  if grep -qi forbidden "$work/chart-controller.log"; then echo "RBAC refused a call"; rc=1; fi
  kill -TERM $pid 2>/dev/null || true
  end=$(( $(date +%s) + 20 ))
  while kill -0 $pid 2>/dev/null && [ "$(date +%s)" -lt $end ]; do sleep 0.2; done
  kill -KILL $pid 2>/dev/null || true
  wait $pid 2>/dev/null || { echo "exit status $? after SIGTERM"; rc=1; }
  if [ -n "$(kc -n $ns get pod chart-ctl-0 -o jsonpath='{.metadata.labels.ftcomm\.dev/leader}')" ]; then
    echo "the leader label stayed after SIGTERM"; rc=1
  fi
  kc -n $ns delete pod chart-ctl-0 --grace-period=0 --force >/dev/null 2>&1
  [ $rc = 0 ] || tail -20 "$work/chart-controller.log"
  return $rc
}
check "the controller runs with the chart's flags, ServiceAccount and RBAC: ready, leads, labels its pod, exits 0 on SIGTERM" run_chart_controller
bind_claim() {
  kc -n $ns patch pvc/ftcomm-dumps --subresource=status --type=merge \
    -p '{"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"20Gi"}}}'
}
check "the dump claim marked Bound (no provisioner here)" bind_claim

# 4. helm upgrade with other values.
check_out "helm upgrade: replicas 2, claim 50Gi, ServiceMonitor off, log level debug (NOTES warn: ReadWriteOnce)" \
  'WARNING: controller.replicas is 2 but the dump claim is ReadWriteOnce' \
  hm upgrade ftcomm "$chart" -n $ns --set dumps.persistence.storageClassName=expandable \
    --set controller.replicas=2 --set dumps.persistence.size=50Gi --set serviceMonitor.enabled=false --set controller.logLevel=debug \
    --set dumps.retention=5 --set dumps.ttlAfterDeletion=1d12h
check_out "... the Deployment has 2 replicas and the new log level" '^2 debug$' \
  kc -n $ns get deploy/ftcomm-controller -o jsonpath='{.spec.replicas} {.spec.template.spec.containers[0].env[?(@.name=="FTCOMM_LOG_LEVEL")].value}'
check_out "... and the dump bounds as flags (dumps.retention, dumps.ttlAfterDeletion)" \
  '"--dump-retention=5","--dump-ttl-after-deletion=1d12h"' \
  kc -n $ns get deploy/ftcomm-controller -o jsonpath='{.spec.template.spec.containers[0].args}'
check_out "... the claim asks for 50Gi" '^50Gi$' kc -n $ns get pvc/ftcomm-dumps -o jsonpath='{.spec.resources.requests.storage}'
check_out "... the ServiceMonitor is gone" 'NotFound' bash -c '"$0" -n ftcomm-system get servicemonitor/ftcomm-controller 2>&1 || true' "$FTC_KUBECTL"
check_out "... revision 2" '^2$' bash -c '"$0" -n ftcomm-system list -o json | jq -r ".[0].revision"' "$FTC_HELM"
check_fails "helm upgrade refuses bad values too" "/image/pullPolicy': value must be one of" \
  hm upgrade ftcomm "$chart" -n $ns --reuse-values --set image.pullPolicy=Sometimes
check_fails "... and a TTL that is not a duration" "'7days' does not match pattern" \
  hm upgrade ftcomm "$chart" -n $ns --reuse-values --set dumps.ttlAfterDeletion=7days
check_out "... and left revision 2 in place" '^2 deployed$' bash -c '"$0" -n ftcomm-system list -o json | jq -r ".[0] | \"\(.revision) \(.status)\""' "$FTC_HELM"

# 5. The example TrainingJob.
check "namespace for jobs" kc create namespace ml
check "examples/trainingjob.yaml: kubectl apply --dry-run=server" kc -n ml apply --dry-run=server -f examples/trainingjob.yaml
check "examples/trainingjob.yaml: kubectl apply" kc -n ml apply -f examples/trainingjob.yaml
check_out "kubectl get tj shows it, with the API server's defaults" '^ddp-example 4 3 tcp replace$' \
  kc -n ml get tj ddp-example -o jsonpath='{.metadata.name} {.spec.replicas} {.spec.minReplicas} {.spec.backend} {.spec.failurePolicy.mode}'

# 6. helm uninstall.
check "helm uninstall" hm uninstall ftcomm -n $ns --wait --timeout 60s
check_out "the release's objects are gone" '^$' bash -c '
  for o in deploy/ftcomm-controller svc/ftcomm-controller sa/ftcomm-controller role/ftcomm-controller-leader-election rolebinding/ftcomm-controller-leader-election; do
    "$0" -n ftcomm-system get "$o" -o name 2>/dev/null || true; done
  for o in clusterrole/ftcomm-controller clusterrolebinding/ftcomm-controller; do "$0" get "$o" -o name 2>/dev/null || true; done' "$FTC_KUBECTL"
check "the CRD stays (Helm never deletes a chart's crds/), and so do the TrainingJobs" kc -n ml get crd/trainingjobs.ftcomm.dev tj/ddp-example
check "the dump claim stays (helm.sh/resource-policy: keep)" kc -n $ns get pvc/ftcomm-dumps
check_out "helm lists no release" '^\[\]$' hm -n $ns list -o json

finish
