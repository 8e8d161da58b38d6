# runtime/python/ - the PyTorch package ftcomm (the torch.distributed backend).
#
#   make python     build it into $(BUILD)/python against the cached torch
#                   environment (scripts/deps.sh makes it), for the tests:
#                   PYTHONPATH=$(BUILD)/python
# Into an environment of your own: pip install --no-build-isolation runtime/python
# (docs/pytorch.md). Not under SANITIZE: the extension would need the
# sanitizer's runtime preloaded into Python.
TORCH_VENV ?= $(or $(FTC_TORCH_VENV),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ftcomm/torch-2.15.0)
TORCH_PY := $(TORCH_VENV)/bin/python
PY_PKG_DIR := $(BUILD)/python
PY_EXT_STAMP := $(PY_PKG_DIR)/ftcomm/.built
PY_SRCS := runtime/python/setup.py $(wildcard runtime/python/ftcomm/*.py runtime/python/ftcomm/csrc/*)

$(PY_EXT_STAMP): $(PY_SRCS) $(FTCOMM_A) runtime/include/ftcomm.h
	@test -x $(TORCH_PY) || { echo "runtime/python: no torch environment at $(TORCH_VENV): run 'make deps' (or set FTC_TORCH_VENV)" >&2; exit 1; }
	@mkdir -p $(PY_PKG_DIR)
	$(say) PY runtime/python
	$(Q)cd runtime/python && MAX_JOBS=2 FTCOMM_BUILD_DIR=$(abspath $(BUILD)) \
	  $(TORCH_PY) setup.py -q build --build-base $(abspath $(BUILD))/python-build \
	  --build-lib $(abspath $(PY_PKG_DIR)) >$(abspath $(BUILD))/python-build.log 2>&1 || \
	  { grep -E 'error|Error' $(abspath $(BUILD))/python-build.log | head -40 >&2; \
	    echo "runtime/python: build failed; the whole log: $(BUILD)/python-build.log" >&2; exit 1; }
	$(Q)touch $@

.PHONY: python
python: $(PY_EXT_STAMP)
