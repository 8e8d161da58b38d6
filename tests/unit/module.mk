# tests/unit/ - cmocka suites of the runtime core and the TCP backend.
#   test_*.c    one suite each, linked with libftcomm.a (internal symbols
#               included) and the multi-rank harness (harness.c)
UNIT_TEST_PROGS := $(patsubst tests/unit/%.c,%,$(wildcard tests/unit/test_*.c))
UNIT_TEST_BINS := $(addprefix $(BUILD)/tests/unit/,$(UNIT_TEST_PROGS))
UNIT_HARNESS_OBJS := $(BUILD)/obj/tests/unit/harness.o

$(BUILD)/obj/tests/unit/%.o: CPPFLAGS_ALL += $(RUNTIME_INTERNAL_CPPFLAGS) -Itests/unit

define unit_test
$(BUILD)/tests/unit/$(1): $(BUILD)/obj/tests/unit/$(1).o $$(UNIT_HARNESS_OBJS) $$(FTCCOORD_A) $$(FTCOMM_A)
	@mkdir -p $$(dir $$@)
	$$(say) LD $$@
	$$(Q)$$(CC) -o $$@ $$^ $$(LDFLAGS_ALL) $$(CMOCKA_LIBS) $$(RUNTIME_LIBS)
endef
$(foreach t,$(UNIT_TEST_PROGS),$(eval $(call unit_test,$(t))))

TEST_BINS += $(UNIT_TEST_BINS)
TEST_SUITES += $(UNIT_TEST_BINS)

# The fake backend (built against core/backend.h alone) and its suite.
$(BUILD)/tests/unit/test_backend_seam: $(BUILD)/obj/tests/unit/fake_backend.o
