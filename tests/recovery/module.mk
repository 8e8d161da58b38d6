# tests/recovery/ - recovery end to end: the example trainer under ftcomm-run
# with injected faults (kills at every rank position, two at once, during a
# recovery, a joiner killed while joining, a stopped rank, ten failures in a
# row, a coordinator restart, a wrong token, garbage at the coordinator).
# Each case is bounded by `timeout`; see docs/recovery.md.
RECOVERY_SUITE := $(BUILD)/tests/recovery/recovery
$(RECOVERY_SUITE): tests/recovery/recovery.sh
	@mkdir -p $(dir $@)
	$(Q)printf '#!/bin/sh\nexec tests/recovery/recovery.sh %s\n' '$(BUILD)' >$@ && chmod +x $@

TEST_BINS += $(RECOVERY_SUITE) $(BUILD)/bin/ftcomm-run $(BUILD)/bin/ftcomm-trainer $(BUILD)/bin/ftcomm-trace
TEST_SUITES += $(RECOVERY_SUITE)
