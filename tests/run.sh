#!/usr/bin/env bash
# run.sh - run test suites, each in bounded time, and print one closing line.
#   tests/run.sh SUITE...    a suite is an executable (cmocka binary or script);
#                            it passes when it exits 0.
# FTC_TEST_FILTER=REGEX runs only the suites whose path matches.
# FTC_SUITE_TIMEOUT (seconds, default 900) bounds each suite.
set -u
cd "$(dirname "$0")/.."
logdir=${FTC_TEST_LOGS:-build/test-logs}
mkdir -p "$logdir"
limit=${FTC_SUITE_TIMEOUT:-900}
pass=0 fail=0 failed=()
for suite in "$@"; do
  if [ -n "${FTC_TEST_FILTER:-}" ] && ! [[ $suite =~ $FTC_TEST_FILTER ]]; then continue; fi
  name=$(echo "$suite" | tr '/ ' '__')
  log="$logdir/$name.log"
  start=$(date +%s%N)
  timeout -k 10 "$limit" "$suite" >"$log" 2>&1 </dev/null
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  if [ $rc -eq 0 ]; then
    pass=$((pass + 1))
    printf 'PASS  %-50s %6ss\n' "$suite" "$secs"
  else
    fail=$((fail + 1))
    failed+=("$suite")
    [ $rc -eq 124 ] && why=" (timed out after ${limit}s)" || why=" (exit $rc)"
    printf 'FAIL  %-50s %6ss%s\n' "$suite" "$secs" "$why"
    sed 's/^/      | /' "$log" | tail -n 40
  fi
done
echo
for f in "${failed[@]}"; do echo "failed: $f (log: $logdir/$(echo "$f" | tr '/ ' '__').log)"; done
echo "tests: $pass passed, $fail failed"
[ $fail -eq 0 ]
