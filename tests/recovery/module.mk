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

# A hang leaves its dumps however the job ends next (tests/recovery/job-ends.sh):
# smaller, a replacement, below the minimum, ftcomm-run interrupted; about 45 s.
JOB_ENDS_SUITE := $(BUILD)/tests/recovery/job-ends
$(JOB_ENDS_SUITE): tests/recovery/job-ends.sh
	@mkdir -p $(dir $@)
	$(Q)printf '#!/bin/sh\nexec tests/recovery/job-ends.sh %s\n' '$(BUILD)' >$@ && chmod +x $@
TEST_BINS += $(JOB_ENDS_SUITE)
TEST_SUITES += $(JOB_ENDS_SUITE)

# The recovery benchmark's rank program (tests/bench/recovery/run.sh, part of
# `make bench`): built here with the recovery suite's other pieces.
BENCH_RECOVERY := $(BUILD)/bench/recovery_bench
$(BENCH_RECOVERY): $(BUILD)/obj/tests/bench/recovery/recovery_bench.o $(FTCOMM_A)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL) $(RUNTIME_LIBS)
# make bench builds it with the other benchmarks' programs.
bench-bins: $(BENCH_RECOVERY)
.PHONY: bench-recovery
bench-recovery: $(BENCH_RECOVERY) $(BUILD)/bin/ftcomm-run
	@BUILD=$(BUILD) tests/bench/recovery/run.sh
