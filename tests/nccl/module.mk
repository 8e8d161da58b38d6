# tests/nccl/ - the NCCL backend against TEST DOUBLES of NCCL and the CUDA
# runtime (tests/nccl/double/, host memory over loopback sockets):
#   libcudart_double.so                 streams as threads, events, host "device" memory
#   libnccl_double_<version>.so         one per emulated NCCL version, exporting
#                                       only the symbols that version has
#   test_nccl_*                         cmocka suites (caps per version, flows
#                                       with processes: kill, shrink, grow, hang;
#                                       the same through a real coordinator)
NCCL_DOUBLE_VERSIONS := 2.26.5 2.27.3 2.28.9 2.29.2 2.32.3
NCCL_DOUBLE_DIR := $(BUILD)/tests/nccl
CUDART_DOUBLE := $(NCCL_DOUBLE_DIR)/libcudart_double.so
NCCL_DOUBLES := $(foreach v,$(NCCL_DOUBLE_VERSIONS),$(NCCL_DOUBLE_DIR)/libnccl_double_$(v).so)
nccl_version_code = $(shell echo $(1) | awk -F. '{ printf "%d%02d%02d", $$1, $$2, $$3 }')

$(BUILD)/obj/tests/nccl/double/cudart-double.o: CPPFLAGS_ALL += $(NCCL_CPPFLAGS)

$(CUDART_DOUBLE): $(BUILD)/obj/tests/nccl/double/cudart-double.o
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -shared -Wl,-soname,libcudart_double.so -o $@ $^ $(LDFLAGS_ALL)

define nccl_double
$(BUILD)/obj/tests/nccl/double/nccl-double-$(1).o: tests/nccl/double/nccl-double.c
	@mkdir -p $$(dir $$@)
	$$(say) CC $$@
	$$(Q)$$(CC) $$(CPPFLAGS_ALL) $$(NCCL_CPPFLAGS) -DDOUBLE_VERSION=$$(call nccl_version_code,$(1)) $$(CFLAGS_ALL) -c $$< -o $$@
$(NCCL_DOUBLE_DIR)/libnccl_double_$(1).so: $(BUILD)/obj/tests/nccl/double/nccl-double-$(1).o $$(CUDART_DOUBLE)
	@mkdir -p $$(dir $$@)
	$$(say) LD $$@
	$$(Q)$$(CC) -shared -Wl,-soname,libnccl_double_$(1).so -o $$@ $$< -L$$(NCCL_DOUBLE_DIR) -l:libcudart_double.so -Wl,-rpath,'$$$$ORIGIN' $$(LDFLAGS_ALL)
endef
$(foreach v,$(NCCL_DOUBLE_VERSIONS),$(eval $(call nccl_double,$(v))))

# RCCL: the same double under RCCL's name (the loader tells RCCL by name and
# then counts revoke/shrink/grow from 2.30.7, with the HIP runtime's names).
RCCL_DOUBLE_VERSIONS := 2.29.2 2.30.7
define rccl_double
$(BUILD)/obj/tests/nccl/double/rccl-double-$(1).o: tests/nccl/double/nccl-double.c
	@mkdir -p $$(dir $$@)
	$$(say) CC $$@
	$$(Q)$$(CC) $$(CPPFLAGS_ALL) $$(NCCL_CPPFLAGS) -DDOUBLE_VERSION=$$(call nccl_version_code,$(1)) $$(CFLAGS_ALL) -c $$< -o $$@
$(NCCL_DOUBLE_DIR)/librccl_double_$(1).so: $(BUILD)/obj/tests/nccl/double/rccl-double-$(1).o $$(CUDART_DOUBLE)
	@mkdir -p $$(dir $$@)
	$$(say) LD $$@
	$$(Q)$$(CC) -shared -Wl,-soname,librccl_double_$(1).so -o $$@ $$< -L$$(NCCL_DOUBLE_DIR) -l:libcudart_double.so -Wl,-rpath,'$$$$ORIGIN' $$(LDFLAGS_ALL)
endef
$(foreach v,$(RCCL_DOUBLE_VERSIONS),$(eval $(call rccl_double,$(v))))
NCCL_DOUBLES += $(foreach v,$(RCCL_DOUBLE_VERSIONS),$(NCCL_DOUBLE_DIR)/librccl_double_$(v).so)

# The suites link the backend's objects (NCCL_BACKEND_OBJS, from
# runtime/src/nccl/module.mk), the membership protocol (COORD_LIB_OBJS, from
# tests/coord/module.mk), the recorder and common/, not the whole library.
NCCL_TEST_PROGS := $(filter-out test_nccl_async,$(patsubst tests/nccl/%.c,%,$(wildcard tests/nccl/test_nccl_*.c)))
NCCL_TEST_BINS := $(addprefix $(BUILD)/tests/nccl/,$(NCCL_TEST_PROGS))
$(patsubst %,$(BUILD)/obj/tests/nccl/%.o,$(NCCL_TEST_PROGS)): CPPFLAGS_ALL += $(RUNTIME_INTERNAL_CPPFLAGS) \
    -Itests/nccl -DNCCL_DOUBLE_DIR='"$(NCCL_DOUBLE_DIR)"' -DDEPS_PREFIX='"$(DEPS_PREFIX)"'

define nccl_test
$(BUILD)/tests/nccl/$(1): $(BUILD)/obj/tests/nccl/$(1).o $$(NCCL_BACKEND_OBJS) $$(COORD_LIB_OBJS) $$(RECORDER_OBJS) $$(COMMON_OBJS) | $$(NCCL_DOUBLES)
	@mkdir -p $$(dir $$@)
	$$(say) LD $$@
	$$(Q)$$(CC) -o $$@ $$^ $$(LDFLAGS_ALL) $$(CMOCKA_LIBS) -lwebsockets -ljansson -lz -ldl
endef
$(foreach t,$(NCCL_TEST_PROGS),$(eval $(call nccl_test,$(t))))

TEST_BINS += $(CUDART_DOUBLE) $(NCCL_DOUBLES) $(NCCL_TEST_BINS)
TEST_SUITES += $(NCCL_TEST_BINS)

# test_nccl_async: the core's progress thread with requests in flight on the
# NCCL backend (a one-rank communicator of libftcomm.a, the unit harness).
NCCL_ASYNC_TEST := $(BUILD)/tests/nccl/test_nccl_async
$(BUILD)/obj/tests/nccl/test_nccl_async.o: CPPFLAGS_ALL += $(RUNTIME_INTERNAL_CPPFLAGS) -Itests/nccl -Itests/unit \
    -DNCCL_DOUBLE_DIR='"$(NCCL_DOUBLE_DIR)"'
$(NCCL_ASYNC_TEST): $(BUILD)/obj/tests/nccl/test_nccl_async.o $(BUILD)/obj/tests/unit/harness.o $(FTCOMM_A) | $(NCCL_DOUBLES)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL) $(CMOCKA_LIBS) $(RUNTIME_LIBS)
TEST_BINS += $(NCCL_ASYNC_TEST)
TEST_SUITES += $(NCCL_ASYNC_TEST)

# api_probe: one rank of the backend-selection checks (public API only).
NCCL_API_PROBE := $(BUILD)/tests/nccl/api_probe
$(NCCL_API_PROBE): $(BUILD)/obj/tests/nccl/api_probe.o $(FTCOMM_A)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL) $(RUNTIME_LIBS)

# The public API on the NCCL backend with the double: backend selection,
# collectives, a dying rank and the recovery suite, for the fast path and
# the fallback.
NCCL_RECOVERY_SUITE := $(BUILD)/tests/nccl/recovery_nccl
$(NCCL_RECOVERY_SUITE): tests/nccl/recovery_nccl.sh
	@mkdir -p $(dir $@)
	$(Q)printf '#!/bin/sh\nexec tests/nccl/recovery_nccl.sh %s\n' '$(BUILD)' >$@ && chmod +x $@

TEST_BINS += $(NCCL_RECOVERY_SUITE) $(NCCL_API_PROBE) $(BUILD)/bin/ftcomm-run $(BUILD)/bin/ftcomm-trainer \
    $(BUILD)/bin/ftcomm-trace $(BUILD)/tests/mp/mp_coll
TEST_SUITES += $(NCCL_RECOVERY_SUITE)
