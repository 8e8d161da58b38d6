#!/usr/bin/env bash
# controller.sh - ftcomm-controller against a real kube-apiserver, running with
# exactly the RBAC in deploy/ (a ServiceAccount token, not the admin one):
#   - the RBAC is least privilege (no wildcards; what it must not do is denied)
#   - the client library's live checks (pagination, watch, informer, 409 retry, Events)
#   - a TrainingJob gets a token Secret and one pod per slot with the runtime env; the
#     Secret, deleted, is made again with the same token when a pod waits for it or a
#     replacement is made, also by a restarted controller (the token derives from a key)
#   - status follows the pods (members, alive, conditions)
#   - a pod patched to Failed is replaced (new incarnation, joiner, away from its node,
#     incident, Event); a deleted pod is replaced too
#   - a controller restart creates no duplicate pods; SIGTERM releases the Lease
#   - the budget runs out -> Failed with a message saying what to raise
#   - API server restart after an etcd compaction: watches get 410, caches relist,
#     and the controller keeps working
#   - the dump folder of a deleted job goes after --dump-ttl-after-deletion; a live
#     job's stays, without the incidents of an earlier job of its name; links and odd
#     names in the volume are left alone; a controller of one namespace sweeps only it
. "$(dirname "$0")/../cluster/lib.sh"
start_cluster
ctl=$build/bin/ftcomm-controller
live=$build/tests/controller/kube_live
[ -x "$ctl" ] && [ -x "$live" ] || { echo "FAIL - build first: make test-bins"; exit 1; }

check "CRD, namespace and RBAC apply" kc apply -f "$root/crds/ftcomm.dev_trainingjobs.yaml" -f "$root/deploy/namespace.yaml" -f "$root/deploy/rbac.yaml"
crd_ready

# --- RBAC: least privilege -----------------------------------------------------
# grep -c exits 1 when it counts nothing (and 2, with another message, if the file is missing).
check_fails "deploy/rbac.yaml has no wildcard" '^0$' grep -c '\*' "$root/deploy/rbac.yaml"
sa=system:serviceaccount:ftcomm-system:ftcomm-controller
can() { kc auth can-i "$@" --as=$sa; }
for allowed in "create pods -n any" "delete pods -n any" "watch pods -A" "list trainingjobs.ftcomm.dev -A" \
               "update trainingjobs.ftcomm.dev --subresource=status -n any" "create secrets -n any" "watch nodes" \
               "create events.events.k8s.io -n any" "update leases.coordination.k8s.io -n ftcomm-system" \
               "patch pods -n ftcomm-system"; do
  # shellcheck disable=SC2086
  check_out "RBAC allows: $allowed" '(^|'$'\n'')yes$' can $allowed
done
for denied in "get secrets -n any" "list secrets -n any" "watch secrets -A" "update secrets -n any" "delete secrets -n any" "patch pods -n any" "delete trainingjobs.ftcomm.dev -n any" "update trainingjobs.ftcomm.dev -n any" \
              "update pods -n any" "create leases.coordination.k8s.io -n default" "create deployments.apps -n any" \
              "create pods --subresource=exec -n any" "update pods --subresource=status -n any" "update nodes" "delete nodes"; do
  # shellcheck disable=SC2086
  check_fails "RBAC denies: $denied" '(^|'$'\n'')no$' can $denied
done

token=$(kc -n ftcomm-system create token ftcomm-controller --duration=1h)
sa_kubeconfig=$work/sa.kubeconfig
write_sa_kubeconfig "$sa_kubeconfig" "$token"

# --- the client library against this server ---------------------------------------
echo "# kube_live basic (admin credentials)"
if timeout 120 "$live" basic ftck-live >"$work/live.log" 2>&1; then ok "kube_live basic ($(grep -c '^ok' "$work/live.log") checks)"; else bad "kube_live basic"; sed 's/^/       /' "$work/live.log"; fi

# --- client certificates, and TLS that is always verified ----------------------------------
pki=$dir/pki
openssl req -newkey rsa:2048 -nodes -keyout "$work/client.key" -out "$work/client.csr" \
  -subj "/O=system:masters/CN=ftck-cert-admin" >/dev/null 2>&1
openssl x509 -req -in "$work/client.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
  -out "$work/client.crt" -days 1 >/dev/null 2>&1
cert_kubeconfig() {  # cert_kubeconfig FILE CA-FILE: a kubeconfig with inline client cert and key
  cat >"$1" <<KC
apiVersion: v1
kind: Config
current-context: cert
contexts:
- name: cert
  context: {cluster: local, user: cert-admin}
clusters:
- name: local
  cluster: {server: "$FTC_APISERVER_URL", certificate-authority-data: "$(base64 -w0 "$2")"}
users:
- name: cert-admin
  user: {client-certificate-data: "$(base64 -w0 "$work/client.crt")", client-key-data: "$(base64 -w0 "$work/client.key")"}
KC
}
cert_kubeconfig "$work/cert.kubeconfig" "$pki/ca.crt"
check_out "a client certificate (inline -data) authenticates" '^[0-9]+$' env KUBECONFIG="$work/cert.kubeconfig" timeout 30 "$live" list-rv default
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/other-ca.key" -out "$work/other-ca.crt" -days 1 \
  -subj "/CN=not-the-cluster-ca" >/dev/null 2>&1
cert_kubeconfig "$work/wrong-ca.kubeconfig" "$work/other-ca.crt"
check_fails "a server whose certificate the CA did not sign is refused" '(SSL|certificate).*(verif|problem)' \
  env KUBECONFIG="$work/wrong-ca.kubeconfig" timeout 30 "$live" list-rv default

# --- the controller -----------------------------------------------------------------
ctrl_log=$work/controller.log
port=
# The same ServiceAccount as files, the way a pod sees them (in-cluster mode).
sa_dir=$work/serviceaccount
mkdir -p "$sa_dir"
printf '%s' "$token" >"$sa_dir/token"
cp "$FTC_CA_FILE" "$sa_dir/ca.crt"
printf 'ftcomm-system' >"$sa_dir/namespace"

start_controller() {  # start_controller ID [in-cluster]
  local how=(--kubeconfig "$sa_kubeconfig")
  [ "${2:-}" = in-cluster ] && how=(--service-account-dir "$sa_dir")
  echo "=== controller $1 ${2:-}" >>"$ctrl_log"
  KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=$FTC_APISERVER_PORT KUBECONFIG= \
  FTCOMM_LOG_LEVEL=info "$ctl" "${how[@]}" --listen-address 127.0.0.1:0 --identity "ctl-$1" \
    ${lease_flags:---lease-duration 40 --renew-deadline 30 --retry-period 1} --coordinator-address coord.test:7470 --dump-dir /dumps \
    --coordinator-bind 127.0.0.1:0 --dump-volume "$work/dumps" ${ttl_flags:-} >>"$ctrl_log" 2>&1 &
  ctrl_pid=$!
  eventually 10 grep -q "identity ctl-$1\$" "$ctrl_log"
  port=$(ctrl_port)
  eventually 20 curl -sf "http://127.0.0.1:$port/readyz"
}
stop_controller() {
  kill -TERM "$ctrl_pid"
  local t0; t0=$(date +%s%N)
  wait "$ctrl_pid"; local rc=$?
  ctrl_pid=
  stop_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  return $rc
}

if start_controller 1; then ok "controller starts with the ServiceAccount token and becomes ready"; else bad "controller start"; cat "$ctrl_log"; fi
check_out "/healthz answers ok" '^ok$' curl -s "http://127.0.0.1:$port/healthz"
check_out "it holds the Lease" '^ctl-1$' kc -n ftcomm-system get lease ftcomm-controller -o jsonpath='{.spec.holderIdentity}'

kc create namespace ml >/dev/null
cat >"$work/job.yaml" <<'YAML'
apiVersion: ftcomm.dev/v1alpha1
kind: TrainingJob
metadata: {name: llm, namespace: ml}
spec:
  replicas: 3
  minReplicas: 2
  backend: tcp
  timeouts: {collectiveTimeoutSeconds: 45, hangTimeoutSeconds: 30}
  failurePolicy: {maxReplacements: 2, backoffSeconds: 0}
  template:
    metadata: {labels: {team: research}}
    spec:
      containers:
      - name: trainer
        image: example.com/trainer:1
        env: [{name: USER_SETTING, value: keep-me}]
YAML
check "a TrainingJob applies" kc apply -f "$work/job.yaml"
pods() { kc get pods -n ml -l ftcomm.dev/job=llm -o jsonpath='{range .items[*]}{.metadata.name}{" "}{end}'; }
have_pods() { [ "$(pods)" = "$*" ]; }
check "one pod per slot: llm-0-0 llm-1-0 llm-2-0" eventually 20 have_pods "llm-0-0 llm-1-0 llm-2-0 "
check_out "token Secret holds a 64-hex-digit token" '^[0-9a-f]{64}$' bash -c "$FTC_KUBECTL get secret llm-ftcomm-token -n ml -o jsonpath='{.data.token}' | base64 -d"
secret_token() { kc get secret llm-ftcomm-token -n ml -o jsonpath='{.data.token}' 2>/dev/null; }
token_before=$(secret_token)
check "the token Secret is deleted by someone" kc delete secret llm-ftcomm-token -n ml
recreated() { [ "$(secret_token)" = "$token_before" ]; }
# Play the kubelet of a pod made before the deletion: its container cannot start without it.
check "pod llm-1-0 waits for it (CreateContainerConfigError, as the kubelet says)" kc patch pod llm-1-0 -n ml --subresource=status --type=merge \
  -p '{"status":{"containerStatuses":[{"name":"trainer","image":"example.com/trainer:1","imageID":"","ready":false,"restartCount":0,"state":{"waiting":{"reason":"CreateContainerConfigError","message":"secret \"llm-ftcomm-token\" not found"}}}]}}'
check "... and the Secret is made again with the same token" eventually 15 recreated
check_out "... saying so in an Event" 'TokenSecretRecreated' kc get events -n ml --field-selector reason=TokenSecretRecreated -o jsonpath='{.items[*].reason}'
check "the container starts (the kubelet double clears the wait)" kc patch pod llm-1-0 -n ml --subresource=status --type=merge \
  -p '{"status":{"containerStatuses":[{"name":"trainer","image":"example.com/trainer:1","imageID":"","ready":false,"restartCount":0,"state":{"waiting":{"reason":"ContainerCreating"}}}]}}'
check_out "the job's coordinator runs in the leader" '^[1-9]' metric ftcomm_controller_coordinators_started_total
envof() { kc get pod "$1" -n ml -o jsonpath="{range .spec.containers[0].env[*]}{.name}={.value}{.valueFrom.secretKeyRef.name}{.valueFrom.fieldRef.fieldPath};{end}"; }
check_out "pod env: job, slot, sizes, token from the Secret, coordinator, dumps, timeout, backend" \
  'USER_SETTING=keep-me;FTCOMM_JOB=llm;FTCOMM_SLOT=1;FTCOMM_WORLD_SIZE=3;FTCOMM_MIN_SIZE=2;FTCOMM_JOINER=0;FTCOMM_TOKEN=llm-ftcomm-token;FTCOMM_COORDINATOR=coord.test:7470;FTCOMM_DUMP_DIR=/dumps;FTCOMM_TIMEOUT_MS=45000;FTCOMM_BACKEND=tcp;FTCOMM_RECORDER_ENTRIES=2000;FTCOMM_ADVERTISE_HOST=status.podIP;' \
  envof llm-1-0
check_out "pod labels and restartPolicy" 'ftcomm.dev/job=llm ftcomm.dev/slot=1 ftcomm.dev/incarnation=0 managed-by=ftcomm-controller team=research Never' \
  kc get pod llm-1-0 -n ml -o jsonpath='ftcomm.dev/job={.metadata.labels.ftcomm\.dev/job} ftcomm.dev/slot={.metadata.labels.ftcomm\.dev/slot} ftcomm.dev/incarnation={.metadata.labels.ftcomm\.dev/incarnation} managed-by={.metadata.labels.app\.kubernetes\.io/managed-by} team={.metadata.labels.team} {.spec.restartPolicy}'
check_out "pods are owned by the TrainingJob" '^TrainingJob llm true$' \
  kc get pod llm-0-0 -n ml -o jsonpath='{.metadata.ownerReferences[0].kind} {.metadata.ownerReferences[0].name} {.metadata.ownerReferences[0].controller}'
phase() { kc get tj llm -n ml -o jsonpath='{.status.phase}'; }
is_phase() { [ "$(phase)" = "$1" ]; }
check "status: Pending while pods are not running" eventually 10 is_phase Pending
check_out "status lists the members" '^0:llm-0-0:Pending 1:llm-1-0:Pending 2:llm-2-0:Pending $' \
  kc get tj llm -n ml -o jsonpath='{range .status.members[*]}{.slot}:{.pod}:{.state}{" "}{end}'

# Play the scheduler and the kubelet: bind each pod to a node, mark it Running.
bind_run() {  # bind_run POD NODE
  printf '{"apiVersion":"v1","kind":"Binding","metadata":{"name":"%s"},"target":{"apiVersion":"v1","kind":"Node","name":"%s"}}' "$1" "$2" >"$work/binding.json"
  kc create --raw "/api/v1/namespaces/ml/pods/$1/binding" -f "$work/binding.json" >/dev/null &&
    kc patch pod "$1" -n ml --subresource=status --type=merge -p '{"status":{"phase":"Running"}}' >/dev/null
}
for i in 0 1 2; do bind_run "llm-$i-0" "node-$i"; done
check "status: Running once every member runs" eventually 10 is_phase Running
check_out "Ready=True, alive 3, nodes in members" '^True AllMembersRunning 3 node-0 node-1 node-2$' \
  kc get tj llm -n ml -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason} {.status.alive} {.status.members[0].node} {.status.members[1].node} {.status.members[2].node}'

# --- a failed pod is replaced ----------------------------------------------------------
check "the token Secret is deleted again" kc delete secret llm-ftcomm-token -n ml
check "pod llm-1-0 patched to Failed" kc patch pod llm-1-0 -n ml --subresource=status --type=merge \
  -p '{"status":{"phase":"Failed","reason":"Evicted","message":"GPU fell off the bus"}}'
check "replacement llm-1-1 created and llm-1-0 removed" eventually 20 have_pods "llm-0-0 llm-1-1 llm-2-0 "
check "... and the token Secret, deleted before, made again for it with the same token" recreated
check_out "the replacement joins the running job" 'FTCOMM_SLOT=1;.*FTCOMM_JOINER=1;' envof llm-1-1
check_out "the replacement avoids the failed node" '^kubernetes.io/hostname NotIn \["node-1"\] node-1$' \
  kc get pod llm-1-1 -n ml -o jsonpath='{.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key} {.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator} {.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values} {.metadata.annotations.ftcomm\.dev/avoid-nodes}'
check_out "status: Degraded, 1 replacement, an incident naming the culprit" '^Degraded 1 PodFailed llm-1-0 slot 1: pod llm-1-0 failed on node node-1: Evicted; replaced by llm-1-1' \
  kc get tj llm -n ml -o jsonpath='{.status.phase} {.status.replacements} {.status.incidents[0].kind} {.status.incidents[0].culprit} {.status.incidents[0].message}'
check_out "an Event MemberReplaced on the TrainingJob" 'MemberReplaced.*TrainingJob.*llm' \
  kc get events.events.k8s.io -n ml -o custom-columns=R:.reason,K:.regarding.kind,N:.regarding.name,NOTE:.note
bind_run llm-1-1 node-3
check "Running again once the replacement runs" eventually 10 is_phase Running

# --- a deleted pod is replaced (no kubelet: it stays Terminating) -------------------------
check "pod llm-2-0 deleted" kc delete pod llm-2-0 -n ml --wait=false
has_pod() { kc get pod "$1" -n ml >/dev/null 2>&1; }
check "replacement llm-2-1 created for the deleted pod" eventually 20 has_pod llm-2-1
kc delete pod llm-2-0 -n ml --grace-period=0 --force >/dev/null 2>&1
bind_run llm-2-1 node-4

# --- restart: no duplicates; SIGTERM releases the Lease -----------------------------------
before=$(pods)
created_before=$(metric ftcomm_controller_pods_created_total)
if stop_controller; then ok "SIGTERM: the controller exits 0"; else bad "SIGTERM: the controller exits 0"; fi
check "... within 5 s ($stop_ms ms)" test "$stop_ms" -lt 5000
check_out "... and released the Lease" '^$' kc -n ftcomm-system get lease ftcomm-controller -o jsonpath='{.spec.holderIdentity}'
if start_controller 2 in-cluster; then ok "restarted controller (in-cluster config: service-account files) becomes ready"; else bad "controller restart"; cat "$ctrl_log"; fi
check_out "in-cluster mode found the server from KUBERNETES_SERVICE_HOST/PORT" "server https://127.0.0.1:$FTC_APISERVER_PORT, .*identity ctl-2" grep "identity ctl-2" "$ctrl_log"
check_out "it takes the released Lease at once" '^ctl-2$' kc -n ftcomm-system get lease ftcomm-controller -o jsonpath='{.spec.holderIdentity}'
reconciled() { [ "$(metric 'ftcomm_controller_reconciles_total{result="success"}')" -ge 1 ]; }
eventually 10 reconciled
sleep 2
check_out "after the restart the same pods, no duplicates" "^$before\$" pods
check_out "the restarted controller created no pod" '^0$' metric ftcomm_controller_pods_created_total
check_out "status still counts 2 replacements" '^2 Running$' kc get tj llm -n ml -o jsonpath='{.status.replacements} {.status.phase}'
echo "# (first controller had created $created_before pods)"
check_out "the token key stays one Secret in the controller's namespace" '^32$' \
  bash -c "$FTC_KUBECTL -n ftcomm-system get secret ftcomm-controller-token-key -o jsonpath='{.data.key}' | base64 -d | wc -c"
check "the restarted controller derives the same token: the token Secret is deleted" kc delete secret llm-ftcomm-token -n ml
check "... pod llm-0-0 waits for it" kc patch pod llm-0-0 -n ml --subresource=status --type=merge \
  -p '{"status":{"containerStatuses":[{"name":"trainer","image":"example.com/trainer:1","imageID":"","ready":false,"restartCount":0,"state":{"waiting":{"reason":"CreateContainerConfigError","message":"secret \"llm-ftcomm-token\" not found"}}}]}}'
check "... and it is made again with the token of before the restart" eventually 15 recreated
check "a reconcile with a pod cache that lags all the way behind makes no duplicates and counts nothing" \
  timeout 60 "$live" stale ml llm

# --- the budget runs out ---------------------------------------------------------------
kc patch pod llm-0-0 -n ml --subresource=status --type=merge -p '{"status":{"phase":"Failed","reason":"Error"}}' >/dev/null
check "budget used up: Failed" eventually 10 is_phase Failed
check_out "condition Failed says what to raise" '^True ReplacementBudgetExhausted all 2 replacements of spec.failurePolicy.maxReplacements are used; raise it' \
  kc get tj llm -n ml -o jsonpath='{.status.conditions[?(@.type=="Failed")].status} {.status.conditions[?(@.type=="Failed")].reason} {.status.conditions[?(@.type=="Failed")].message}'
check_out "no replacement beyond the budget" "^$before\$" pods

# --- API server restart after a compaction: 410, relist, still working ----------------
forbidden_before_restart=$(grep -c 'Forbidden' "$ctrl_log")
old_rv=$("$live" list-rv ml)
lists_before=$(metric 'ftcomm_controller_lists_total{informer="pods"}')
nlists_before=$(metric 'ftcomm_controller_lists_total{informer="nodes"}')
for i in 1 2 3; do kc create configmap "filler-$i" -n ml --from-literal=a=b >/dev/null; done
rev=$(curl -s -X POST "$FTC_ETCD_URL/v3/kv/range" -d '{"key":"AA=="}' | sed -n 's/.*"revision":"\([0-9]*\)".*/\1/p')
check "etcd compacted to revision $rev" curl -sf -X POST "$FTC_ETCD_URL/v3/kv/compaction" -d "{\"revision\": $rev}"
check "kube-apiserver restarted" timeout 120 "$cluster" restart-apiserver "$dir"
. "$dir/env"
check_out "a watch from the old resourceVersion gets 410" 'ok +- watch from resourceVersion' timeout 30 "$live" expired ml "$old_rv"
relisted() { [ "$(metric 'ftcomm_controller_lists_total{informer="pods"}')" -gt "$lists_before" ]; }
check "the controller's pod cache relisted after the restart" eventually 60 relisted
# The node cache too: the node-loss check below needs it. After an outage an
# informer retries with a backoff of up to 30 s, so it may come back later than
# the pods informer (a CI run under load saw node-x's NotReady missed for 20 s).
nrelisted() { [ "$(metric 'ftcomm_controller_lists_total{informer="nodes"}')" -gt "$nlists_before" ]; }
check "... and its node cache" eventually 60 nrelisted
check_out "watch restarts are counted" 'ftcomm_controller_watch_restarts_total\{informer="pods",reason="(expired|error)"\} [1-9]' curl -s "http://127.0.0.1:$port/metrics"
check "raise the budget" kc patch tj llm -n ml --type=merge -p '{"spec":{"failurePolicy":{"maxReplacements":5}}}'
check "after the API server restart the controller still replaces: llm-0-1" eventually 30 has_pod llm-0-1
check_out "status observed the new generation" '^2$' kc get tj llm -n ml -o jsonpath='{.status.observedGeneration}'

# --- node loss: a pod whose node stops being Ready is replaced away from it -------------
cat >"$work/node.yaml" <<'YAML'
apiVersion: v1
kind: Node
metadata: {name: node-x, labels: {kubernetes.io/hostname: node-x}}
YAML
check "a Node node-x registers" kc apply -f "$work/node.yaml"
check "node-x reports Ready" kc patch node node-x --subresource=status --type=merge -p '{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"ok"}]}}'
bind_run llm-0-1 node-x
member0() { [ "$(kc get tj llm -n ml -o jsonpath='{.status.members[0].node} {.status.members[0].state}')" = "node-x Running" ]; }
check "llm-0-1 runs on node-x" eventually 10 member0
check "node-x goes NotReady" kc patch node node-x --subresource=status --type=merge -p '{"status":{"conditions":[{"type":"Ready","status":"Unknown","reason":"NodeStatusUnknown","message":"Kubelet stopped posting node status."}]}}'
check "the pod on the lost node is replaced: llm-0-2" eventually 20 has_pod llm-0-2
check_out "... away from node-x" 'node-x$' kc get pod llm-0-2 -n ml -o jsonpath='{.metadata.annotations.ftcomm\.dev/avoid-nodes}'
check_out "... with a NodeLost incident" 'NodeLost llm-0-1 slot 0: pod llm-0-1 was lost with its node on node node-x' \
  kc get tj llm -n ml -o jsonpath='{range .status.incidents[*]}{.kind} {.culprit} {.message}{"\n"}{end}'
check_out "the pod on the lost node is being deleted" '^[0-9]{4}-' kc get pod llm-0-1 -n ml -o jsonpath='{.metadata.deletionTimestamp}'
kc delete pod llm-0-1 -n ml --grace-period=0 --force >/dev/null 2>&1  # what the pod GC does for a dead node

# --- failurePolicy.mode restartAll, then suspend and resume ------------------------------
cat >"$work/classic.yaml" <<'YAML'
apiVersion: ftcomm.dev/v1alpha1
kind: TrainingJob
metadata: {name: classic, namespace: ml}
spec:
  replicas: 2
  failurePolicy: {mode: restartAll, backoffSeconds: 0, maxReplacements: 3}
  template:
    spec:
      containers: [{name: trainer, image: example.com/trainer:1}]
YAML
cpods() { kc get pods -n ml -l ftcomm.dev/job=classic -o jsonpath='{range .items[*]}{.metadata.name}{" "}{end}'; }
have_cpods() { [ "$(cpods)" = "$*" ]; }
check "a restartAll job applies" kc apply -f "$work/classic.yaml"
check "classic-0-0 classic-1-0 created" eventually 20 have_cpods "classic-0-0 classic-1-0 "
kc patch pod classic-0-0 -n ml --subresource=status --type=merge -p '{"status":{"phase":"Failed","reason":"Error"}}' >/dev/null
check "restartAll: every pod restarted at incarnation 1" eventually 20 have_cpods "classic-0-1 classic-1-1 "
check_out "restarted pods start fresh (FTCOMM_JOINER=0)" 'FTCOMM_JOINER=0;' envof classic-1-1
check_out "one restart counted" '^1 PodFailed classic-0-0$' \
  kc get tj classic -n ml -o jsonpath='{.status.replacements} {.status.incidents[0].kind} {.status.incidents[0].culprit}'
check "suspend" kc patch tj classic -n ml --type=merge -p '{"spec":{"suspend":true}}'
check "suspended: pods deleted" eventually 20 have_cpods ""
check "suspended: phase Suspended" eventually 10 bash -c "[ \"\$($FTC_KUBECTL get tj classic -n ml -o jsonpath='{.status.phase}')\" = Suspended ]"
check "resume" kc patch tj classic -n ml --type=merge -p '{"spec":{"suspend":false}}'
check "resumed: pods at the next incarnation" eventually 20 have_cpods "classic-0-2 classic-1-2 "
check_out "resuming is not a replacement" '^1$' kc get tj classic -n ml -o jsonpath='{.status.replacements}'
check "scale up to 3" kc patch tj classic -n ml --type=merge -p '{"spec":{"replicas":3}}'
check "a new slot starts at incarnation 0" eventually 20 have_cpods "classic-0-2 classic-1-2 classic-2-0 "
check "scale down to 1" kc patch tj classic -n ml --type=merge -p '{"spec":{"replicas":1,"minReplicas":1}}'
check "surplus slots are deleted" eventually 20 have_cpods "classic-0-2 "
kc patch pod classic-0-2 -n ml --subresource=status --type=merge -p '{"status":{"phase":"Succeeded"}}' >/dev/null
cphase() { [ "$(kc get tj classic -n ml -o jsonpath='{.status.phase}')" = "$1" ]; }
check "every member Succeeded: phase Succeeded" eventually 10 cphase Succeeded
check_out "a succeeded pod is not replaced" '^classic-0-2 $' cpods

# --- a standby controller takes over when the leader stops ---------------------------------
leader_pid=$ctrl_pid leader_port=$port
if start_controller 3; then ok "a second controller starts and becomes ready (standby)"; else bad "standby start"; fi
standby_pid=$ctrl_pid standby_port=$port
check_out "the standby does not lead" '^0$' metric ftcomm_controller_leader
check_out "the standby created nothing" '^0$' metric ftcomm_controller_pods_created_total
ctrl_pid=$leader_pid port=$leader_port
if stop_controller; then ok "the leader stops on SIGTERM"; else bad "the leader stops on SIGTERM"; fi
ctrl_pid=$standby_pid port=$standby_port
holder() { [ "$(kc -n ftcomm-system get lease ftcomm-controller -o jsonpath='{.spec.holderIdentity}')" = "$1" ]; }
check "the standby takes the Lease" eventually 10 holder ctl-3
check "the new leader reports it" eventually 5 bash -c "curl -s http://127.0.0.1:$port/metrics | grep -qx 'ftcomm_controller_leader 1'"
check_out "the new leader made no duplicates" "^llm-0-2 llm-1-1 llm-2-1 \$" pods

check_out "metrics: API requests by verb and code" 'ftcomm_controller_api_requests_total\{verb="PUT",code="200"\} [1-9]' curl -s "http://127.0.0.1:$port/metrics"
check_out "metrics: queue depth" 'ftcomm_controller_workqueue_depth [0-9]+' curl -s "http://127.0.0.1:$port/metrics"
# (Right after an API server restart its RBAC cache may refuse a request or two; the
# controller retries those. Before the restart nothing may be refused.)
if [ "$forbidden_before_restart" -ne 0 ]; then bad "the controller was refused something by RBAC"; grep Forbidden "$ctrl_log" | head -5 | sed 's/^/       /'; else ok "no request of the controller was forbidden by RBAC"; fi
if stop_controller; then ok "SIGTERM at the end: exit 0"; else bad "SIGTERM at the end: exit 0"; fi
check "with no controller running: a frozen cache that still shows a failed pod gives one replacement, counted once" \
  timeout 60 "$live" frozen ml llm llm-1-1
check "... the replacement llm-1-2 exists" has_pod llm-1-2
sed -e 's/name: classic,/name: reuse,/' -e 's/replicas: 2/replicas: 1/' "$work/classic.yaml" >"$work/reuse.yaml"
check "a 1-replica job reuse applies" kc apply -f "$work/reuse.yaml"
check "a job deleted and made again under its name keeps its new pod, though a frozen cache still shows the earlier one" \
  timeout 60 "$live" reused ml reuse

# What deleted jobs, an earlier job named llm, and others left in the dump volume.
vol=$work/dumps
llm_uid=$(kc get tj llm -n ml -o jsonpath='{.metadata.uid}')
mkdir -p "$vol/ml/llm/hang-e1-mine" "$vol/ml/llm/hang-e1-earlier" "$vol/ml/llm/hang-e1-unstamped" \
  "$vol/ml/gone/hang-e1-1" "$vol/lost+found" "$work/outside"
echo "$llm_uid" >"$vol/ml/llm/hang-e1-mine/.job-uid"
echo 00000000-earlier >"$vol/ml/llm/hang-e1-earlier/.job-uid"
touch -d @1000000000 "$vol/ml/llm/hang-e1-unstamped"  # no .job-uid, written long before llm was created
echo '{}' >"$vol/ml/gone/hang-e1-1/rank-0.json"
echo keep >"$work/outside/precious"
ln -s "$work/outside/precious" "$vol/ml/gone/hang-e1-1/rank-1.json"
ln -s "$work/outside" "$vol/ml/escape"

# --- one namespace only: a RoleBinding, so no rights on nodes ----------------------------------
kc create namespace team >/dev/null
kc -n team create serviceaccount ftcomm-team >/dev/null
kc -n team create rolebinding ftcomm-team --clusterrole=ftcomm-controller --serviceaccount=team:ftcomm-team >/dev/null
kc -n team create role ftcomm-team-lease --verb=get,create,update --resource=leases.coordination.k8s.io >/dev/null
kc -n team create rolebinding ftcomm-team-lease --role=ftcomm-team-lease --serviceaccount=team:ftcomm-team >/dev/null
kc -n team create role ftcomm-team-key --verb=get --resource=secrets --resource-name=ftcomm-controller-token-key >/dev/null
kc -n team create rolebinding ftcomm-team-key --role=ftcomm-team-key --serviceaccount=team:ftcomm-team >/dev/null
check_fails "the namespaced ServiceAccount cannot list pods cluster-wide" '(^|'$'\n'')no$' kc auth can-i list pods -A --as=system:serviceaccount:team:ftcomm-team
check_fails "... nor watch nodes" '(^|'$'\n'')no$' kc auth can-i watch nodes --as=system:serviceaccount:team:ftcomm-team
team_token=$(kc -n team create token ftcomm-team --duration=1h)
sed -e "s|token: \"$token\"|token: \"$team_token\"|" -e 's|namespace: ftcomm-system|namespace: team|' "$sa_kubeconfig" >"$work/team.kubeconfig"
echo "=== controller team" >>"$ctrl_log"
FTCOMM_LOG_LEVEL=info "$ctl" --kubeconfig "$work/team.kubeconfig" --namespace team --watch-nodes=false \
  --lease-namespace team --identity ctl-team --listen-address 127.0.0.1:0 --coordinator-bind 127.0.0.1:0 \
  --dump-volume "$work/dumps" --dump-ttl-after-deletion=1s >>"$ctrl_log" 2>&1 &
ctrl_pid=$!
eventually 10 grep -q 'identity ctl-team$' "$ctrl_log"
port=$(ctrl_port)
check "a controller scoped to namespace team, without node rights (--watch-nodes=false), becomes ready" \
  eventually 20 curl -sf "http://127.0.0.1:$port/readyz"
sed -e 's/namespace: ml/namespace: team/' -e 's/name: llm,/name: small,/' "$work/job.yaml" >"$work/team-job.yaml"
check "a TrainingJob in team applies" kc apply -f "$work/team-job.yaml"
tpods() { [ "$(kc get pods -n team -l ftcomm.dev/job=small -o jsonpath='{range .items[*]}{.metadata.name}{" "}{end}')" = "small-0-0 small-1-0 small-2-0 " ]; }
check "it runs the job in its namespace" eventually 20 tpods
check_out "it has no Node informer" '^$' metric 'ftcomm_controller_lists_total{informer="nodes"}'
swept() { [ "$(metric ftcomm_controller_dump_sweeps_total)" -ge "$1" ]; }
check "it sweeps the dump volume every second (--dump-ttl-after-deletion=1s)" eventually 10 swept 3
check "... only its namespace's folders: ml/gone is not marked, ml/llm keeps every incident" \
  bash -c "! test -e '$vol/ml/gone/.deleted-at' && test -d '$vol/ml/llm/hang-e1-earlier' -a -d '$vol/ml/llm/hang-e1-unstamped'"
if stop_controller; then ok "the namespaced controller stops on SIGTERM"; else bad "the namespaced controller stops on SIGTERM"; fi
if sed -n '/=== controller team/,$p' "$ctrl_log" | grep -q Forbidden; then bad "the namespaced controller was refused something"; sed -n '/=== controller team/,$p' "$ctrl_log" | grep Forbidden | head -3; else ok "the namespaced controller was refused nothing"; fi

# --- the dump folders of deleted jobs go after --dump-ttl-after-deletion ------------------------
check "the deleted job classic had a dump folder" test -d "$vol/ml/classic"
ttl_flags="--dump-ttl-after-deletion 3s"
if start_controller 5; then ok "a controller with --dump-ttl-after-deletion 3s leads"; else bad "ttl controller start"; fi
ttl_flags=
check "the folder ml/gone, of a job that does not exist, is marked at start-up" eventually 10 test -s "$vol/ml/gone/.deleted-at"
check "... and not removed yet" test -d "$vol/ml/gone/hang-e1-1"
t0=$(date +%s)
check "... removed once 3 s have passed" eventually 15 bash -c "! test -e '$vol/ml/gone'"
echo "# ml/gone removed $(( $(date +%s) - t0 )) s after it was found marked"
check_out "a link in it was removed, not what it pointed at" '^keep$' cat "$work/outside/precious"
check "the running job llm keeps its folder and its own incident" test -d "$vol/ml/llm/hang-e1-mine"
check "... and loses the incidents of an earlier job named llm (another uid; no uid and older than llm)" \
  bash -c "! test -e '$vol/ml/llm/hang-e1-earlier' && ! test -e '$vol/ml/llm/hang-e1-unstamped'"
check "the link ml/escape and the folder lost+found are left alone" test -L "$vol/ml/escape" -a -d "$vol/lost+found"
ctl5_log() { sed -n '/=== controller 5/,$p' "$ctrl_log"; }
check_out "... saying so (lost+found)" 'lost\+found: not a namespace name; left alone' ctl5_log
check_out "... saying so (ml/escape)" 'ml/escape: a symbolic link \(never followed\); left alone' ctl5_log
check "the TrainingJob classic is deleted" kc delete tj classic -n ml --wait=false
check "its dump folder goes 3 s after" eventually 20 bash -c "! test -e '$vol/ml/classic'"
check_out "the log says which folder went and why" "removed $vol/ml/classic, the dump folder of TrainingJob ml/classic, gone for [3-9]s \(--dump-ttl-after-deletion=3s\)" ctl5_log
metric_is() { [ "$(metric "$1")" = "$2" ]; }  # a sweep's counts are published once it is done
check "metrics: 2 folders of deleted jobs removed" eventually 5 metric_is 'ftcomm_controller_dump_dirs_removed_total{reason="job_deleted"}' 2
check "metrics: 2 incidents of an earlier job removed" eventually 5 metric_is 'ftcomm_controller_dump_dirs_removed_total{reason="job_recreated"}' 2
check "metrics: no folder waits" eventually 5 metric_is ftcomm_controller_dump_dirs_awaiting_removal 0
check "llm's folder is still there" test -d "$vol/ml/llm/hang-e1-mine"
# A job deleted and made again under its name at once: the earlier job's incidents go, the folder stays.
sed -e 's/name: llm,/name: again,/' "$work/job.yaml" >"$work/again.yaml"
check "a TrainingJob again applies" kc apply -f "$work/again.yaml"
check "... and gets its dump folder" eventually 20 test -d "$vol/ml/again"
first_uid=$(kc get tj again -n ml -o jsonpath='{.metadata.uid}')
mkdir -p "$vol/ml/again/hang-e1-first" && echo "$first_uid" >"$vol/ml/again/hang-e1-first/.job-uid"
check "it is deleted" kc delete tj again -n ml --wait=true
check "... and made again under its name" kc apply -f "$work/again.yaml"
second_uid=$(kc get tj again -n ml -o jsonpath='{.metadata.uid}')
check "... with another uid" test "$first_uid" != "$second_uid"
mkdir -p "$vol/ml/again/hang-e1-second" && echo "$second_uid" >"$vol/ml/again/hang-e1-second/.job-uid"
check "the first job's incident goes once the second job is 3 s old" eventually 15 bash -c "! test -e '$vol/ml/again/hang-e1-first'"
check_out "... saying whose it was" "removed $vol/ml/again/hang-e1-first, an incident of an earlier TrainingJob ml/again \(its .job-uid says uid $first_uid; the current one, uid $second_uid," ctl5_log
check "the second job's incident and the folder stay" test -d "$vol/ml/again/hang-e1-second"
check "the second job runs its pods" eventually 20 bash -c "[ \"\$($FTC_KUBECTL get pod again-0-0 -n ml -o jsonpath='{.metadata.ownerReferences[0].uid}')\" = $second_uid ]"
check "metrics: 3 incidents of earlier jobs removed" eventually 5 metric_is 'ftcomm_controller_dump_dirs_removed_total{reason="job_recreated"}' 3
if stop_controller; then ok "the controller stops on SIGTERM"; else bad "the controller stops on SIGTERM"; fi

# --- a leader that cannot renew its Lease steps down -----------------------------------------
lease_flags="--lease-duration 4 --renew-deadline 3 --retry-period 1"
if start_controller 4; then ok "a controller with a 3 s renew deadline leads"; else bad "short-lease controller start"; fi
check "it holds the Lease" eventually 10 holder ctl-4
t0=$(date +%s)
check "kube-apiserver stopped (etcd stays)" timeout 120 "$cluster" stop-apiserver "$dir"
exited() { ! kill -0 "$ctrl_pid" 2>/dev/null; }
check "without the API server it gives up leadership and exits" eventually 30 exited
wait "$ctrl_pid"; rc=$?; ctrl_pid=
check "... with status 1 (so its pod restarts and campaigns again) after $(( $(date +%s) - t0 )) s" test "$rc" -eq 1
check_out "... saying so" 'lost Lease ftcomm-system/ftcomm-controller' tail -5 "$ctrl_log"
# Every controller has exited: sanitizer reports (leaks included) are in the log by now.
if grep -q 'Sanitizer' "$ctrl_log"; then bad "sanitizer report in the controller's log"; grep -A20 'Sanitizer' "$ctrl_log" | head -40; else ok "no sanitizer report from the controller"; fi
finish
