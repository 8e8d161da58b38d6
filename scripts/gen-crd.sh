#!/usr/bin/env bash
# gen-crd.sh - regenerate crds/ftcomm.dev_trainingjobs.yaml from crds/trainingjobs.in.yaml
# and the pod schema of the kube-apiserver the tests build (tests/cluster, cached), then
# copy it into the chart and deploy/ (scripts/gen-deploy.sh) and regenerate
# docs/crd-reference.md.
#   scripts/gen-crd.sh              regenerate everything
#   scripts/gen-crd.sh --check      exit 1 (saying what differs) if the committed CRD is
#                                   not what the generator makes (tests/controller/crd.sh)
# Starts its own control plane on loopback (a few seconds) and stops it on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-write}
tmp=$(mktemp -d)
trap '"$root/tests/cluster/cluster.sh" stop "$tmp/kc" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
if [ -z "${FTC_KUBECTL:-}" ] || [ -z "${KUBECONFIG:-}" ]; then
  "$root/tests/cluster/cluster.sh" start "$tmp/kc" >&2
  # shellcheck disable=SC1091
  . "$tmp/kc/env"
fi
timeout 60 "$FTC_KUBECTL" get --raw /openapi/v3/api/v1 >"$tmp/v1.json"
version=$(timeout 60 "$FTC_KUBECTL" get --raw /version | python3 -c 'import json,sys; print(json.load(sys.stdin)["gitVersion"])')
python3 "$root/scripts/gen-crd.py" "$root/crds/trainingjobs.in.yaml" "$tmp/v1.json" "$version" >"$tmp/crd.yaml"
if [ "$mode" = --check ]; then
  cmp -s "$tmp/crd.yaml" "$root/crds/ftcomm.dev_trainingjobs.yaml" && exit 0
  echo "crds/ftcomm.dev_trainingjobs.yaml is not what scripts/gen-crd.py makes from crds/trainingjobs.in.yaml and kube-apiserver $version; run scripts/gen-crd.sh"
  diff -u "$root/crds/ftcomm.dev_trainingjobs.yaml" "$tmp/crd.yaml" | head -20
  exit 1
fi
cp "$tmp/crd.yaml" "$root/crds/ftcomm.dev_trainingjobs.yaml"
"$root/scripts/gen-deploy.sh"
(cd "$root" && python3 scripts/gen-crd-doc.py crds/ftcomm.dev_trainingjobs.yaml >docs/crd-reference.md)
echo "gen-crd: crds/ftcomm.dev_trainingjobs.yaml ($(wc -c <"$root/crds/ftcomm.dev_trainingjobs.yaml") bytes) from kube-apiserver $version; chart, deploy/ and docs/crd-reference.md updated" >&2
