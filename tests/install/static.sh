#!/usr/bin/env bash
# static.sh - the chart and the generated files, without a cluster:
#   helm lint; the chart's CRD is crds/'s; deploy/ is what scripts/gen-deploy.sh
#   makes; the chart's RBAC rules are deploy/rbac.yaml's; values.schema.json and the
#   chart's own checks refuse bad values with a message naming the value;
#   non-default values render what they say; docs/crd-reference.md is fresh.
set -euo pipefail
. "$(dirname "$0")/../cluster/lib.sh"
use_tools
cd "$root"

check "helm lint --strict charts/ftcomm" hm lint --strict "$chart"
app_version() {  # the chart installs the release it is built from
  local want got
  want=$(sed -n 's/^#define FTC_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' runtime/include/ftcomm.h | paste -sd.)
  got=$(sed -n 's/^appVersion: "\(.*\)"$/\1/p' charts/ftcomm/Chart.yaml)
  [ "$want" = "$got" ] && return 0
  echo "charts/ftcomm/Chart.yaml appVersion is \"$got\" but runtime/include/ftcomm.h says $want: set appVersion (and bump version), then run scripts/gen-deploy.sh"
  return 1
}
check "Chart.yaml appVersion is ftcomm.h's FTC_VERSION" app_version

# The CRD: one source (crds/), copied into the chart (Helm installs crds/ of a chart
# before its templates) and into deploy/crd/ (kubectl apply -k).
crd_same() {
  cmp -s crds/ftcomm.dev_trainingjobs.yaml "$1" && return 0
  echo "$1 differs from crds/ftcomm.dev_trainingjobs.yaml; resync with: scripts/gen-deploy.sh (copies crds/ into the chart and deploy/)"
  diff -u crds/ftcomm.dev_trainingjobs.yaml "$1" | head -20
  return 1
}
check "charts/ftcomm/crds/ holds the same CRD as crds/" crd_same charts/ftcomm/crds/ftcomm.dev_trainingjobs.yaml

deploy_fresh() {
  local gen=$work/deploy rc=0 f
  FTC_HELM=$FTC_HELM scripts/gen-deploy.sh "$gen" >/dev/null
  for f in $(cd "$gen" && find . -type f | sort); do
    if ! cmp -s "$gen/$f" "deploy/$f"; then
      echo "deploy/${f#./} is stale (or missing): run scripts/gen-deploy.sh and commit deploy/"
      diff -u "deploy/$f" "$gen/$f" 2>&1 | head -30 || true
      rc=1
    fi
  done
  for f in $(find deploy -type f | sort); do
    [ -e "$gen/${f#deploy/}" ] || { echo "$f is not made by scripts/gen-deploy.sh: remove it"; rc=1; }
  done
  return $rc
}
check "deploy/ is what scripts/gen-deploy.sh renders from the chart's defaults" deploy_fresh

# The RBAC rules the chart installs are exactly those of deploy/rbac.yaml (the file the
# controller's own suite runs it with).
rbac_rules() {  # rbac_rules FILE: "Kind/name: rules" per Role and ClusterRole, as JSON
  python3 - "$1" <<'PY'
import json, sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d.get("kind") in ("ClusterRole", "Role"):
        print(d["kind"] + "/" + d["metadata"]["name"] + ": " + json.dumps(d.get("rules"), sort_keys=True))
PY
}
rbac_same() {
  hm template ftcomm "$chart" -n ftcomm-system --show-only templates/rbac.yaml >"$work/chart-rbac.yaml"
  rbac_rules "$work/chart-rbac.yaml" >"$work/chart-rules"
  rbac_rules deploy/rbac.yaml >"$work/deploy-rules"
  [ -s "$work/chart-rules" ] || { echo "the chart renders no Role or ClusterRole"; return 1; }
  diff -u "$work/deploy-rules" "$work/chart-rules" && return 0
  echo "the chart's RBAC rules differ from deploy/rbac.yaml: put the rules in charts/ftcomm/templates/rbac.yaml, then run scripts/gen-deploy.sh"
  return 1
}
check "the chart's RBAC rules are exactly deploy/rbac.yaml's" rbac_same
check_out "deploy/rbac.yaml has no wildcard" '^0$' bash -c "grep -c '[*]' deploy/rbac.yaml || true"

# Bad values are refused with a message that names the value.
render() { hm template ftcomm "$chart" -n ftcomm-system "$@"; }
check_fails "schema: negative replicas" "/controller/replicas': minimum: got -1" render --set controller.replicas=-1
check_fails "schema: bad image.pullPolicy" "/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'" render --set image.pullPolicy=Sometimes
check_fails "schema: dump size is not a quantity" "/dumps/persistence/size': 'twenty gigs' does not match pattern" render --set "dumps.persistence.size=twenty gigs"
check_fails "schema: misspelt key" "additional properties 'controler' not allowed" render --set controler.replicas=2
check_fails "schema: port out of range" "/service/metricsPort': maximum: got 70,000, want 65,535" render --set service.metricsPort=70000
check_fails "schema: unknown access mode" "/dumps/persistence/accessModes/0': value must be one of" render --set "dumps.persistence.accessModes={ReadWriteSometimes}"
check_fails "schema: log level" "/controller/logLevel': value must be one of" render --set controller.logLevel=loud
check_fails "schema: replicas is a number" "/controller/replicas': got string, want integer" render --set-string controller.replicas=two
check_fails "chart: replicas > 1 without leader election" "controller.replicas is 2 but controller.leaderElection.enabled is false" \
  render --set controller.replicas=2 --set controller.leaderElection.enabled=false
check_fails "chart: lease timings out of order" "need leaseDuration \(15\) > renewDeadline \(20\) > retryPeriod \(2\)" \
  render --set controller.leaderElection.renewDeadline=20
check_fails "chart: existing ServiceAccount without a name" "serviceAccount.name: give the existing ServiceAccount" \
  render --set serviceAccount.create=false

# What the defaults render, and what values change.
doc() {  # doc KIND FILE: the KIND object of a multi-document file, as JSON
  python3 -c 'import json,sys,yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[2])) if d and d["kind"]==sys.argv[1]][0]))' "$1" "$2"
}
render >"$work/default.yaml"
check_out "defaults: restricted securityContext, probes, leader election" \
  '^true true false \["ALL"\] RuntimeDefault /healthz /readyz --leader-elect=true 1$' \
  jq -r '.spec.template.spec as $p | $p.containers[0] as $c | [$p.securityContext.runAsNonRoot, $c.securityContext.readOnlyRootFilesystem,
         $c.securityContext.allowPrivilegeEscalation, ($c.securityContext.capabilities.drop|tojson), $c.securityContext.seccompProfile.type,
         $c.livenessProbe.httpGet.path, $c.readinessProbe.httpGet.path, ($c.args[] | select(startswith("--leader-elect"))), .spec.replicas] | join(" ")' \
  <(doc Deployment "$work/default.yaml")
check_out "defaults: Service with the coordinator and metrics ports" '^coordinator:7470 metrics:8080$' \
  jq -r '[.spec.ports[] | "\(.name):\(.port)"] | join(" ")' <(doc Service "$work/default.yaml")
check_out "defaults: a 20Gi ReadWriteOnce dump claim, kept on uninstall" '^20Gi ReadWriteOnce keep$' \
  jq -r '[.spec.resources.requests.storage, .spec.accessModes[0], .metadata.annotations["helm.sh/resource-policy"]] | join(" ")' \
  <(doc PersistentVolumeClaim "$work/default.yaml")
check_out "defaults: no ServiceMonitor" '^0$' bash -c 'grep -c "kind: ServiceMonitor" "$0" || true' "$work/default.yaml"
check_out "defaults: standard labels on every object" '^ok$' python3 -c '
import sys, yaml
want = ["app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/component", "app.kubernetes.io/managed-by", "helm.sh/chart"]
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d:
        miss = [k for k in want if k not in d["metadata"].get("labels", {})]
        if miss: sys.exit("%s/%s lacks %s" % (d["kind"], d["metadata"]["name"], miss))
print("ok")' "$work/default.yaml"
check_out "serviceMonitor.enabled renders a ServiceMonitor on the metrics port" '^monitoring.coreos.com/v1 metrics /metrics 15s prometheus$' \
  jq -r '[.apiVersion, .spec.endpoints[0].port, .spec.endpoints[0].path, .spec.endpoints[0].interval, .metadata.labels.release] | join(" ")' \
  <(render --set serviceMonitor.enabled=true --set serviceMonitor.interval=15s --set serviceMonitor.labels.release=prometheus >"$work/sm.yaml"; doc ServiceMonitor "$work/sm.yaml")
check_out "existingClaim: no claim made, the Deployment mounts it" '^0 shared-dumps$' bash -c '
  out=$("$@"); echo "$(grep -c "kind: PersistentVolumeClaim" <<<"$out") $(grep -o "claimName: .*" <<<"$out" | cut -d" " -f2)"' _ \
  "$FTC_HELM" template ftcomm "$chart" --set dumps.persistence.existingClaim=shared-dumps
check_out "persistence.enabled=false: an emptyDir" 'name: dumps[[:space:]]+emptyDir: \{\}' \
  render --set dumps.persistence.enabled=false --show-only templates/deployment.yaml
check_out "storageClassName '-': an empty class" 'storageClassName: ""' render --set dumps.persistence.storageClassName=- --show-only templates/pvc.yaml
check_out "image digest wins over the tag" 'image: "r.example/ftc@sha256:0{64}"' \
  render --set image.repository=r.example/ftc --set image.digest=sha256:0000000000000000000000000000000000000000000000000000000000000000 --show-only templates/deployment.yaml
check_out "a release name without 'ftcomm' prefixes the objects" 'name: ml-ftcomm-controller' \
  hm template ml "$chart" --show-only templates/deployment.yaml

crd_doc_fresh() {
  python3 scripts/gen-crd-doc.py crds/ftcomm.dev_trainingjobs.yaml >"$work/crd-reference.md"
  diff -u docs/crd-reference.md "$work/crd-reference.md" >"$work/crd-doc.diff" && return 0
  echo "docs/crd-reference.md is stale: run make docs-crd (scripts/gen-crd-doc.py crds/ftcomm.dev_trainingjobs.yaml > docs/crd-reference.md)"
  head -30 "$work/crd-doc.diff"
  return 1
}
check "docs/crd-reference.md is generated from the CRD's current schema" crd_doc_fresh

# The docs a user reads first link to files and headings that exist.
links_ok() {
  python3 - README.md docs/install.md docs/user-guide.md docs/operations.md <<'PY'
import os, re, sys
def slug(h):
    h = re.sub(r"[^\w\- ]", "", h.strip().lower())
    return h.replace(" ", "-")
bad = 0
for f in sys.argv[1:]:
    text = open(f).read()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(full):
            print("%s: link to missing %s" % (f, target)); bad = 1; continue
        if anchor and full.endswith(".md"):
            heads = [slug(h) for h in re.findall(r"^#+ (.*)$", open(full).read(), re.M)]
            if anchor not in heads:
                print("%s: link to missing heading %s" % (f, target)); bad = 1
sys.exit(bad)
PY
}
check "README.md, docs/install.md, user-guide.md, operations.md: links resolve" links_ok

finish
