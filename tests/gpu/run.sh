#!/usr/bin/env bash
# tests/gpu/run.sh - the NCCL backend on a GPU machine with the NCCL and CUDA
# runtime that machine's image ships (PyTorch's wheels or a system install;
# the 300 MB libnccl of `make deps` does not travel with the tree). Finishes
# within 8 minutes.
#
#   tests/gpu/run.sh            build, print the NCCL version, then:
#     1 rank        init, allreduce correctness, busbw of ftcomm beside raw NCCL
#     NCCL >= 2.30  2 and 4 ranks on the one GPU (NCCL_MULTI_RANK_GPU_ENABLE=1):
#                   the same, then kill the last rank, shrink (or the fallback
#                   the version allows), grow a replacement back, and a full
#                   re-init for comparison, with their latencies; then 2 ranks
#                   again with FTCOMM_NCCL_RECOVERY=reinit (the fallback path)
#     public API    ftcomm-run with FTCOMM_BACKEND=nccl and device memory
#     PyTorch       the ftcomm package built against the image's torch, then
#                   CUDA-tensor collectives and DDP over the NCCL path
#                   (tests/gpu/torch_ddp.py; skipped when its Python has no
#                   torch with CUDA: GPU_TORCH_PYTHON names another)
#
# Headers: nccl.h and the CUDA runtime headers from .deps/py (carried with
# the tree: .deps/py/nvidia/nccl/include and .deps/py/nvidia/cu13/include,
# about 31 MiB), else from the image (site-packages or /usr/local/cuda).
# Libraries: FTCOMM_NCCL_LIBRARY / FTCOMM_CUDA_RUNTIME_LIBRARY when set, else
# found here. Exit status: 0 when every correctness check ran and passed
# (one skipped because the 8 minutes ran out is not a pass).
set -uo pipefail
cd "$(dirname "$0")/../.."
start=$SECONDS
budget=${GPU_BUDGET_S:-470} # seconds, under the 8 minutes (smaller only to test the bounds)
BUILD=${BUILD:-build/gpu}
out=$(mktemp -d /tmp/ftcomm-gpu-XXXXXX)
trap 'rm -rf "$out"' EXIT
left() { echo $((budget - (SECONDS - start))); }
say() { printf '%s\n' "$*"; }

py_dirs() {
  # site-packages directories of the image's Python (PyTorch's wheels live there)
  python3 - 2>/dev/null <<'EOF'
import site, sys
for d in site.getsitepackages() + [site.getusersitepackages()]:
    print(d)
EOF
}

find_first() { # find_first PATTERN... : the first existing file
  local p
  for p in "$@"; do
    for f in $p; do [ -e "$f" ] && { echo "$f"; return 0; }; done
  done
  return 1
}

sp=$(py_dirs | tr '\n' ' ')
nccl_cands=() rt_cands=() inc_nccl=() inc_cuda=()
for d in $sp; do
  nccl_cands+=("$d/nvidia/nccl/lib/libnccl.so.2" "$d/torch/lib/libnccl.so.2" "$d/torch/lib/libnccl*.so*")
  rt_cands+=("$d/nvidia/cu13/lib/libcudart.so.13" "$d/nvidia/cuda_runtime/lib/libcudart.so.1[23]"
             "$d/torch/lib/libcudart*.so*")
  inc_nccl+=("$d/nvidia/nccl/include")
  inc_cuda+=("$d/nvidia/cu13/include" "$d/nvidia/cuda_runtime/include")
done
sys_nccl=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
sys_rt=$(ldconfig -p 2>/dev/null | awk '/libcudart\.so\.1[0-9.]* /{print $NF; exit}')
NCCL_LIB=${FTCOMM_NCCL_LIBRARY:-$(find_first "${nccl_cands[@]}" $sys_nccl /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/local/cuda/lib64/libnccl.so.2)}
RT_LIB=${FTCOMM_CUDA_RUNTIME_LIBRARY:-$(find_first "${rt_cands[@]}" $sys_rt /usr/local/cuda/lib64/libcudart.so.1[23] /usr/local/cuda/lib64/libcudart.so)}
if [ -z "$NCCL_LIB" ] || [ -z "$RT_LIB" ]; then
  say "gpu: no NCCL (${NCCL_LIB:-not found}) or CUDA runtime (${RT_LIB:-not found}) on this machine;"
  say "     set FTCOMM_NCCL_LIBRARY and FTCOMM_CUDA_RUNTIME_LIBRARY"
  exit 1
fi
export FTCOMM_NCCL_LIBRARY=$NCCL_LIB FTCOMM_CUDA_RUNTIME_LIBRARY=$RT_LIB

# Headers: the tree's 2.32 headers first (what the backend is written against).
has_cuda_inc() { [ -f "$1/cuda_runtime.h" ] && [ -f "$1/crt/host_config.h" ] && [ -e "$1/nv/target" ]; }
NCCL_INCLUDE= CUDA_INCLUDE=
for d in .deps/py/nvidia/nccl/include "${inc_nccl[@]}" /usr/include /usr/local/cuda/include; do
  [ -f "$d/nccl.h" ] && { NCCL_INCLUDE=$d; break; }
done
for d in .deps/py/nvidia/cu13/include "${inc_cuda[@]}" /usr/local/cuda/include; do
  has_cuda_inc "$d" && { CUDA_INCLUDE=$d; break; }
done
if [ -z "$NCCL_INCLUDE" ] || [ -z "$CUDA_INCLUDE" ]; then
  say "gpu: no nccl.h (${NCCL_INCLUDE:-not found}) or CUDA headers (${CUDA_INCLUDE:-not found});"
  say "     carry .deps/py/nvidia/nccl/include and .deps/py/nvidia/cu13/include with the tree"
  exit 1
fi

say "== build ($BUILD) against $NCCL_INCLUDE/nccl.h and $CUDA_INCLUDE"
if ! timeout -k 5 200 make -j"$(nproc)" --no-print-directory BUILD="$BUILD" NCCL_INCLUDE="$NCCL_INCLUDE" \
    CUDA_INCLUDE="$CUDA_INCLUDE" "$BUILD/tests/gpu/nccl_gpu" >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log"
  say "gpu: build failed"
  exit 1
fi
PROG=$BUILD/tests/gpu/nccl_gpu

say "== library"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/  gpu: /'
info=$(FTCOMM_LOG_LEVEL=info timeout -k 5 60 "$PROG" --version 2>&1) || { say "$info"; say "gpu: cannot load $NCCL_LIB"; exit 1; }
say "$info" | sed 's/^/  /'
code=$(sed -n 's/.*version code \([0-9]*\).*/\1/p' <<<"$info" | tail -1)
devices=$(sed -n 's/.*; \([0-9]*\) device(s).*/\1/p' <<<"$info" | tail -1)
if [ "${devices:-0}" -lt 1 ]; then say "gpu: the CUDA runtime sees no GPU"; exit 1; fi

fails=0 skipped=0 # a check skipped for time has not passed: the exit status says so
run() { # run NRANKS [RECOVERY]: RECOVERY forces FTCOMM_NCCL_RECOVERY (e.g. reinit)
  local n=$1 rec=${2:-auto} t d
  t=$(left)
  [ "$t" -gt 150 ] && t=150
  if [ "$t" -lt 30 ]; then say "== $n rank(s), recovery $rec: skipped, out of time"; skipped=$((skipped + 1)); return; fi
  say "== $n rank(s), recovery $rec (limit ${t}s)"
  d="$out/r$n-$rec"
  mkdir -p "$d"
  if ! timeout -k 5 "$t" env NCCL_DEBUG=${NCCL_DEBUG:-WARN} FTCOMM_NCCL_RECOVERY="$rec" \
      "$PROG" "$n" "$d"; then
    say "  $n rank(s): FAILED or timed out"
    fails=$((fails + 1))
  fi
  for f in init shrink reinit-after-loss grow reinit-join full-reinit; do
    [ -f "$d/lat-$f" ] && printf '  latency %-18s %8s ms\n' "$f" "$(cat "$d/lat-$f")"
  done
}

run 1
if [ "${code:-0}" -ge 23000 ]; then
  export NCCL_MULTI_RANK_GPU_ENABLE=1
  run 2
  run 4
  run 2 reinit # the fallback path of older libraries, on this one
else
  say "== NCCL $code < 2.30: one rank per GPU only; kill/shrink/grow need a second GPU here"
fi
# The public API on this GPU: ftcomm-run, FTCOMM_BACKEND=nccl, device memory.
# Needs libwebsockets and jansson (the coordinator); skipped where they lack.
# Both steps are bounded by what is left of the budget (the build by at most
# 120 s, the run by at most 90 s), so the script ends within 8 minutes.
api_ranks=1
[ "${code:-0}" -ge 23000 ] && api_ranks=2
cap() { local t=$(($(left) - $2)); [ "$t" -gt "$1" ] && t=$1; echo "$t"; }
if [ "$(left)" -lt 60 ]; then
  say "== public API: skipped, out of time"
  skipped=$((skipped + 1))
elif ! timeout -k 5 "$(cap 120 40)" make -j"$(nproc)" --no-print-directory BUILD="$BUILD" NCCL_INCLUDE="$NCCL_INCLUDE" \
    CUDA_INCLUDE="$CUDA_INCLUDE" "$BUILD/bin/ftcomm-run" "$BUILD/tests/nccl/api_probe" >"$out/api-build.log" 2>&1; then
  say "== public API: skipped (ftcomm-run does not build here: $(grep -m1 -i 'error' "$out/api-build.log" || echo 'out of time'))"
elif [ "$(cap 90 5)" -lt 20 ]; then
  say "== public API: skipped, out of time after its build"
  skipped=$((skipped + 1))
else
  t=$(cap 90 5)
  say "== public API: $api_ranks rank(s) under ftcomm-run, FTCOMM_BACKEND=nccl (limit ${t}s)"
  if FTCOMM_BACKEND=nccl FTCOMM_CONNECT_TIMEOUT_MS=60000 timeout -k 5 "$t" "$BUILD/bin/ftcomm-run" -q -n "$api_ranks" \
      --timeout $((t - 5)) -- "$BUILD/tests/nccl/api_probe" expect-nccl >"$out/api.log" 2>&1; then
    grep -m1 "backend:" "$out/api.log" | sed 's/^/  /'
    say "  public API: passed"
  else
    sed 's/^/  | /' "$out/api.log" | tail -20
    say "  public API: FAILED"
    fails=$((fails + 1))
  fi
fi
# PyTorch: CUDA tensors and DDP on the ftcomm backend over the NCCL path
# (tests/gpu/torch_ddp.py), with the image's torch (GPU_TORCH_PYTHON, else
# python3); the package is built against it into $BUILD/python. A machine
# whose Python has no torch with CUDA says so and skips it (not a failure).
TPY=${GPU_TORCH_PYTHON:-python3}
if ! "$TPY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  say "== PyTorch: skipped, $TPY has no torch that sees a GPU (set GPU_TORCH_PYTHON)"
elif [ "$(left)" -lt 90 ]; then
  say "== PyTorch: skipped, out of time"
  skipped=$((skipped + 1))
elif ! timeout -k 5 "$(cap 240 60)" make -j"$(nproc)" --no-print-directory BUILD="$BUILD" NCCL_INCLUDE="$NCCL_INCLUDE" \
    CUDA_INCLUDE="$CUDA_INCLUDE" TORCH_PY="$(command -v "$TPY")" "$BUILD/bin/ftcomm-run" python >"$out/torch-build.log" 2>&1; then
  tail -20 "$out/torch-build.log" | sed 's/^/  | /'
  say "== PyTorch: the package did not build against $TPY"
  fails=$((fails + 1))
elif [ "$(cap 120 5)" -lt 30 ]; then
  say "== PyTorch: skipped, out of time after its build"
  skipped=$((skipped + 1))
else
  t=$(cap 120 5)
  say "== PyTorch: CUDA-tensor collectives and DDP, $api_ranks rank(s), FTCOMM_BACKEND=nccl (limit ${t}s)"
  if FTCOMM_BACKEND=nccl FTCOMM_CONNECT_TIMEOUT_MS=60000 PYTHONPATH="$PWD/$BUILD/python" timeout -k 5 "$t" \
      "$BUILD/bin/ftcomm-run" -q -n "$api_ranks" --timeout $((t - 5)) -- "$TPY" tests/gpu/torch_ddp.py \
      >"$out/torch.log" 2>&1 && [ "$(grep -c 'PASS torch-cuda' "$out/torch.log")" -eq "$api_ranks" ]; then
    grep 'PASS torch-cuda' "$out/torch.log" | sed 's/^/  /'
    say "  PyTorch: passed"
  else
    sed 's/^/  | /' "$out/torch.log" | tail -30
    say "  PyTorch: FAILED"
    fails=$((fails + 1))
  fi
fi
say "== done in $((SECONDS - start))s: $fails failed run(s), $skipped skipped for time; busbw target: ftcomm >= 97% of raw NCCL at >= 1 MiB (ratio column)"
[ $fails -eq 0 ] && [ $skipped -eq 0 ]
