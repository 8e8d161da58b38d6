# tests/gpu/ - checks for a GPU machine (tests/gpu/run.sh runs them; not part
# of `make test`). nccl_gpu links the NCCL backend's objects, the recorder
# and common/ only
# and opens the real NCCL with dlopen; it is built with the test binaries so
# that CPU-only builds keep it compiling.
GPU_NCCL_PROG := $(BUILD)/tests/gpu/nccl_gpu
$(BUILD)/obj/tests/gpu/nccl_gpu.o: CPPFLAGS_ALL += $(RUNTIME_INTERNAL_CPPFLAGS) $(NCCL_CPPFLAGS)
$(GPU_NCCL_PROG): $(BUILD)/obj/tests/gpu/nccl_gpu.o $(NCCL_BACKEND_OBJS) $(RECORDER_OBJS) $(COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL) -ldl

TEST_BINS += $(GPU_NCCL_PROG)

# The GPU script's dry run on the CPU doubles (part of `make test`).
GPU_DRYRUN_SUITE := $(BUILD)/tests/gpu/dryrun
$(GPU_DRYRUN_SUITE): tests/gpu/dryrun.sh
	@mkdir -p $(dir $@)
	$(Q)printf '#!/bin/sh\nexec tests/gpu/dryrun.sh %s\n' '$(BUILD)' >$@ && chmod +x $@

TEST_BINS += $(GPU_DRYRUN_SUITE)
TEST_SUITES += $(GPU_DRYRUN_SUITE)
