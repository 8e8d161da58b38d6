# tests/recorder/ - flight recorder and ftcomm-trace tests.
#   test_recorder_*.c   cmocka suites, linked with the recorder and common objects
#   *.sh                script suites (data-driven cases, generator, HTML in Chromium)
REC_TEST_PROGS := $(patsubst tests/recorder/%.c,%,$(wildcard tests/recorder/test_recorder_*.c))
REC_TEST_BINS := $(addprefix $(BUILD)/tests/recorder/,$(REC_TEST_PROGS))

define rec_test
$(BUILD)/tests/recorder/$(1): $(BUILD)/obj/tests/recorder/$(1).o $$(RECORDER_OBJS) $$(COMMON_OBJS)
	@mkdir -p $$(dir $$@)
	$$(say) LD $$@
	$$(Q)$$(CC) -o $$@ $$^ $$(LDFLAGS_ALL) $$(CMOCKA_LIBS) -ljansson
endef
$(foreach t,$(REC_TEST_PROGS),$(eval $(call rec_test,$(t))))

# The script suites find the binaries of this build through these.
export FTC_REC_TRACE := $(CURDIR)/$(BUILD)/bin/ftcomm-trace
export FTC_REC_GEN := $(CURDIR)/$(BUILD)/tests/recorder/ftcomm-trace-gen

# The scenario generator, linked with the recorder for --via-recorder.
$(BUILD)/tests/recorder/ftcomm-trace-gen: $(BUILD)/obj/tests/recorder/ftcomm-trace-gen.o $(RECORDER_OBJS) $(COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL)

TEST_BINS += $(REC_TEST_BINS) $(BUILD)/bin/ftcomm-trace $(BUILD)/tests/recorder/ftcomm-trace-gen
TEST_SUITES += $(REC_TEST_BINS) tests/recorder/run-cases.sh tests/recorder/generated.sh \
               tests/recorder/html-chromium.sh tests/recorder/schema.sh \
               tests/recorder/mutations.sh tests/recorder/torch-live.sh \
               tests/recorder/export.sh

# Recorder benchmarks (tests/bench/recorder/run.sh builds and runs them).
REC_BENCH_BINS := $(BUILD)/bench/recorder/bench_record
$(BUILD)/bench/recorder/bench_record: $(BUILD)/obj/tests/bench/recorder/bench_record.o $(RECORDER_OBJS) $(COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL)
BENCH_BINS += $(REC_BENCH_BINS)
