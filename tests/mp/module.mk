# tests/mp/ - multi-process tests through ftcomm-run (the real coordinator
# path): mp_coll is one rank; run_mp.sh drives it at several world sizes.
MP_PROG := $(BUILD)/tests/mp/mp_coll
$(BUILD)/obj/tests/mp/mp_coll.o: CPPFLAGS_ALL += $(RUNTIME_INTERNAL_CPPFLAGS) -Itests/unit
$(MP_PROG): $(BUILD)/obj/tests/mp/mp_coll.o $(FTCOMM_A)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL) $(RUNTIME_LIBS)

MP_SUITE := $(BUILD)/tests/mp/run_mp
$(MP_SUITE): tests/mp/run_mp.sh
	@mkdir -p $(dir $@)
	$(Q)printf '#!/bin/sh\nexec tests/mp/run_mp.sh %s\n' '$(BUILD)' >$@ && chmod +x $@

TEST_BINS += $(MP_PROG) $(MP_SUITE) $(BUILD)/bin/ftcomm-run
TEST_SUITES += $(MP_SUITE)
