#!/usr/bin/env bash
# The complete training loop of docs/api.md ("A complete training loop"), as
# the page shows it: it compiles with the project's warnings against the
# installed-style header and the shared library of this build, its result
# on 3 ranks matches the 1-rank run, and with a rank killed mid-training
# and replaced (ftcomm-run --replace) every rank, the replacement included,
# ends at the last step with the same parameters as the failure-free run.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/release}
BIN=$BUILD/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The block after the heading, up to its closing fence.
awk '/^## A complete training loop/ {sec = 1} sec && /^```c$/ {on = 1; next}
     on && /^```$/ {exit} on {print}' docs/api.md >"$tmp/loop.c"
[ "$(wc -l <"$tmp/loop.c")" -gt 40 ] || { echo "no C block under '## A complete training loop' in docs/api.md"; exit 1; }
${CC:-cc} -std=gnu11 -Wall -Wextra -Wshadow -Wstrict-prototypes -Werror -O2 -Iruntime/include \
  -o "$tmp/loop" "$tmp/loop.c" -L"$BUILD/lib" -lftcomm -Wl,-rpath,"$PWD/$BUILD/lib"
echo "ok   docs/api.md's loop compiles ($(wc -l <"$tmp/loop.c") lines) and links against $BUILD/lib/libftcomm.so"
run() { # name ranks args...
  local name=$1 n=$2; shift 2
  if ! timeout 120 "$BIN/ftcomm-run" -q -n "$n" --job "api-loop-$name" --dump-dir "$tmp/dumps" "$@" \
      >"$tmp/$name.out" 2>&1; then
    echo "FAIL $name: ftcomm-run exited non-zero"; sed 's/^/    | /' "$tmp/$name.out" | tail -n 30; exit 1
  fi
}
finals() { grep -o 'final: rank [0-9]*/[0-9]* step [0-9]* w .*' "$tmp/$1.out" | sed 's/rank [0-9]*\/[0-9]* //' | sort -u; }
run serial 1 -- "$tmp/loop" 400
run three 3 -- "$tmp/loop" 400
run killed 3 --min-size 2 --replace --replace-delay 0 --inject kill:1@40 -- "$tmp/loop" 400 10
ref=$(finals serial)
[ "$(grep -c '^final' <<<"$ref")" = 1 ] && grep -q "step 400 " <<<"$ref" || { echo "FAIL serial: $ref"; exit 1; }
for name in three killed; do
  got=$(finals "$name")
  [ "$(wc -l <<<"$got")" = 1 ] || { echo "FAIL $name: ranks ended differently:"; echo "$got"; exit 1; }
  ranks=$(grep -c 'final: rank' "$tmp/$name.out")
  [ "$ranks" = 3 ] || { echo "FAIL $name: $ranks final lines, want 3"; sed 's/^/    | /' "$tmp/$name.out" | tail -n 20; exit 1; }
  # The same sums in another order: equal to the serial run within 1e-9.
  awk -v a="$got" -v b="$ref" -v name="$name" 'BEGIN {
    na = split(a, x, " "); split(b, y, " ")
    for (i = 4; i <= na; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-9 * (y[i] < 0 ? -y[i] : y[i]) + 1e-12) {
      printf "FAIL %s: %s\n  serial: %s\n", name, a, b; exit 1 } }
    printf "ok   %s: every rank ends with %s (serial %s)\n", name, a, b }'
done
grep -q 'step [0-9]* failed' "$tmp/killed.out" || { echo "FAIL killed: no rank saw the failure"; exit 1; }
grep -q 'restarting it as a joiner\|as a joiner' "$tmp/killed.out" ||
  { echo "FAIL killed: no replacement started"; sed 's/^/    | /' "$tmp/killed.out" | tail -n 20; exit 1; }
echo "ok   killed: the killed rank's replacement got the state and finished with the others"
