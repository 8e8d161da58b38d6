#!/usr/bin/env bash
# dryrun.sh BUILD - tests/gpu/run.sh against the CPU test doubles of NCCL
# (2.32.3 and 2.26.5) and the CUDA runtime, so that the GPU script's logic
# (library search, build, version gate, kill/shrink/grow, fallback, report)
# keeps working where no GPU is. Its numbers mean nothing.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build/release}
D=$PWD/$BUILD/tests/nccl
tmp=$(mktemp -d /tmp/ftcomm-gpu-dry-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # check LOG PATTERN WHAT
  if grep -q -- "$2" "$1"; then echo "ok   $3"; else echo "FAIL $3 (no '$2')"; fail=1; fi
}
for v in 2.32.3 2.26.5; do
  log=$tmp/$v.log
  mkdir -p "$tmp/$v"
  NCCL_DOUBLE_DIR=$tmp/$v NCCL_GPU_BENCH_MAX_MIB=1 BUILD=$BUILD \
    FTCOMM_NCCL_LIBRARY=$D/libnccl_double_$v.so FTCOMM_CUDA_RUNTIME_LIBRARY=$D/libcudart_double.so \
    timeout 300 tests/gpu/run.sh >"$log" 2>&1
  rc=$?
  sed "s/^/  [$v] /" "$log"
  [ $rc -eq 0 ] && echo "ok   $v: run.sh exit 0" || { echo "FAIL $v: run.sh exit $rc"; fail=1; }
  check "$log" "NCCL $v" "$v: version printed"
  check "$log" "1 ranks: passed" "$v: 1 rank"
  check "$log" "ratio" "$v: busbw beside raw NCCL"
  check "$log" "public API: passed" "$v: the public API under ftcomm-run"
  check "$log" "== PyTorch: skipped, .* has no torch that sees a GPU" "$v: the PyTorch step says why it is skipped"
  if [ "$v" = 2.32.3 ]; then
    check "$log" "epoch 2: 3 ranks by shrink" "$v: 4 ranks, shrink after the kill"
    check "$log" "epoch 3: 4 ranks by grow" "$v: grow back"
    check "$log" "latency full-reinit" "$v: full re-init measured"
    check "$log" "recovery reinit" "$v: the fallback path run"
    check "$log" "epoch 2: 1 ranks by init" "$v: fallback re-inits after the kill"
  else
    check "$log" "one rank per GPU only" "$v: < 2.30 stays on one rank"
  fi
done
# Out of time: every step past the build is skipped, and the script still
# ends (in about its budget) with a report, and fails: nothing was checked.
log=$tmp/budget.log
mkdir -p "$tmp/budget"
t0=$SECONDS
NCCL_DOUBLE_DIR=$tmp/budget GPU_BUDGET_S=25 BUILD=$BUILD \
  FTCOMM_NCCL_LIBRARY=$D/libnccl_double_2.32.3.so FTCOMM_CUDA_RUNTIME_LIBRARY=$D/libcudart_double.so \
  timeout 120 tests/gpu/run.sh >"$log" 2>&1
rc=$? took=$((SECONDS - t0))
sed "s/^/  [budget 25s] /" "$log"
[ $rc -eq 1 ] && [ $took -le 35 ] && echo "ok   a 25 s budget: exit 1 in ${took}s" ||
  { echo "FAIL a 25 s budget: exit $rc in ${took}s"; fail=1; }
check "$log" "4 rank(s), recovery auto: skipped, out of time" "a 25 s budget: runs skipped"
check "$log" "public API: skipped, out of time" "a 25 s budget: the public API skipped"
check "$log" "0 failed run(s), 5 skipped for time" "a 25 s budget: the report counts them"
[ $fail -eq 0 ] && echo "gpu dry run: 3 passed, 0 failed" || echo "gpu dry run: failed"
exit $fail
