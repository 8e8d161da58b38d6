# recorder/ - the flight recorder (linked into libftcomm) and ftcomm-trace.
RECORDER_SRCS := $(wildcard recorder/src/*.c)
RECORDER_OBJS := $(RECORDER_SRCS:%.c=$(BUILD)/obj/%.o)
