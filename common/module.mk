# common/ - logging, FTCOMM_* parameters, errors, allocation hook, clocks.
COMMON_SRCS := $(wildcard common/*.c)
COMMON_OBJS := $(COMMON_SRCS:%.c=$(BUILD)/obj/%.o)
COMMON_LIB := $(BUILD)/lib/libftccommon.a

$(COMMON_LIB): $(COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(say) AR $@
	$(Q)$(AR) rcs $@ $^

ALL_TARGETS += $(COMMON_LIB)
