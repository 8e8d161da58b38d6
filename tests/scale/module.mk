# tests/scale/ - the member simulator (coord_sim: thousands of real sessions
# against the real coordinator in a child process) and the scale benchmark
# built on it (`make bench-scale`, part of `make bench`; docs/scale.md).
# make test runs it small, as a behaviour test: every member sees every
# epoch it should (not a timing test).
SCALE_SIM := $(BUILD)/tests/scale/coord_sim
$(BUILD)/obj/tests/scale/coord_sim.o: CPPFLAGS_ALL += $(RUNTIME_INTERNAL_CPPFLAGS)
$(SCALE_SIM): $(BUILD)/obj/tests/scale/coord_sim.o $(COORD_LIB_OBJS) $(COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL) -lwebsockets -ljansson -lz

SCALE_SUITE := $(BUILD)/tests/scale/sim_small
$(SCALE_SUITE): tests/scale/sim_small.sh
	@mkdir -p $(dir $@)
	$(Q)printf '#!/bin/sh\nexec tests/scale/sim_small.sh %s\n' '$(BUILD)' >$@ && chmod +x $@

TEST_BINS += $(SCALE_SIM) $(SCALE_SUITE)
TEST_SUITES += $(SCALE_SUITE)

.PHONY: bench-scale
bench-scale:
	@$(MAKE) --no-print-directory $(SCALE_SIM)
	@BUILD=$(BUILD) tests/scale/run.sh $(SCALE_ARGS)
bench: bench-scale
