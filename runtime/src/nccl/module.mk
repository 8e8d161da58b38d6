# runtime/src/nccl/ - the NCCL/RCCL backend. Compiled against the real nccl.h
# and cuda_runtime_api.h (from an NCCL/CUDA install, or the wheels that
# `make deps` puts in $(DEPS_PREFIX)/py); never linked with them: the
# libraries are opened with dlopen at run time. -isystem because the vendor
# headers are not -Wstrict-prototypes clean.
NCCL_INCLUDE ?= $(DEPS_PREFIX)/py/nvidia/nccl/include
CUDA_INCLUDE ?= $(DEPS_PREFIX)/py/nvidia/cu13/include
NCCL_CPPFLAGS := -isystem $(NCCL_INCLUDE) -isystem $(CUDA_INCLUDE)

$(filter $(BUILD)/obj/runtime/src/nccl/%,$(RUNTIME_OBJS)): CPPFLAGS_ALL += $(NCCL_CPPFLAGS)

# The backend's objects, for programs that link it without the whole library
# (tests/nccl, tests/gpu): all but backend.c, the glue to the core's seam.
NCCL_BACKEND_OBJS := $(filter-out %/nccl/backend.o,$(filter $(BUILD)/obj/runtime/src/nccl/%,$(RUNTIME_OBJS)))
