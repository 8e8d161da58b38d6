# tests/fuzz/ - fuzz targets (LLVMFuzzerTestOneInput) for the parsers that
# take untrusted bytes, built two ways:
#   make test    each target linked with driver.c (gcc, ASan + UBSan, a
#                tree of its own: build/fuzz-san) and run over its checked-in
#                corpus tests/fuzz/corpus/<target>: seeds and every crasher
#                found, as regression tests
#   make fuzz    each target built with clang -fsanitize=fuzzer,address,undefined
#                (build/fuzz) and run for FUZZ_SECONDS (default 60) each by
#                tests/fuzz/fuzz.sh (FUZZ_TARGETS picks some; FUZZ_JOBS runs
#                that many at once); installs clang on first use
# A target names the sources it links: the runtime (libftcomm's, as an
# archive), ftcomm-trace's readers, or the controller's.
fuzz_comma := ,
FUZZ_TARGETS_ALL := proto hello env trace pickle jsontree jobspec fault log coord
FUZZ_SAN_DIR := build/fuzz-san
FUZZ_CLANG_DIR := build/fuzz
FUZZ_CLANG ?= clang-14
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= $(FUZZ_TARGETS_ALL)
FUZZ_JOBS ?= 1

FUZZ_CPPFLAGS := $(RUNTIME_INTERNAL_CPPFLAGS) $(CONTROLLER_CPPFLAGS) $(NCCL_CPPFLAGS) -Irecorder/tools/ftcomm-trace \
                 -Itests/fuzz
FUZZ_RT_SRCS := $(RUNTIME_SRCS) $(FTCCOORD_SRCS) $(RECORDER_SRCS) $(COMMON_SRCS)
FUZZ_TRACE_SRCS := $(filter-out %/main.c,$(TRACE_SRCS)) $(RECORDER_SRCS) $(COMMON_SRCS)
FUZZ_LIBS := $(RUNTIME_LIBS) -lcurl -lyaml -lpthread

# $(1) tree, $(2) compiler, $(3) compile flags, $(4) link flags, $(5) what
# each target links besides its own object (driver or libFuzzer).
define fuzz_tree
$(1)/obj/%.o: %.c
	@mkdir -p $$(dir $$@)
	$$(say) CC $$<
	$$(Q)$(2) $$(CPPFLAGS_ALL) $$(FUZZ_CPPFLAGS) $$(CFLAGS_ALL) $(3) $$(EXTRA_CFLAGS_$$(subst /,_,$$(dir $$<))) -c $$< -o $$@

$(1)/lib/libftcomm.a: $$(FUZZ_RT_SRCS:%.c=$(1)/obj/%.o)
	@mkdir -p $$(dir $$@)
	$$(say) AR $$@
	$$(Q)rm -f $$@ && $$(AR) rcs $$@ $$^

$(1)/bin/fuzz_proto $(1)/bin/fuzz_hello $(1)/bin/fuzz_env $(1)/bin/fuzz_fault $(1)/bin/fuzz_log $(1)/bin/fuzz_coord: $(1)/bin/fuzz_%: $(1)/obj/tests/fuzz/fuzz_%.o $(5) $(1)/lib/libftcomm.a
	@mkdir -p $$(dir $$@)
	$$(say) LD $$@
	$$(Q)$(2) -o $$@ $$^ $$(LDFLAGS_ALL) $(4) $$(FUZZ_LIBS)

$(1)/bin/fuzz_trace $(1)/bin/fuzz_pickle $(1)/bin/fuzz_jsontree: $(1)/bin/fuzz_%: $(1)/obj/tests/fuzz/fuzz_%.o $(5) $$(FUZZ_TRACE_SRCS:%.c=$(1)/obj/%.o)
	@mkdir -p $$(dir $$@)
	$$(say) LD $$@
	$$(Q)$(2) -o $$@ $$^ $$(LDFLAGS_ALL) $(4) $$(FUZZ_LIBS)

$(1)/bin/fuzz_jobspec: $(1)/bin/fuzz_%: $(1)/obj/tests/fuzz/fuzz_%.o $(5) $$(CONTROLLER_SRCS:%.c=$(1)/obj/%.o) $(1)/lib/libftcomm.a
	@mkdir -p $$(dir $$@)
	$$(say) LD $$@
	$$(Q)$(2) -o $$@ $$^ $$(LDFLAGS_ALL) $(4) $$(FUZZ_LIBS) -lcrypto
endef

# Regression runs: gcc, ASan + UBSan (with float-cast-overflow, which gcc's
# "undefined" leaves out and clang's has), the standalone driver. Each target's
# driver object carries the path of its corpus.
FUZZ_SAN_FLAGS := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer
$(eval $(call fuzz_tree,$(FUZZ_SAN_DIR),$(CC),$(FUZZ_SAN_FLAGS),$(FUZZ_SAN_FLAGS),$(FUZZ_SAN_DIR)/obj/tests/fuzz/driver-%.o))
# (A static pattern: a generic driver-%.o would also offer to make the .d
# files the Makefile includes.)
$(FUZZ_TARGETS_ALL:%=$(FUZZ_SAN_DIR)/obj/tests/fuzz/driver-%.o): $(FUZZ_SAN_DIR)/obj/tests/fuzz/driver-%.o: tests/fuzz/driver.c
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $(FUZZ_SAN_FLAGS) -DFUZZ_CORPUS='"tests/fuzz/corpus/$*"' -c $< -o $@

# libFuzzer: clang (its warnings differ: unknown -W options are not errors).
FUZZ_CLANG_FLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
                    -fno-omit-frame-pointer -Wno-unknown-warning-option -Wno-unknown-pragmas
$(eval $(call fuzz_tree,$(FUZZ_CLANG_DIR),$(FUZZ_CLANG),$(FUZZ_CLANG_FLAGS),-fsanitize=fuzzer$(fuzz_comma)address$(fuzz_comma)undefined,))

FUZZ_SAN_BINS := $(FUZZ_TARGETS_ALL:%=$(FUZZ_SAN_DIR)/bin/fuzz_%)
FUZZ_CLANG_BINS := $(FUZZ_TARGETS:%=$(FUZZ_CLANG_DIR)/bin/fuzz_%)

# ThreadSanitizer does not mix with AddressSanitizer: a TSan build leaves
# the regression runs to the other builds.
ifneq ($(SANITIZE),thread)
TEST_BINS += $(FUZZ_SAN_BINS)
TEST_SUITES += $(FUZZ_SAN_BINS)
endif

.PHONY: fuzz fuzz-bins fuzz-deps
fuzz-deps:
	@tests/fuzz/fuzz.sh --deps
fuzz-bins: fuzz-deps
	@$(MAKE) --no-print-directory $(FUZZ_CLANG_BINS)
fuzz: fuzz-bins
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(FUZZ_JOBS) tests/fuzz/fuzz.sh $(FUZZ_TARGETS)
