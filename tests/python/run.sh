#!/usr/bin/env bash
# tests/python/run.sh BUILD - the PyTorch binding's suite: pytest under the
# cached torch environment, with the package built into BUILD/python
# (make python), bounded as a whole.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/release}
[ $# -gt 0 ] && shift
venv=${FTC_TORCH_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ftcomm/torch-2.15.0}
[ -x "$venv/bin/python" ] || { echo "tests/python: no torch environment at $venv: run make deps" >&2; exit 1; }
[ -f "$build/python/ftcomm/.built" ] || { echo "tests/python: $build/python has no ftcomm package: run make python" >&2; exit 1; }
export FTC_BUILD=$build PYTHONPATH=$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}
# The ranks share 2 cores with everything else: one intra-op thread each.
export OMP_NUM_THREADS=1
# FTC_PY_TESTS: what pytest runs (the fault-tolerant training's fault tests are
# a suite of their own: run_python_faults, tests/python/module.mk).
tests=${FTC_PY_TESTS:-tests/python --ignore=tests/python/test_fault_training.py}
# shellcheck disable=SC2086
exec tests/bounded.sh "${FTC_PY_SUITE_LIMIT:-840}" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider $tests "$@"
