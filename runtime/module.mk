# runtime/ - libftcomm (shared and static), its tools and examples.
#   runtime/src/<part>/*.c    the library, one folder per part (core, tcp,
#                             membership, coordinator, nccl, ...)
#   runtime/tools/<name>/*.c  one binary per folder, linked with libftcomm
#   runtime/examples/*.c      one binary per file
# The recorder's objects (recorder/src) are linked into libftcomm. The
# coordinator (runtime/src/coordinator, the server side of the membership
# protocol) is an archive of its own, libftccoord.a: ftcomm-run, the
# controller and the tests that host one link it; a training process never
# serves the protocol, so libftcomm does not carry it.

FTCCOORD_SRCS := $(wildcard runtime/src/coordinator/*.c)
FTCCOORD_OBJS := $(FTCCOORD_SRCS:%.c=$(BUILD)/obj/%.o)
FTCCOORD_A := $(BUILD)/lib/libftccoord.a
RUNTIME_SRCS := $(filter-out $(FTCCOORD_SRCS),$(wildcard runtime/src/*/*.c))
RUNTIME_OBJS := $(RUNTIME_SRCS:%.c=$(BUILD)/obj/%.o)
# Headers: a part outside runtime/ includes ftcomm.h (runtime/include, for
# everyone) and the public headers of the archives it links, from their
# include directories: the coordinator's (ftc_coord.h) and the protocol's
# routing names (ftc_proto_wire.h), FTCCOORD_CPPFLAGS. The internal headers
# (runtime/src/<part>/*.h) are for runtime's own parts and for the
# white-box tests of them, which say so by naming RUNTIME_INTERNAL_CPPFLAGS.
FTCCOORD_CPPFLAGS := -Iruntime/src/coordinator/include -Iruntime/src/proto/include
RUNTIME_INTERNAL_CPPFLAGS := -Iruntime/src $(FTCCOORD_CPPFLAGS)
RUNTIME_LIBS := -lwebsockets -ljansson -lz -ldl -lm

FTCOMM_SO := $(BUILD)/lib/libftcomm.so
# The exported symbols: ftc_* only (the public API), versioned FTCOMM_0.
FTCOMM_MAP := runtime/libftcomm.map
FTCOMM_A := $(BUILD)/lib/libftcomm.a

$(RUNTIME_OBJS) $(FTCCOORD_OBJS): CPPFLAGS_ALL += $(RUNTIME_INTERNAL_CPPFLAGS)

$(FTCCOORD_A): $(FTCCOORD_OBJS)
	@mkdir -p $(dir $@)
	$(say) AR $@
	$(Q)rm -f $@ && $(AR) rcs $@ $^

# Parts with build needs of their own (e.g. nccl's include directories).
include $(wildcard runtime/src/*/module.mk)

$(FTCOMM_A): $(RUNTIME_OBJS) $(RECORDER_OBJS) $(COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(say) AR $@
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(FTCOMM_SO): $(RUNTIME_OBJS) $(RECORDER_OBJS) $(COMMON_OBJS) $(FTCOMM_MAP)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -shared -Wl,-soname,libftcomm.so.0 -Wl,--no-undefined -Wl,--version-script=$(FTCOMM_MAP) \
	  -o $@ $(filter %.o,$^) $(LDFLAGS_ALL) $(RUNTIME_LIBS)
	$(Q)ln -sf libftcomm.so $(dir $@)libftcomm.so.0 # the soname: what a program linked here loads

# Tools: runtime/tools/NAME/*.c -> $(BUILD)/bin/NAME (static libftcomm, so
# binaries run from the build tree without LD_LIBRARY_PATH).
RUNTIME_TOOLS := $(notdir $(wildcard runtime/tools/*))
define runtime_tool
$(BUILD)/bin/$(1): $$(patsubst %.c,$$(BUILD)/obj/%.o,$$(wildcard runtime/tools/$(1)/*.c)) $$(FTCCOORD_A) $$(FTCOMM_A)
	@mkdir -p $$(dir $$@)
	$$(say) LD $$@
	$$(Q)$$(CC) -o $$@ $$^ $$(LDFLAGS_ALL) $$(RUNTIME_LIBS)
$$(patsubst %.c,$$(BUILD)/obj/%.o,$$(wildcard runtime/tools/$(1)/*.c)): CPPFLAGS_ALL += $$(FTCCOORD_CPPFLAGS)
endef
$(foreach t,$(RUNTIME_TOOLS),$(eval $(call runtime_tool,$(t))))

RUNTIME_EXAMPLES := $(patsubst runtime/examples/%.c,$(BUILD)/bin/%,$(wildcard runtime/examples/*.c))
$(BUILD)/bin/%: $(BUILD)/obj/runtime/examples/%.o $(FTCOMM_A)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL) $(RUNTIME_LIBS)

ALL_TARGETS += $(FTCOMM_SO) $(FTCOMM_A) $(FTCCOORD_A) $(addprefix $(BUILD)/bin/,$(RUNTIME_TOOLS)) $(RUNTIME_EXAMPLES)
INSTALL_BINS += $(addprefix $(BUILD)/bin/,$(RUNTIME_TOOLS))

# The PyTorch package (its own module.mk: it builds with the torch environment).
include runtime/python/module.mk
