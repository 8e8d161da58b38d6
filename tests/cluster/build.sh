#!/usr/bin/env bash
# build.sh - build the local control plane's binaries from their Go modules.
#
#   tests/cluster/build.sh            build if needed, print the bin directory
#   tests/cluster/build.sh --force    rebuild even if up to date
#
# Builds kube-apiserver, kubectl, kube-controller-manager, etcd and helm (module
# tools/) and kwok (module tools/kwok/) with CGO_ENABLED=0 -tags selinux,notest and version ldflags, into
#   ${FTC_CLUSTER_BIN:-$HOME/.cache/ftcomm/cluster-bin/<key>}
# where <key> hashes the go.mod/go.sum files, this script and the Go version, so a
# change to any of them builds afresh and an unchanged tree skips the build.
# The normal GOMODCACHE and GOCACHE are used: only the first build is slow.
# After a version change: tests/cluster/gen-replaces.sh (k8s) or go get + go mod tidy
# in tools/ or tools/kwok/, then commit go.mod and go.sum.
# The last line printed on stdout is the bin directory; everything else is on stderr.
# FTC_CLUSTER_NO_KWOK=1 skips kwok.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/tools
force=0
[ "${1:-}" = --force ] && force=1

say() { echo "cluster/build: $*" >&2; }
die() { say "error: $*"; exit 1; }

command -v go >/dev/null || die "no 'go' in PATH (Go >= 1.24 is needed; apt-get install golang-go or use the project's Go)"
command -v sha256sum >/dev/null || die "no sha256sum"

key=$( { go env GOVERSION GOOS GOARCH; cat "$tools/go.mod" "$tools/go.sum" "$0";
         [ -d "$tools/kwok" ] && cat "$tools/kwok/go.mod" "$tools/kwok/go.sum";
         echo "kwok=${FTC_CLUSTER_NO_KWOK:-0}"; } | sha256sum | cut -c1-16)
bin=${FTC_CLUSTER_BIN:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ftcomm/cluster-bin/$key}
mkdir -p "$bin"

# One build at a time per bin directory (make test-bins and smoke.sh may both ask).
exec 9>"$bin/.lock"
flock -w 3600 9 || die "timed out waiting for another build.sh on $bin"

if [ $force = 0 ] && [ -f "$bin/.key" ] && [ "$(cat "$bin/.key")" = "$key" ]; then
  say "up to date: $bin"
  echo "$bin"
  exit 0
fi
rm -f "$bin/.key"

# readonly: go.mod and go.sum are committed; a stale go.sum must fail, not be rewritten.
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"
t0=$(date +%s)
modver() { (cd "$1" && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' "$2"); }

k8s=$(modver "$tools" k8s.io/kubernetes)
helmv=$(modver "$tools" helm.sh/helm/v3)
etcdv=$(modver "$tools" go.etcd.io/etcd/server/v3)
[[ $k8s =~ ^v([0-9]+)\.([0-9]+)\. ]] || die "unexpected k8s.io/kubernetes version '$k8s'"
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}

kv() {  # version ldflags of one k8s version package
  echo "-X $1.gitVersion=$k8s -X $1.gitMajor=$major -X $1.gitMinor=$minor" \
       "-X $1.gitTreeState=clean -X $1.gitCommit=module-$k8s"
}
ldk8s="-s -w $(kv k8s.io/component-base/version) $(kv k8s.io/client-go/pkg/version)"
ldhelm="-s -w -X helm.sh/helm/v3/internal/version.version=$helmv -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=$major -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor \
 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=$major -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"

tmp=$bin/.tmp.$$
rm -rf "$tmp"; mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

step() {  # step NAME DIR LDFLAGS PKG...
  local name=$1 dir=$2 ld=$3; shift 3
  local s; s=$(date +%s)
  say "building $name ..."
  (cd "$dir" && go build -trimpath -buildvcs=false -tags selinux,notest -ldflags "$ld" -o "$tmp/" "$@") \
    || die "go build of $name failed (see above)"
  say "built $name in $(( $(date +%s) - s ))s"
}

say "k8s $k8s, etcd $etcdv, helm $helmv -> $bin"
step "kube-apiserver, kubectl" "$tools" "$ldk8s" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
# Its own step (after the API server's, whose packages it mostly shares) so that its
# cost shows: the tests that need garbage collection start it (cluster.sh --gc).
step kube-controller-manager "$tools" "$ldk8s" k8s.io/kubernetes/cmd/kube-controller-manager
step etcd "$tools" "-s -w" ./cmd/etcd
step helm "$tools" "$ldhelm" helm.sh/helm/v3/cmd/helm
if [ "${FTC_CLUSTER_NO_KWOK:-0}" != 1 ] && [ -f "$tools/kwok/go.mod" ]; then
  kwokv=$(modver "$tools/kwok" sigs.k8s.io/kwok)
  step "kwok $kwokv" "$tools/kwok" "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$kwokv" sigs.k8s.io/kwok/cmd/kwok
fi

for f in "$tmp"/*; do mv -f "$f" "$bin/"; done
echo "$key" >"$bin/.key"
# Each set is ~320 MB: in the default cache keep this one and the newest other.
if [ -z "${FTC_CLUSTER_BIN:-}" ]; then
  # (grep finds nothing on a fresh cache: not an error under pipefail)
  ls -1dt "$(dirname "$bin")"/*/ 2>/dev/null | sed 's:/$::' | { grep -vxF "$bin" || true; } | tail -n +2 |
    while read -r old; do
      [ -f "$old/.key" ] && [[ $(basename "$old") =~ ^[0-9a-f]{16}$ ]] && { say "removing old $old"; rm -rf "$old"; }
    done
fi
say "done in $(( $(date +%s) - t0 ))s: $(cd "$bin" && echo *)"
echo "$bin"
