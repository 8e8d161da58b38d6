# runtime/src/nccl/ - the NCCL/RCCL backend. Compiled against the real nccl.h
# and cuda_runtime_api.h (from an NCCL/CUDA install, or the wheels that
# `make deps` puts in $(DEPS_PREFIX)/py); never linked with them: the
# libraries are opened with dlopen at run time. -isystem because the vendor
# headers are not -Wstrict-prototypes clean.
NCCL_INCLUDE ?= $(DEPS_PREFIX)/py/nvidia/nccl/include
CUDA_INCLUDE ?= $(DEPS_PREFIX)/py/nvidia/cu13/include
NCCL_CPPFLAGS := -isystem $(NCCL_INCLUDE) -isystem $(CUDA_INCLUDE)

$(filter $(BUILD)/obj/runtime/src/nccl/%,$(RUNTIME_OBJS)): CPPFLAGS_ALL += $(NCCL_CPPFLAGS)

# A fresh checkout has no .deps: plain `make` installs the headers as
# `make deps` does (scripts/deps.sh build), or, when NCCL_INCLUDE or
# CUDA_INCLUDE name another place, says what is missing. Order-only: the
# check (two `test -f`) never makes an object out of date.
.PHONY: nccl-headers
$(filter $(BUILD)/obj/runtime/src/nccl/%,$(RUNTIME_OBJS)): | nccl-headers
nccl-headers:
	@missing=; for h in $(NCCL_INCLUDE)/nccl.h $(CUDA_INCLUDE)/cuda_runtime_api.h; do \
	  [ -f "$$h" ] || missing="$$missing $$h"; done; \
	[ -z "$$missing" ] && exit 0; \
	if [ "$(NCCL_INCLUDE)" != "$(DEPS_PREFIX)/py/nvidia/nccl/include" ] || \
	   [ "$(CUDA_INCLUDE)" != "$(DEPS_PREFIX)/py/nvidia/cu13/include" ]; then \
	  echo "make: the NCCL/CUDA headers are missing:$$missing; set NCCL_INCLUDE and CUDA_INCLUDE to an NCCL/CUDA install, or leave them unset and run make deps" >&2; exit 1; fi; \
	echo "make: the NCCL/CUDA headers are missing:$$missing; installing the build dependencies (scripts/deps.sh build, as make deps does)"; \
	DEPS_PREFIX=$(DEPS_PREFIX) scripts/deps.sh build || \
	  { echo "make: installing them failed (above); run make deps (as root, or with sudo)" >&2; exit 1; }; \
	for h in $$missing; do [ -f "$$h" ] || { echo "make: $$h is still missing after scripts/deps.sh build; run make deps" >&2; exit 1; }; done

# The backend's objects, for programs that link it without the whole library
# (tests/nccl, tests/gpu): all but backend.c, the glue to the core's seam.
NCCL_BACKEND_OBJS := $(filter-out %/nccl/backend.o,$(filter $(BUILD)/obj/runtime/src/nccl/%,$(RUNTIME_OBJS)))
