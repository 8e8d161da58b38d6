# lib.sh - shared by the controller's integration suites: checks that count
# passes and failures, and a real control plane from tests/cluster/cluster.sh
# started for this suite (stopped on exit). Source it; then call start_cluster.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cluster=$root/tests/cluster/cluster.sh
build=$root/${FTC_BUILD_DIR:-build/release}  # FTC_BUILD_DIR=build/address runs the sanitized binaries
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }
check() {  # check DESC CMD...: CMD exits 0
  local desc=$1; shift
  local out
  if out=$("$@" 2>&1); then ok "$desc"; else bad "$desc"; echo "$out" | tail -20 | sed 's/^/       /'; fi
}
check_out() {  # check_out DESC REGEX CMD...: CMD's output (stdout+stderr) matches REGEX
  local desc=$1 re=$2; shift 2
  local out
  out=$("$@" 2>&1)
  if [[ $out =~ $re ]]; then ok "$desc"; else bad "$desc (wanted /$re/)"; echo "$out" | tail -20 | sed 's/^/       /'; fi
}
eventually() {  # eventually SECONDS CMD...: retry CMD every 0.2 s until it exits 0
  local limit=$1; shift
  local end=$(( $(date +%s) + limit ))
  while ! "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -ge "$end" ] && return 1
    sleep 0.2
  done
}
kc() { timeout 30 "$FTC_KUBECTL" "$@"; }

finish() {
  echo "# $pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}

start_cluster() {
  [ -x "$cluster" ] || { echo "FAIL - tests/cluster/cluster.sh is missing"; exit 1; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/ftck-$(basename "$0" .sh).XXXXXX")
  dir=$work/cluster
  trap 'on_exit' EXIT
  timeout 3600 "$root/tests/cluster/build.sh" >/dev/null || { echo "FAIL - building the control plane"; exit 1; }
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
  [ -n "${ctrl_pid:-}" ] && kill "$ctrl_pid" 2>/dev/null && wait "$ctrl_pid" 2>/dev/null
  "$cluster" stop "$dir" >/dev/null 2>&1 || true
  if [ "$fail" -eq 0 ] && [ $rc -eq 0 ]; then rm -rf "$work"; else echo "# kept $work for its logs"; fi
}
