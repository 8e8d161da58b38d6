# recorder/ - the flight recorder (linked into libftcomm) and ftcomm-trace.
RECORDER_SRCS := $(wildcard recorder/src/*.c)
RECORDER_OBJS := $(RECORDER_SRCS:%.c=$(BUILD)/obj/%.o)

# ftcomm-trace: the analyzer. Reads dumps with jansson (and a fast reader of
# its own format); linked with the recorder objects for the shared names.
TRACE_SRCS := $(wildcard recorder/tools/ftcomm-trace/*.c)
TRACE_OBJS := $(TRACE_SRCS:%.c=$(BUILD)/obj/%.o)
TRACE_BIN := $(BUILD)/bin/ftcomm-trace
# Report lines are cut at their buffer's size on purpose.
EXTRA_CFLAGS_recorder_tools_ftcomm-trace_ := -Wno-format-truncation

$(TRACE_BIN): $(TRACE_OBJS) $(RECORDER_OBJS) $(COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL) -ljansson

ALL_TARGETS += $(TRACE_BIN)
INSTALL_BINS += $(TRACE_BIN)
