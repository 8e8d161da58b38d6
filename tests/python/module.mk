# tests/python/ - the PyTorch binding (runtime/python) under a real torch:
# pytest drives jobs of ftcomm-run whose ranks compare every op with gloo's
# result in the same processes, train DDP and FSDP2 models, and check errors.
ifeq ($(SANITIZE),)
PY_SUITE := $(BUILD)/tests/python/run_python
$(PY_SUITE): tests/python/run.sh
	@mkdir -p $(dir $@)
	$(Q)printf '#!/bin/sh\nexec tests/python/run.sh %s\n' '$(BUILD)' >$@ && chmod +x $@

TEST_BINS += $(PY_EXT_STAMP) $(PY_SUITE) $(BUILD)/bin/ftcomm-run
TEST_SUITES += $(PY_SUITE)
endif
