#!/usr/bin/env bash
# gen-replaces.sh - point every k8s.io staging module at its published v0.X.Y.
#
#   tests/cluster/gen-replaces.sh [K8S_VERSION]     (default: the one in tools/go.mod)
#
# k8s.io/kubernetes's go.mod replaces its ~30 staging modules (k8s.io/api,
# k8s.io/client-go, ...) with ./staging/src/k8s.io/<name>, which a module that
# depends on k8s.io/kubernetes cannot see. This script reads the go.mod that the
# Go module proxy serves for k8s.io/kubernetes@K8S_VERSION, takes the list of
# staging modules from its replace block, and writes
#   k8s.io/<name> => k8s.io/<name> v0.<minor>.<patch>
# into tests/cluster/tools/go.mod (go mod edit), then runs go mod tidy.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/tools
cd "$tools"
export GOFLAGS=-mod=mod

ver=${1:-$(go mod edit -json | awk '/"Path": "k8s.io\/kubernetes"/ { getline; gsub(/[",]/, ""); print $2; exit }')}
if ! [[ $ver =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "gen-replaces: need a k8s.io/kubernetes version like v1.34.4, got '$ver'" >&2
  exit 2
fi
staging=v0.${ver#v1.}

modfile=$(go mod download -json "k8s.io/kubernetes@$ver" | awk -F'"' '/"GoMod":/ { print $4 }')
if [ -z "$modfile" ] || [ ! -f "$modfile" ]; then
  echo "gen-replaces: could not download the go.mod of k8s.io/kubernetes@$ver" >&2
  exit 1
fi

mods=$(awk '$2 == "=>" && $3 ~ /^\.\/staging\/src\// { print $1 }' "$modfile" | sort -u)
n=$(echo "$mods" | grep -c . || true)
if [ "$n" -lt 20 ]; then
  echo "gen-replaces: found only $n staging modules in $modfile; its format changed?" >&2
  exit 1
fi

# Drop the replaces of any older run, then add the current ones.
for old in $(go mod edit -json | awk -F'"' '/"Old":/ { getline; print $4 }' | grep '^k8s\.io/' || true); do
  go mod edit -dropreplace="$old"
done
args=()
for m in $mods; do args+=("-replace=$m=$m@$staging"); done
go mod edit -require="k8s.io/kubernetes@$ver" "${args[@]}"
echo "gen-replaces: $n staging modules -> $staging (from k8s.io/kubernetes@$ver)"
go mod tidy
