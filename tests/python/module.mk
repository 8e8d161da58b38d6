# tests/python/ - the PyTorch binding (runtime/python) under a real torch:
# pytest drives jobs of ftcomm-run whose ranks compare every op with gloo's
# result in the same processes, train DDP and FSDP2 models, and check errors.
ifeq ($(SANITIZE),)
PY_SUITE := $(BUILD)/tests/python/run_python
$(PY_SUITE): tests/python/run.sh
	@mkdir -p $(dir $@)
	$(Q)printf '#!/bin/sh\nexec tests/python/run.sh %s\n' '$(BUILD)' >$@ && chmod +x $@

# ftcomm.Manager's training under kill -9, SIGSTOP and replacements
# (test_fault_training.py): 6 jobs of about a minute each.
PY_FAULT_SUITE := $(BUILD)/tests/python/run_python_faults
$(PY_FAULT_SUITE): tests/python/run.sh
	@mkdir -p $(dir $@)
	$(Q)printf '#!/bin/sh\nFTC_PY_TESTS=tests/python/test_fault_training.py FTC_PY_SUITE_LIMIT=$${FTC_PY_SUITE_LIMIT:-1080} exec tests/python/run.sh %s -v\n' '$(BUILD)' >$@ && chmod +x $@

TEST_BINS += $(PY_EXT_STAMP) $(PY_SUITE) $(PY_FAULT_SUITE) $(BUILD)/bin/ftcomm-run
TEST_SUITES += $(PY_SUITE) $(PY_FAULT_SUITE)
endif
