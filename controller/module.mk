# controller/ - ftcomm-controller and the static library its tests link.
#   controller/src/kube/*.c       Kubernetes client: config, REST, watch,
#                                 informers, work queue, backoff
#   controller/src/reconcile/*.c  the TrainingJob reconciler
#   controller/src/server/*.c     options, leader election, health/metrics
#   controller/src/coord/*.c      the embedded coordinators (libftcomm's
#                                 coordinator, one per job) behind one port
#   controller/src/main.c         the binary's entry point
CONTROLLER_SRCS := $(wildcard controller/src/*/*.c)
CONTROLLER_OBJS := $(CONTROLLER_SRCS:%.c=$(BUILD)/obj/%.o)
CONTROLLER_MAIN_OBJ := $(BUILD)/obj/controller/src/main.o
CONTROLLER_CPPFLAGS := -Icontroller/src/kube -Icontroller/src/reconcile -Icontroller/src/server \
                       -Icontroller/src/coord $(FTCCOORD_CPPFLAGS)
# The coordinator comes from libftccoord.a, ahead of libftcomm.a (the
# membership codec and common), and needs libwebsockets.
CONTROLLER_LIBS := $(FTCCOORD_A) $(FTCOMM_A) -lcurl -ljansson -lyaml -lwebsockets -lz -lcrypto -ldl -lm -lpthread
CONTROLLER_A := $(BUILD)/lib/libftccontroller.a
CONTROLLER_BIN := $(BUILD)/bin/ftcomm-controller

$(CONTROLLER_OBJS) $(CONTROLLER_MAIN_OBJ): CPPFLAGS_ALL += $(CONTROLLER_CPPFLAGS)

# Whatever links the controller's archive links libftcomm.a after it.
$(CONTROLLER_A): $(CONTROLLER_OBJS) $(COMMON_OBJS) | $(FTCOMM_A) $(FTCCOORD_A)
	@mkdir -p $(dir $@)
	$(say) AR $@
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(CONTROLLER_BIN): $(CONTROLLER_MAIN_OBJ) $(CONTROLLER_A) $(FTCCOORD_A) $(FTCOMM_A)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL) $(CONTROLLER_LIBS)

ALL_TARGETS += $(CONTROLLER_A) $(CONTROLLER_BIN)
INSTALL_BINS += $(CONTROLLER_BIN)
