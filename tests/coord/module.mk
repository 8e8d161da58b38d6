# tests/coord/ - the membership protocol: coordinator, membership client and
# their codec (cmocka suites, linked with just those objects and common/),
# and ftcomm-run (script suites).
#   test_coord_*.c   cmocka suites
#   *.sh             script suites, given the build directory in $BUILD
COORD_TEST_PROGS := $(patsubst tests/coord/%.c,%,$(wildcard tests/coord/test_coord_*.c))
COORD_TEST_BINS := $(addprefix $(BUILD)/tests/coord/,$(COORD_TEST_PROGS))
COORD_LIB_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard runtime/src/proto/*.c \
    runtime/src/coordinator/*.c runtime/src/membership/*.c))

$(patsubst %,$(BUILD)/obj/tests/coord/%.o,$(COORD_TEST_PROGS)): CPPFLAGS_ALL += $(RUNTIME_INTERNAL_CPPFLAGS)

define coord_test
$(BUILD)/tests/coord/$(1): $(BUILD)/obj/tests/coord/$(1).o $$(COORD_LIB_OBJS) $$(COMMON_OBJS)
	@mkdir -p $$(dir $$@)
	$$(say) LD $$@
	$$(Q)$$(CC) -o $$@ $$^ $$(LDFLAGS_ALL) $$(CMOCKA_LIBS) -lwebsockets -ljansson -lz
endef
$(foreach t,$(COORD_TEST_PROGS),$(eval $(call coord_test,$(t))))

TEST_BINS += $(COORD_TEST_BINS)
TEST_SUITES += $(COORD_TEST_BINS)

# member_probe: a rank that only joins (for the ftcomm-run suite).
COORD_PROBE := $(BUILD)/tests/coord/member_probe
$(BUILD)/obj/tests/coord/member_probe.o: CPPFLAGS_ALL += $(RUNTIME_INTERNAL_CPPFLAGS)
$(COORD_PROBE): $(BUILD)/obj/tests/coord/member_probe.o $(COORD_LIB_OBJS) $(COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL) -lwebsockets -ljansson -lz

# The script suite, run against this build's binaries.
COORD_RUN_SUITE := $(BUILD)/tests/coord/ftcomm_run
$(COORD_RUN_SUITE): tests/coord/ftcomm_run.sh
	@mkdir -p $(dir $@)
	$(Q)printf '#!/bin/sh\nexec tests/coord/ftcomm_run.sh %s\n' '$(BUILD)' >$@ && chmod +x $@

TEST_BINS += $(COORD_PROBE) $(COORD_RUN_SUITE) $(BUILD)/bin/ftcomm-run
TEST_SUITES += $(COORD_RUN_SUITE)
