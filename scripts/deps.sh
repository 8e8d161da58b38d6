#!/usr/bin/env bash
# deps.sh - install what ftcomm needs to build and test, and nothing else.
# Silent and fast when everything is present (make deps runs it every time).
#   scripts/deps.sh          everything: build, tests, benchmarks
#   scripts/deps.sh build    only what building the libraries and tools needs
#                            (container images use this: make deps DEPS=build)
#   Debian packages: compilers' libraries (libcurl, libwebsockets, jansson,
#     libyaml, cmocka), test and benchmark peers (Open MPI, Gloo), tools
#     (iproute2: the network namespaces of tests/net).
#   PyPI wheels nvidia-nccl-cu13 and nvidia-cuda-runtime into $DEPS_PREFIX
#     (default .deps/) for nccl.h and the CUDA headers; nothing system-wide.
#   (all) A Python virtual environment with torch for the PyTorch binding's
#     tests (runtime/python), cached like the control plane's binaries:
#     ${FTC_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ftcomm/torch-2.15.0}.
#     The first install pulls about 5.4 GB of wheels; later runs only check it.
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
  libcurl4-openssl-dev libwebsockets-dev libjansson-dev libyaml-dev libssl-dev zlib1g-dev
)
if [ "$mode" = all ]; then
  DEB_PACKAGES+=(
    libcmocka-dev valgrind
    libopenmpi-dev openmpi-bin libgloo-dev
    chromium
    python3-matplotlib
    python3-venv python3-dev
    iproute2
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

# torch for the binding's tests: a virtual environment of its own (torch pins its
# CUDA wheels; nothing else on the machine should see them). The check reads the
# installed distributions' metadata only, so a present environment costs ~0.1 s.
[ "$mode" = all ] || exit 0
TORCH_VENV=${FTC_TORCH_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ftcomm/torch-2.15.0}
TORCH_REQS=(torch==2.15.0 ninja pytest torchft==0.2.0)
venv_ok() {
  [ -x "$TORCH_VENV/bin/python" ] && "$TORCH_VENV/bin/python" - "${TORCH_REQS[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version, PackageNotFoundError
for req in sys.argv[1:]:
    name, _, want = req.partition("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        sys.exit(1)
    if want and have.split("+")[0] != want:
        sys.exit(1)
PY
}
if ! venv_ok; then
  mkdir -p "$(dirname "$TORCH_VENV")"
  # One install at a time per environment (make test and make bench may both ask).
  exec 8>"$TORCH_VENV.lock"
  flock -w 3600 8 || { echo "deps: timed out waiting for another install of $TORCH_VENV" >&2; exit 1; }
  if ! venv_ok; then
    echo "deps: installing ${TORCH_REQS[*]} into $TORCH_VENV (about 5.4 GB, once)"
    [ -x "$TORCH_VENV/bin/python" ] || python3 -m venv "$TORCH_VENV" ||
      { echo "deps: python3 -m venv $TORCH_VENV failed (is python3-venv installed?)" >&2; exit 1; }
    "$TORCH_VENV/bin/python" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
      "${TORCH_REQS[@]}" ||
      { echo "deps: pip install ${TORCH_REQS[*]} into $TORCH_VENV failed" >&2; exit 1; }
    venv_ok || { echo "deps: $TORCH_VENV still lacks one of ${TORCH_REQS[*]} after pip install" >&2; exit 1; }
  fi
  exec 8>&-
fi
