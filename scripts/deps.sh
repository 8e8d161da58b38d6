#!/usr/bin/env bash
# deps.sh - install what ftcomm needs to build and test, and nothing else.
# Silent and fast when everything is present (make deps runs it every time).
#   scripts/deps.sh          everything: build, tests, benchmarks
#   scripts/deps.sh build    only what building the libraries and tools needs
#                            (container images use this: make deps DEPS=build)
#   Debian packages: compilers' libraries (libcurl, libwebsockets, jansson,
#     libyaml, cmocka), test and benchmark peers (Open MPI, Gloo), tools.
#   PyPI wheels nvidia-nccl-cu13 and nvidia-cuda-runtime into $DEPS_PREFIX
#     (default .deps/) for nccl.h and the CUDA headers; nothing system-wide.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS_PREFIX=${DEPS_PREFIX:-$PWD/.deps}

mode=${1:-all}
case "$mode" in
  all | build) ;;
  *) echo "deps.sh: unknown mode '$mode'; use 'all' (default) or 'build'" >&2; exit 2 ;;
esac

DEB_PACKAGES=(
  build-essential pkg-config python3 python3-pip
  libcurl4-openssl-dev libwebsockets-dev libjansson-dev libyaml-dev
)
if [ "$mode" = all ]; then
  DEB_PACKAGES+=(
    libcmocka-dev valgrind
    libopenmpi-dev openmpi-bin libgloo-dev
    chromium
    python3-matplotlib
  )
fi

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "deps: installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
    { echo "deps: apt-get install ${missing[*]} failed" >&2; exit 1; }
fi

# NCCL and CUDA runtime headers and libraries from PyPI, into a local prefix.
# nccl.h includes cuda_runtime.h, which needs the crt/ headers (nvidia-cuda-crt)
# and nv/target (nvidia-cuda-cccl) since CUDA 13; all four land in nvidia/cu13.
NCCL_H="$DEPS_PREFIX/py/nvidia/nccl/include/nccl.h"
if [ ! -f "$NCCL_H" ] || ! ls "$DEPS_PREFIX"/py/nvidia/*/include/cuda_runtime_api.h >/dev/null 2>&1 ||
   ! ls "$DEPS_PREFIX"/py/nvidia/*/include/crt/host_config.h >/dev/null 2>&1 ||
   ! ls "$DEPS_PREFIX"/py/nvidia/*/include/nv/target >/dev/null 2>&1; then
  echo "deps: installing nvidia-nccl-cu13, nvidia-cuda-runtime, -crt and -cccl into $DEPS_PREFIX/py"
  mkdir -p "$DEPS_PREFIX/py"
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --upgrade \
    --target "$DEPS_PREFIX/py" nvidia-nccl-cu13 nvidia-cuda-runtime nvidia-cuda-crt nvidia-cuda-cccl
fi
