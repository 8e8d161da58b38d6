#!/usr/bin/env bash
# rbac.sh - the controller's rights and the users' rights on a real kube-apiserver (with
# kube-controller-manager's clusterrole-aggregation controller, which fills the built-in
# edit/admin/view roles as in a real cluster):
#   - what the controller's ServiceAccount may do (kubectl auth can-i --list, impersonated)
#     is exactly tests/controller/rbac-allowed.txt, in the all-namespaces mode (deploy/)
#     and in the namespaced mode (the chart with controller.watchNamespace): there, Secrets,
#     pods and TrainingJobs only in the watched namespace, nothing in kube-system; no
#     Secret of a user's namespace is readable in either mode (create only), and in its
#     own namespace only the one Secret that holds the token key
#   - a controller in the namespaced mode runs a job with exactly those rights
#   - users with the built-in edit role may create TrainingJobs, with view read them
. "$(dirname "$0")/../cluster/lib.sh"
start_cluster --controllers clusterrole-aggregation
ctl=$build/bin/ftcomm-controller
[ -x "$ctl" ] || { echo "FAIL - build first: make test-bins"; exit 1; }
allowed=$root/tests/controller/rbac-allowed.txt

check "CRD, namespace and deploy/'s RBAC apply" kc apply -f "$root/crds/ftcomm.dev_trainingjobs.yaml" -f "$root/deploy/namespace.yaml" -f "$root/deploy/rbac.yaml"
crd_ready
for n in team other; do kc create namespace $n >/dev/null; done

rights() {  # rights SA NAMESPACE: the resource rules the SA has there, one "resource [names] [verbs]" a line
  # ("[names] " only where the rule names its objects), sorted
  kc auth can-i --list --as="system:serviceaccount:$1" -n "$2" |
    awk 'NR > 1 && $1 !~ /^\[/ { v = $0; sub(/^[^[]*\[[^]]*\][ ]+/, "", v); n = v; sub(/\][ ]+.*/, "]", n)
                                   sub(/^\[[^]]*\][ ]+/, "", v); print $1, (n == "[]" ? "" : n " ") v }' | sort
}
expected() {  # expected SECTION: the lines of that section of rbac-allowed.txt
  awk -v s="[$1]" '$0 == s { on = 1; next } /^\[/ { on = 0 } on && NF && !/^#/' "$allowed"
}
same_rights() {  # same_rights SECTION SA NAMESPACE
  diff <(expected "$1") <(rights "$2" "$3") && return 0
  echo "(< $allowed [$1], > what kubectl auth can-i --list says)"; return 1
}
sa=ftcomm-system:ftcomm-controller
check "all namespaces (deploy/): rights in any namespace are the allow-list's" same_rights "all-namespaces, -n any" $sa any
check "all namespaces (deploy/): rights in ftcomm-system are the allow-list's" same_rights "all-namespaces, -n ftcomm-system" $sa ftcomm-system

# The chart with controller.watchNamespace=team, released in namespace ftcomm-ns.
kc create namespace ftcomm-ns >/dev/null
check "the chart's RBAC with watchNamespace=team applies" bash -c \
  "timeout 60 '$FTC_HELM' template ftcomm '$chart' -n ftcomm-ns --set controller.watchNamespace=team --show-only templates/rbac.yaml --show-only templates/serviceaccount.yaml | timeout 60 '$FTC_KUBECTL' apply -f -"
nsa=ftcomm-ns:ftcomm-controller
check "namespaced: rights in the watched namespace team are the allow-list's" same_rights "namespaced, -n team" $nsa team
check "namespaced: rights in another namespace are the allow-list's (nodes only)" same_rights "namespaced, -n other" $nsa other
check "namespaced: rights in its own namespace are the allow-list's (its Lease, its pod's label)" same_rights "namespaced, -n ftcomm-ns" $nsa ftcomm-ns
can() { kc auth can-i "$@"; }
for denied in "get secrets -n kube-system" "list secrets -n other" "watch secrets -A" "list pods -A" "create pods -n other" \
              "get secrets -n team" "list secrets -n team" "get secrets/other -n ftcomm-ns" "list trainingjobs.ftcomm.dev -A"; do
  # shellcheck disable=SC2086
  check_fails "namespaced: denies $denied" '(^|'$'\n'')no$' can $denied --as=system:serviceaccount:$nsa
done

# A controller in the namespaced mode, with only those rights, runs a job.
token=$(kc -n ftcomm-ns create token ftcomm-controller --duration=1h)
write_sa_kubeconfig "$work/sa.kubeconfig" "$token"
sed -i 's|namespace: ftcomm-system|namespace: ftcomm-ns|' "$work/sa.kubeconfig"
ctrl_log=$work/controller.log
FTCOMM_LOG_LEVEL=info "$ctl" --kubeconfig "$work/sa.kubeconfig" --namespace team --lease-namespace ftcomm-ns \
  --identity ctl-ns --listen-address 127.0.0.1:0 --coordinator-bind 127.0.0.1:0 --dump-volume "$work/dumps" >>"$ctrl_log" 2>&1 &
ctrl_pid=$!
eventually 10 grep -q 'identity ctl-ns$' "$ctrl_log"
port=$(ctrl_port)
check "a controller watching team becomes ready" eventually 20 curl -sf "http://127.0.0.1:$port/readyz"
cat >"$work/job.yaml" <<'YAML'
apiVersion: ftcomm.dev/v1alpha1
kind: TrainingJob
metadata: {name: small, namespace: team}
spec:
  replicas: 2
  template:
    spec:
      containers: [{name: trainer, image: example.com/trainer:1}]
YAML
check "a TrainingJob in team applies" kc apply -f "$work/job.yaml"
tpods() { [ "$(kc get pods -n team -l ftcomm.dev/job=small -o jsonpath='{range .items[*]}{.metadata.name}{" "}{end}')" = "small-0-0 small-1-0 " ]; }
check "its pods are made" eventually 20 tpods
check "... and its token Secret" kc get secret small-ftcomm-token -n team
check "... and the token key in the controller's own namespace" kc get secret ftcomm-controller-token-key -n ftcomm-ns
check "... and its status written" eventually 10 bash -c "[ \"\$(timeout 30 '$FTC_KUBECTL' get tj small -n team -o jsonpath='{.status.phase}')\" = Pending ]"
sleep 1
check_fails "it was refused nothing" "^0$" grep -c Forbidden "$ctrl_log"
kill -TERM "$ctrl_pid"; wait "$ctrl_pid"; ctrl_pid=

# Users: the built-in roles, filled by the aggregation controller with deploy/'s
# ftcomm-edit and ftcomm-view.
kc create rolebinding alice-edit -n team --clusterrole=edit --user=alice >/dev/null
kc create rolebinding bob-view -n team --clusterrole=view --user=bob >/dev/null
kc create rolebinding carol-admin -n team --clusterrole=admin --user=carol >/dev/null
aggregated() { kc auth can-i create trainingjobs.ftcomm.dev -n team --as=alice | grep -qx yes; }
check "the edit role gains TrainingJobs (aggregation)" eventually 30 aggregated
for allowed_ in "alice create trainingjobs.ftcomm.dev" "alice delete trainingjobs.ftcomm.dev" "alice patch trainingjobs.ftcomm.dev" \
                "bob list trainingjobs.ftcomm.dev" "bob watch trainingjobs.ftcomm.dev" "bob get trainingjobs.ftcomm.dev --subresource=status" \
                "carol create trainingjobs.ftcomm.dev"; do
  set -- $allowed_
  who=$1; shift
  check_out "$who may $*" '(^|'$'\n'')yes$' can "$@" -n team --as="$who"
done
check_fails "bob (view) may not create TrainingJobs" '(^|'$'\n'')no$' can create trainingjobs.ftcomm.dev -n team --as=bob
check_fails "alice (edit) may not write a TrainingJob's status" '(^|'$'\n'')no$' can update trainingjobs.ftcomm.dev --subresource=status -n team --as=alice
check_fails "alice's rights stay in her namespace" '(^|'$'\n'')no$' can create trainingjobs.ftcomm.dev -n other --as=alice
finish
