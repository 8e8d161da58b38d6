#!/usr/bin/env bash
# tests/bounded.sh LIMIT_S CMD [ARG...] - timeout(1) with a post-mortem: runs CMD in
# a process group of its own; if it is still running after LIMIT_S seconds, prints
# (to stderr) every thread's stack of every process in the group (gdb, where it is
# installed and may attach), then sends the group SIGTERM, and SIGKILL 5 s later.
# Exit status: CMD's, or 124 when the limit ended it (as timeout's).
#
# A hung case of a suite says nothing more than "it timed out" otherwise: the
# stacks show which wait never ended (a deadlock, a lost wake-up, a peer never
# answered), on the run that hung, which may not come again.
set -uo pipefail
limit=${1:-}
case $limit in '' | *[!0-9]*) echo "bounded.sh: LIMIT_S must be whole seconds, not '$limit' (usage: bounded.sh LIMIT_S CMD...)" >&2; exit 2 ;; esac
shift
[ $# -ge 1 ] || { echo "bounded.sh: no command (usage: bounded.sh LIMIT_S CMD...)" >&2; exit 2; }

setsid "$@" &
pid=$!
stacks() {
  local p
  echo "bounded.sh: '$1' still running after $limit s; its processes' stacks:" >&2
  for p in $(pgrep -g "$pid" | sort -n); do
    echo "--- pid $p: $(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-200)" >&2
    if command -v gdb >/dev/null; then
      timeout 20 gdb -p "$p" -batch -nx -q -ex "thread apply all bt 30" 2>/dev/null |
        grep -E '^(Thread |#)' >&2
    else
      echo "(no gdb here: kernel stacks only)" >&2
      for t in /proc/"$p"/task/*; do
        echo "thread ${t##*/} $(cat "$t"/comm 2>/dev/null): $(cat "$t"/wchan 2>/dev/null)" >&2
      done
    fi
  done
}
expired=$(mktemp)
rm -f "$expired"
(
  trap 'kill "$s" 2>/dev/null; exit 0' TERM
  sleep "$limit" &
  s=$!
  wait "$s"
  kill -0 "$pid" 2>/dev/null || exit 0
  stacks "$1"
  touch "$expired"
  kill -TERM -- "-$pid" 2>/dev/null
  sleep 5 &
  s=$!
  wait "$s"
  kill -KILL -- "-$pid" 2>/dev/null
) </dev/null &
watcher=$!
wait "$pid"
rc=$?
kill "$watcher" 2>/dev/null
wait "$watcher" 2>/dev/null
if [ -e "$expired" ]; then
  rm -f "$expired"
  exit 124
fi
exit "$rc"
