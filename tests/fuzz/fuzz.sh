#!/usr/bin/env bash
# fuzz.sh - libFuzzer campaigns over the targets of tests/fuzz (make fuzz).
#   tests/fuzz/fuzz.sh --deps       install clang and its fuzzer runtime
#                                   (Debian: clang-14, libclang-rt-14-dev) if missing
#   tests/fuzz/fuzz.sh TARGET...    run build/fuzz/bin/fuzz_TARGET for FUZZ_SECONDS
#                                   (default 60) each, FUZZ_JOBS (default 1) at a
#                                   time, under nice 19
# Each campaign starts from the checked-in corpus (tests/fuzz/corpus/TARGET,
# never written) and keeps what it learns in build/fuzz/corpus/TARGET; a
# crash, leak or failed check is saved as build/fuzz/crashes/TARGET-crash-*
# and fails the run. Prints one line per target: executions, corpus, result.
# To keep a crasher as a regression test, minimize it
#   build/fuzz/bin/fuzz_TARGET -minimize_crash=1 -runs=10000 CRASH
# and copy it into tests/fuzz/corpus/TARGET/ (make test runs it).
set -u
cd "$(dirname "$0")/../.."

if [ "${1:-}" = --deps ]; then
  clang=${FUZZ_CLANG:-clang-14}
  if command -v "$clang" >/dev/null &&
     [ -f "$("$clang" -print-runtime-dir 2>/dev/null)/libclang_rt.fuzzer-x86_64.a" ]; then
    exit 0
  fi
  echo "fuzz: installing clang-14 and libclang-rt-14-dev (libFuzzer)"
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq &&
    $SUDO apt-get install -y -qq --no-install-recommends clang-14 libclang-rt-14-dev >/dev/null 2>&1 ||
    { echo "fuzz: apt-get install clang-14 libclang-rt-14-dev failed" >&2; exit 1; }
  exit 0
fi

secs=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
out=build/fuzz
mkdir -p "$out/crashes" "$out/logs"
[ $# -gt 0 ] || set -- proto hello env trace jobspec fault log coord

run_one() {
  local t=$1 bin=$out/bin/fuzz_$1 log=$out/logs/$1.log
  mkdir -p "$out/corpus/$t"
  # -rss_limit_mb: the dump reader holds a whole file; the default is fine.
  nice -n 19 timeout -k 10 $((secs + 120)) "$bin" -max_total_time="$secs" -print_final_stats=1 \
    -timeout=10 -max_len=65536 -artifact_prefix="$out/crashes/$t-" \
    "$out/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1
  echo $? >"$log.rc"
}

pids=()
for t in "$@"; do
  [ -x "$out/bin/fuzz_$t" ] || { echo "fuzz: $out/bin/fuzz_$t is not built (make fuzz-bins)" >&2; exit 2; }
  run_one "$t" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
done
wait

fail=0
for t in "$@"; do
  log=$out/logs/$t.log
  rc=$(cat "$log.rc" 2>/dev/null || echo '?')
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  corp=$(ls "$out/corpus/$t" | wc -l)
  if [ "$rc" = 0 ]; then
    printf 'fuzz %-8s %10s execs in %ss, %s, %s corpus files: no crash\n' "$t" "${execs:-?}" "$secs" "${cov:-cov: ?}" "$corp"
  else
    fail=1
    art=$(grep -o "Test unit written to [^ ]*" "$log" | tail -1 | sed 's/Test unit written to //')
    printf 'fuzz %-8s %10s execs, FAILED (exit %s): %s\n' "$t" "${execs:-?}" "$rc" "${art:-see $log}"
    grep -m3 -E 'ERROR: |fuzz check failed|runtime error' "$log" | sed 's/^/      | /'
  fi
done
exit $fail
