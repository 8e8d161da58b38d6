#!/usr/bin/env bash
# manifests.sh - the plain manifests (deploy/, generated from the chart's defaults by
# scripts/gen-deploy.sh) against a real kube-apiserver with the real kubectl:
#   kubectl kustomize deploy/ builds; kubectl apply -k deploy/crd/ then -k deploy/
#   --dry-run=server is accepted and stores nothing; kubectl apply -k deploy/crd/ and
#   deploy/ create everything; a second apply and kubectl diff find nothing to change;
#   the namespace enforces the restricted Pod Security Standard and admits the
#   controller's pod; the ServiceAccount gets exactly its rules; an overlay that moves
#   deploy/ to another namespace gives the pods a coordinator address in it (the
#   downward API) and binds the moved ServiceAccount; kubectl delete -k deploy/ removes
#   the controller and keeps the CRD and the TrainingJobs.
set -euo pipefail
. "$(dirname "$0")/../cluster/lib.sh"
start_cluster
cd "$root"
ns=ftcomm-system

check_out "kubectl kustomize deploy/ builds" 'kind: Deployment' kc kustomize deploy/
check_out "deploy/ holds no CRD (deleting the controller keeps TrainingJobs)" '^0$' bash -c "timeout 60 '$FTC_KUBECTL' kustomize deploy/ | grep -c '^kind: CustomResourceDefinition' || true"
check_out "kubectl kustomize deploy/crd/ builds the CRD alone" '^kind: CustomResourceDefinition$' bash -c "timeout 60 '$FTC_KUBECTL' kustomize deploy/crd/ | grep '^kind:'"
# A server dry run cannot put objects into a namespace that does not exist yet, so the
# namespace goes first (as deploy/namespace.yaml's users do: see docs/install.md).
check "deploy/namespace.yaml applied" kc apply -f deploy/namespace.yaml
check "kubectl apply -k deploy/crd/ --dry-run=server" kc apply -k deploy/crd/ --dry-run=server
check "kubectl apply -k deploy/ --dry-run=server" kc apply -k deploy/ --dry-run=server
check_out "... stored nothing" '^No resources found' kc -n $ns get deploy,svc,pvc,sa
check_out "... not even the CRD" 'NotFound' bash -c '"$0" get crd trainingjobs.ftcomm.dev 2>&1 || true' "$FTC_KUBECTL"
check "kubectl apply -k deploy/crd/" kc apply -k deploy/crd/
check "kubectl apply -k deploy/" kc apply -k deploy/
check "the objects are there" kc -n $ns get deploy/ftcomm-controller svc/ftcomm-controller sa/ftcomm-controller pvc/ftcomm-dumps \
  role/ftcomm-controller-leader-election rolebinding/ftcomm-controller-leader-election
check "... and the cluster-wide ones" kc get crd/trainingjobs.ftcomm.dev clusterrole/ftcomm-controller clusterrolebinding/ftcomm-controller
check "the CRD is established and served" crd_ready
check_out "a second apply changes nothing" '^([^ ]+ unchanged[[:space:]]*)+$' kc apply -k deploy/
check "kubectl diff -k deploy/ finds no difference" kc diff -k deploy/
check "kubectl diff -k deploy/crd/ finds no difference" kc diff -k deploy/crd/
check_out "the Deployment: leader election, coordinator address in the pod's own namespace, dump claim" \
  '"--leader-elect=true".*"--coordinator-address=ftcomm-controller\.\$\(POD_NAMESPACE\)\.svc:7470".* ftcomm-dumps metadata.namespace$' \
  kc -n $ns get deploy/ftcomm-controller -o jsonpath='{.spec.template.spec.containers[0].args} {.spec.template.spec.volumes[0].persistentVolumeClaim.claimName} {.spec.template.spec.containers[0].env[?(@.name=="POD_NAMESPACE")].valueFrom.fieldRef.fieldPath}'
check_out "the namespace enforces restricted" '^restricted$' kc get ns $ns -o jsonpath='{.metadata.labels.pod-security\.kubernetes\.io/enforce}'
kc -n $ns get deploy/ftcomm-controller -o json | jq '{apiVersion: "v1", kind: "Pod", metadata: {name: "psa-check", labels: .spec.template.metadata.labels}, spec: .spec.template.spec}' >"$work/pod.json"
psa_ok() {
  local out
  out=$(kc -n $ns create --dry-run=server -f "$work/pod.json" 2>&1) || { echo "$out"; return 1; }
  ! grep -qi 'violate\|PodSecurity' <<<"$out" || { echo "$out"; return 1; }
}
check "the controller's pod is admitted there (server dry run)" psa_ok
jq '.spec.containers[0].securityContext.runAsNonRoot = false | .spec.securityContext.runAsNonRoot = false' "$work/pod.json" >"$work/root.json"
check_fails "... and a pod running as root is not" 'violates PodSecurity "restricted' kc -n $ns create --dry-run=server -f "$work/root.json"
sa=system:serviceaccount:$ns:ftcomm-controller
can() { [ "$(kc auth can-i "$@" --as=$sa 2>/dev/null || true)" = yes ]; }
cannot() { ! can "$@"; }
check "the ServiceAccount may create pods and watch TrainingJobs anywhere" can create pods -n ml
check "... update TrainingJob status" can update trainingjobs.ftcomm.dev --subresource=status -n ml
check "... update its Lease in $ns" can update leases.coordination.k8s.io -n $ns
secrets_made_not_read() { can create secrets -n ml && cannot get secrets -n ml && cannot list secrets -n ml && cannot watch secrets -n ml && cannot update secrets -n ml && cannot delete secrets -n ml; }
token_key_only() { can get secrets/ftcomm-controller-token-key -n "$ns" && cannot get secrets/other -n "$ns" && cannot list secrets -n "$ns"; }
leader_label_only_here() { can patch pods -n "$ns" && cannot patch pods -n ml; }
check "... create the jobs' token Secrets, but not read, update or delete them" secrets_made_not_read
check "... read, in $ns, only the Secret of its token key" token_key_only
check "... patch pods (its own leader label) only in $ns" leader_label_only_here
check "... nor update TrainingJobs' spec" cannot update trainingjobs.ftcomm.dev -n ml
check "... nor touch Leases elsewhere" cannot update leases.coordination.k8s.io -n kube-system
check "the example TrainingJob is accepted" kc create namespace ml
check "... kubectl apply -f examples/trainingjob.yaml" kc -n ml apply -f examples/trainingjob.yaml

# An overlay that moves the controller to another namespace.
mkdir -p "$work/overlay"
cat >"$work/overlay/kustomization.yaml" <<YAML
namespace: ml-platform
resources: [$(realpath --relative-to="$work/overlay" "$root/deploy")]
YAML
check "an overlay moving deploy/ to namespace ml-platform builds" kc kustomize "$work/overlay" -o "$work/overlay.yaml"
check_out "... the Service, the controller and its Lease Role live there" '^ml-platform ml-platform ml-platform$' python3 -c '
import sys, yaml
d = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(open(sys.argv[1])) if o}
print(d[("Service", "ftcomm-controller")]["metadata"]["namespace"], d[("Deployment", "ftcomm-controller")]["metadata"]["namespace"],
      d[("Role", "ftcomm-controller-leader-election")]["metadata"]["namespace"])' "$work/overlay.yaml"
check_out "... with its namespace renamed (restricted Pod Security)" '^restricted$' python3 -c '
import sys, yaml
print([o for o in yaml.safe_load_all(open(sys.argv[1])) if o and o["kind"] == "Namespace" and o["metadata"]["name"] == "ml-platform"][0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"])' "$work/overlay.yaml"
check "... applies" kc apply -f "$work/overlay.yaml"
check_out "... the coordinator address the pods get names the namespace the controller runs in (downward API)" \
  '"--coordinator-address=ftcomm-controller\.\$\(POD_NAMESPACE\)\.svc:7470".* metadata.namespace$' \
  kc -n ml-platform get deploy/ftcomm-controller -o jsonpath='{.spec.template.spec.containers[0].args} {.spec.template.spec.containers[0].env[?(@.name=="POD_NAMESPACE")].valueFrom.fieldRef.fieldPath}'
check_out "... and its ServiceAccount has the controller's rights" '^yes$' \
  kc auth can-i create pods -n ml --as=system:serviceaccount:ml-platform:ftcomm-controller

# Uninstalling the controller keeps the CRD and every TrainingJob (no namespace controller
# runs here, so the namespace stays Terminating: --wait=false).
check "kubectl delete -k deploy/ (the controller)" kc delete -k deploy/ --wait=false
check_out "... its Deployment and ClusterRole are gone" 'NotFound.*NotFound' bash -c \
  "timeout 60 '$FTC_KUBECTL' get clusterrole ftcomm-controller 2>&1; timeout 60 '$FTC_KUBECTL' -n $ns get deploy ftcomm-controller 2>&1; true"
check "... the CRD stays" kc get crd trainingjobs.ftcomm.dev
check_out "... and so does the TrainingJob" 'trainingjob.ftcomm.dev/' kc -n ml get tj -o name

finish
