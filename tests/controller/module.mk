# tests/controller/ - the controller's tests.
#   test_*.c   cmocka suites without a server (kubeconfig, JSON, selectors, work
#              queue, backoff, pods and status, options, the health/metrics server),
#              linked with libftccontroller.a
#   kube_live  a C program the scripts run against the real API server (pagination,
#              watch, 410, conflict retry, informer)
#   *.sh       integration suites against a real kube-apiserver from tests/cluster
#              (lifecycle.sh also runs the GC of kube-controller-manager, and pods
#              as ftcomm-trainer processes through tests/e2e/agent)
CTL_TEST_PROGS := $(patsubst tests/controller/%.c,%,$(wildcard tests/controller/test_*.c))
CTL_TEST_BINS := $(addprefix $(BUILD)/tests/controller/,$(CTL_TEST_PROGS))
CTL_LIVE := $(BUILD)/tests/controller/kube_live

$(BUILD)/obj/tests/controller/%.o: CPPFLAGS_ALL += $(CONTROLLER_CPPFLAGS)
# test_coords drives the router with real membership clients (white-box).
$(BUILD)/obj/tests/controller/test_coords.o: CPPFLAGS_ALL += $(RUNTIME_INTERNAL_CPPFLAGS)

# (libftcomm.a too: the embedded coordinators are its code, and a test must
# relink when it changes)
define ctl_test
$(BUILD)/tests/controller/$(1): $(BUILD)/obj/tests/controller/$(1).o $$(CONTROLLER_A) $$(FTCOMM_A)
	@mkdir -p $$(dir $$@)
	$$(say) LD $$@
	$$(Q)$$(CC) -o $$@ $$^ $$(LDFLAGS_ALL) $$(CMOCKA_LIBS) $$(CONTROLLER_LIBS)
endef
$(foreach t,$(CTL_TEST_PROGS) kube_live,$(eval $(call ctl_test,$(t))))

TEST_BINS += $(CTL_TEST_BINS) $(CTL_LIVE) $(CONTROLLER_BIN) $(TRACE_BIN) $(BUILD)/bin/ftcomm-trainer
TEST_SUITES += $(CTL_TEST_BINS) tests/controller/crd.sh tests/controller/controller.sh tests/controller/conditions.sh tests/controller/rbac.sh \
               tests/controller/steady.sh tests/controller/lifecycle.sh
