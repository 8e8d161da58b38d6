# lib.sh - shared by the install suites (tests/install/*.sh): checks that count
# passes and failures, the real helm and kubectl built by tests/cluster/build.sh,
# and a real control plane (tests/cluster/cluster.sh) owned by the suite's shell
# and stopped on exit. Source it from a script that runs under set -euo pipefail.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cluster=$root/tests/cluster/cluster.sh
chart=$root/charts/ftcomm
pass=0 fail=0
work=$(mktemp -d "${TMPDIR:-/tmp}/ftci-$(basename "$0" .sh).XXXXXX")
dir=

ok() { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }
check() {  # check DESC CMD...: CMD exits 0
  local desc=$1 out; shift
  if out=$("$@" 2>&1); then ok "$desc"; else bad "$desc"; echo "$out" | tail -25 | sed 's/^/       /'; fi
}
check_fails() {  # check_fails DESC REGEX CMD...: CMD exits non-zero and says REGEX
  local desc=$1 re=$2 out; shift 2
  if out=$("$@" 2>&1); then bad "$desc (it succeeded)"; echo "$out" | tail -10 | sed 's/^/       /'; return; fi
  if [[ $out =~ $re ]]; then ok "$desc"; else bad "$desc (wanted /$re/)"; echo "$out" | tail -10 | sed 's/^/       /'; fi
}
check_out() {  # check_out DESC REGEX CMD...: CMD exits 0 and its output matches REGEX
  local desc=$1 re=$2 out; shift 2
  if ! out=$("$@" 2>&1); then bad "$desc (exit status)"; echo "$out" | tail -20 | sed 's/^/       /'; return; fi
  if [[ $out =~ $re ]]; then ok "$desc"; else bad "$desc (wanted /$re/)"; echo "$out" | tail -20 | sed 's/^/       /'; fi
}
eventually() {  # eventually SECONDS CMD...: retry CMD every 0.3 s until it exits 0
  local limit=$1; shift
  local end=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -ge "$end" ] && return 1
    sleep 0.3
  done
}
kc() { timeout 60 "$FTC_KUBECTL" "$@"; }
hm() { timeout 120 "$FTC_HELM" "$@"; }

# The tools without a cluster: FTC_HELM and FTC_KUBECTL from the cached build.
use_tools() {
  local bin
  bin=$(timeout 3600 "$root/tests/cluster/build.sh") || { echo "FAIL - building helm and kubectl (tests/cluster/build.sh)"; exit 1; }
  export FTC_HELM=$bin/helm FTC_KUBECTL=$bin/kubectl
  export HELM_CACHE_HOME=$work/helm/cache HELM_CONFIG_HOME=$work/helm/config HELM_DATA_HOME=$work/helm/data
}

start_cluster() {  # etcd + kube-apiserver for this suite, stopped on exit
  [ -x "$cluster" ] || { echo "FAIL - tests/cluster/cluster.sh is missing"; exit 1; }
  timeout 3600 "$root/tests/cluster/build.sh" >/dev/null || { echo "FAIL - building the control plane (tests/cluster/build.sh)"; exit 1; }
  dir=$work/cluster
  if ! timeout 120 "$cluster" start --owner $$ "$dir" >"$work/start.log" 2>&1; then
    cat "$work/start.log"
    echo "FAIL - cluster start"
    exit 1
  fi
  # shellcheck disable=SC1091
  . "$dir/env"
}

on_exit() {
  local rc=$?
  if [ -n "$dir" ]; then "$cluster" stop "$dir" >/dev/null 2>&1 || true; fi
  if [ "$fail" -eq 0 ] && [ $rc -eq 0 ]; then rm -rf "$work"; else echo "# kept $work for its logs"; fi
}
trap on_exit EXIT

finish() {
  echo "# $pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
