#!/usr/bin/env bash
# conditions.sh - what a Kubernetes user sees of a TrainingJob, against a real
# kube-apiserver (and kube-controller-manager's resourcequota controller), with
# ftcomm-controller running under deploy/'s RBAC:
#   - pods the API server refuses (a container name the pod API rejects, a namespace
#     enforcing the restricted Pod Security Standard, a ResourceQuota admitting one pod
#     of two): phase Blocked, condition PodsCreated=False with the API server's words,
#     one Warning Event FailedCreate per cause (not one per retry), kubectl describe
#     shows it; the job goes on by itself once the quota is raised, and once a suspended
#     job's template is fixed
#   - conditions to wait on: Running while training, Succeeded when every member
#     completed (Ready False, not "0 of 2 running"), Failed when the budget is used up
#   - observedGeneration moves with the spec the status describes (a scaled job)
. "$(dirname "$0")/../cluster/lib.sh"
start_cluster --controllers resourcequota,garbagecollector
ctl=$build/bin/ftcomm-controller
[ -x "$ctl" ] || { echo "FAIL - build first: make test-bins"; exit 1; }

check "CRD, namespace and RBAC apply" kc apply -f "$root/crds/ftcomm.dev_trainingjobs.yaml" -f "$root/deploy/namespace.yaml" -f "$root/deploy/rbac.yaml"
crd_ready
token=$(kc -n ftcomm-system create token ftcomm-controller --duration=1h)
write_sa_kubeconfig "$work/sa.kubeconfig" "$token"
ctrl_log=$work/controller.log
FTCOMM_LOG_LEVEL=info "$ctl" --kubeconfig "$work/sa.kubeconfig" --listen-address 127.0.0.1:0 --identity ctl-c \
  --coordinator-address coord.test:7470 --coordinator-bind 127.0.0.1:0 --dump-volume "$work/dumps" >>"$ctrl_log" 2>&1 &
ctrl_pid=$!
eventually 10 grep -q 'identity ctl-c$' "$ctrl_log"
port=$(ctrl_port)
check "the controller becomes ready" eventually 20 curl -sf "http://127.0.0.1:$port/readyz"

job() {  # job NS NAME REPLICAS [CONTAINER-YAML]: a TrainingJob manifest on stdout
  printf 'apiVersion: ftcomm.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: %s, namespace: %s}\nspec:\n  replicas: %s\n  failurePolicy: {maxReplacements: 0, backoffSeconds: 0}\n  template:\n    spec:\n      containers:\n      - %s\n' \
    "$2" "$1" "$3" "${4:-{name: trainer, image: example.com/trainer:1\}}"
}
apply_job() { job "$@" | kc apply -f -; }
get() { kc get tj "$2" -n "$1" -o jsonpath="$3"; }
is_phase() { [ "$(get "$1" "$2" '{.status.phase}')" = "$3" ]; }
cond() { get "$1" "$2" "{.status.conditions[?(@.type==\"$3\")].status} {.status.conditions[?(@.type==\"$3\")].reason} {.status.conditions[?(@.type==\"$3\")].message}"; }
failed_creates() {  # the FailedCreate Events about job $2 in namespace $1
  kc get events.events.k8s.io -n "$1" -o json | python3 -c '
import json, sys
ev = [e for e in json.load(sys.stdin)["items"] if e.get("reason") == "FailedCreate" and e["regarding"]["name"] == sys.argv[1]]
print(len(ev), " ".join(sorted({e["type"] for e in ev})))' "$2"
}
pods() { kc get pods -n "$1" -l "ftcomm.dev/job=$2" -o jsonpath='{range .items[*]}{.metadata.name}{" "}{end}'; }
have_pods() { [ "$(pods "$1" "$2")" = "$3" ]; }

# --- a container name the pod API refuses --------------------------------------------------------
kc create namespace ml >/dev/null
check "a job whose container name the pod API refuses applies (the CRD cannot tell)" \
  apply_job ml badname 2 '{name: Trainer_1, image: example.com/trainer:1}'
check "phase Blocked" eventually 20 is_phase ml badname Blocked
check_out "condition PodsCreated False FailedCreate, with the API server's message" \
  '^False FailedCreate slot 0: pod badname-0-0: Pod "badname-0-0" is invalid: spec.containers\[0\].name: Invalid value: "Trainer_1": a lowercase RFC 1123 label .* \(2 slots refused; retried\)$' \
  cond ml badname PodsCreated
check_out "Ready False, reason FailedCreate" '^False FailedCreate 0 of 2 members running' cond ml badname Ready
check_out "members say FailedCreate" '^FailedCreate FailedCreate$' get ml badname '{.status.members[0].state} {.status.members[1].state}'
sleep 5  # a few retries (2 s apart at first)
check_out "retried, and still one Warning Event FailedCreate for the one cause" '^1 Warning$' failed_creates ml badname
describe_flat() { kc describe tj "$2" -n "$1" | tr '\n' ' '; }
check_out "kubectl describe shows the condition and the Event" 'PodsCreated.*Warning +FailedCreate .*spec.containers\[0\].name: Invalid value' \
  describe_flat ml badname
check_out "the controller logs each refusal" 'slot 0: the API server refused pod badname-0-0 \(422\)' cat "$ctrl_log"

# --- a namespace enforcing the restricted Pod Security Standard -----------------------------------
kc create namespace secure >/dev/null
kc label namespace secure pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=latest >/dev/null
check "a job with a plain container applies in a restricted namespace" apply_job secure plain 1
check "phase Blocked" eventually 20 is_phase secure plain Blocked
check_out "PodsCreated names the Pod Security violation" \
  '^False FailedCreate slot 0: pod plain-0-0: pods "plain-0-0" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false' \
  cond secure plain PodsCreated
check_out "one Warning Event FailedCreate" '^1 Warning$' failed_creates secure plain
check "suspend it to fix the template" kc patch tj plain -n secure --type=merge -p '{"spec":{"suspend":true}}'
check "suspended" eventually 20 is_phase secure plain Suspended
check "the suspended job's template gets a restricted securityContext" kc patch tj plain -n secure --type=merge -p \
  '{"spec":{"template":{"spec":{"securityContext":{"runAsNonRoot":true,"runAsUser":1000,"seccompProfile":{"type":"RuntimeDefault"}},"containers":[{"name":"trainer","image":"example.com/trainer:1","securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]}}}]}}}}'
check "resume" kc patch tj plain -n secure --type=merge -p '{"spec":{"suspend":false}}'
check "its pod is admitted now" eventually 20 have_pods secure plain "plain-0-0 "
check_out "PodsCreated True again" '^True PodsCreated ' cond secure plain PodsCreated
check_out "phase Pending (its pod waits for a node)" '^Pending$' get secure plain '{.status.phase}'

# --- a ResourceQuota that admits one pod of two ---------------------------------------------------
kc create namespace quota >/dev/null
check "a ResourceQuota of 1 pod" kc create quota pods -n quota --hard=pods=1
quota_known() { [ -n "$(kc get quota pods -n quota -o jsonpath='{.status.hard.pods}')" ]; }
check "... counted by kube-controller-manager" eventually 30 quota_known
check "a 2-replica job applies" apply_job quota two 2
check "its first pod is created" eventually 20 have_pods quota two "two-0-0 "
check "phase Blocked" eventually 20 is_phase quota two Blocked
check_out "PodsCreated says the quota is exceeded" \
  '^False FailedCreate slot 1: pod two-1-0: pods "two-1-0" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=1, limited: pods=1 \(retried\)$' \
  cond quota two PodsCreated
check_out "members: one Pending, one FailedCreate" '^Pending FailedCreate$' get quota two '{.status.members[0].state} {.status.members[1].state}'
sleep 4
check_out "one Warning Event FailedCreate" '^1 Warning$' failed_creates quota two
check "the quota is raised to 2" kc patch quota pods -n quota --type=merge -p '{"spec":{"hard":{"pods":"2"}}}'
t0=$(date +%s)
check "the job creates its second pod by itself" eventually 60 have_pods quota two "two-0-0 two-1-0 "
echo "# the second pod came $(( $(date +%s) - t0 )) s after the quota was raised"
pods_created() { [ "$(cond quota two PodsCreated | cut -d' ' -f1)" = True ]; }
check "PodsCreated True" eventually 10 pods_created
phase_events() { echo "$(get "$1" "$2" '{.status.phase}') $(failed_creates "$1" "$2")"; }
check_out "phase Pending (its pods wait for nodes), no more Events" '^Pending 1 Warning$' phase_events quota two

# --- conditions to wait on --------------------------------------------------------------------------
bind_status() {  # bind_status NS POD NODE PHASE: play scheduler and kubelet
  printf '{"apiVersion":"v1","kind":"Binding","metadata":{"name":"%s"},"target":{"apiVersion":"v1","kind":"Node","name":"%s"}}' "$2" "$3" >"$work/binding.json"
  kc create --raw "/api/v1/namespaces/$1/pods/$2/binding" -f "$work/binding.json" >/dev/null &&
    kc patch pod "$2" -n "$1" --subresource=status --type=merge -p "{\"status\":{\"phase\":\"$4\"}}" >/dev/null
}
check "a 2-replica job applies" apply_job ml done 2
check "its pods are created" eventually 20 have_pods ml done "done-0-0 done-1-0 "
check_out "Running False while its pods are pending" '^False NotTraining ' cond ml done Running
bind_status ml done-0-0 node-a Running
bind_status ml done-1-0 node-b Running
check "kubectl wait --for=condition=Running" kc wait --for=condition=Running tj/done -n ml --timeout=20s
check_out "Succeeded False while it trains" '^False NotAllSucceeded 0 of 2 members succeeded$' cond ml done Succeeded
check "scale to 3" kc patch tj done -n ml --type=merge -p '{"spec":{"replicas":3,"minReplicas":2}}'
gen_observed() { [ "$(get ml done '{.metadata.generation} {.status.observedGeneration} {.status.members[2].slot}')" = "2 2 2" ]; }
check "observedGeneration 2 once status lists the third slot" eventually 20 gen_observed
bind_status ml done-2-0 node-c Running
for p in done-0-0 done-1-0 done-2-0; do kc patch pod $p -n ml --subresource=status --type=merge -p '{"status":{"phase":"Succeeded"}}' >/dev/null; done
check "kubectl wait --for=condition=Succeeded" kc wait --for=condition=Succeeded tj/done -n ml --timeout=20s
phase_cond() { echo "$(get "$1" "$2" '{.status.phase}') $(cond "$1" "$2" "$3")"; }
check_out "phase Succeeded, Succeeded True with what happened" '^Succeeded True AllMembersSucceeded 3 of 3 members succeeded$' \
  phase_cond ml done Succeeded
check_out "Ready False says the job succeeded (not \"0 of 3 members running\")" '^False JobSucceeded the job succeeded' cond ml done Ready
check_out "Running False, JobEnded" '^False JobEnded ' cond ml done Running
check_out "Failed False" '^False ' cond ml done Failed

conds3() { echo "$(cond "$1" "$2" Failed) $(cond "$1" "$2" Succeeded) $(cond "$1" "$2" Ready)"; }
check "a job with no replacement budget applies" apply_job ml doomed 1
check "its pod is created" eventually 20 have_pods ml doomed "doomed-0-0 "
bind_status ml doomed-0-0 node-a Failed
check "kubectl wait --for=condition=Failed" kc wait --for=condition=Failed tj/doomed -n ml --timeout=20s
check_out "Failed True ReplacementBudgetExhausted; Succeeded False; Ready False JobFailed" \
  '^True ReplacementBudgetExhausted .* False NotAllSucceeded .* False JobFailed ' \
  conds3 ml doomed

kill -TERM "$ctrl_pid"; wait "$ctrl_pid"; rc=$?; ctrl_pid=
check "SIGTERM: the controller exits 0" test "$rc" -eq 0
# It has exited: a sanitizer's report (leaks included) is in the log by now.
if grep -q 'Sanitizer' "$ctrl_log"; then bad "sanitizer report in the controller's log"; grep -A20 'Sanitizer' "$ctrl_log" | head -40; else ok "no sanitizer report from the controller"; fi
finish
