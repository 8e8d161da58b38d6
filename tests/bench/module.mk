# tests/bench/ - `make bench`: ftcomm-bench side by side with its peers on
# this host (Open MPI over TCP and shared memory, Gloo over TCP), plus the
# loopback-TCP and memcpy ceilings. The peer harnesses share the options,
# data, check and rows of ftcomm-bench through tests/bench/common. Results
# land in build/bench/ (bench.md, bench.csv, busbw.png); see docs/benchmarks.md.

BENCH_BIN := $(BUILD)/bench
BENCH_UTIL_OBJ := $(BUILD)/obj/tests/bench/common/bench_util.o
BENCH_MPI := $(BENCH_BIN)/mpi_bench
BENCH_GLOO := $(BENCH_BIN)/gloo_bench
BENCH_CEILINGS := $(BENCH_BIN)/loopback_tcp $(BENCH_BIN)/memcpy_bw
BENCH_BINS := $(BENCH_MPI) $(BENCH_GLOO) $(BENCH_CEILINGS)

# Expanded only in recipes, so mpicc is not run on every make.
EXTRA_CFLAGS_tests_bench_mpi_ = $(shell mpicc --showme:compile 2>/dev/null) -Itests/bench/common
BENCH_MPI_LIBS = $(shell mpicc --showme:link 2>/dev/null)

$(BUILD)/obj/tests/bench/gloo/gloo_bench.o: CPPFLAGS_ALL += -Itests/bench/common

$(BENCH_MPI): $(BUILD)/obj/tests/bench/mpi/mpi_bench.o $(BENCH_UTIL_OBJ)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL) $(BENCH_MPI_LIBS) -lm

$(BENCH_GLOO): $(BUILD)/obj/tests/bench/gloo/gloo_bench.o $(BENCH_UTIL_OBJ)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CXX) -o $@ $^ $(LDFLAGS_ALL) -lgloo -lm

$(BENCH_CEILINGS): $(BENCH_BIN)/%: $(BUILD)/obj/tests/bench/ceiling/%.o
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL)

# The shared core's own suite: the check counts exactly the wrong elements.
BENCH_UTIL_TEST := $(BUILD)/tests/bench/test_bench_util
$(BUILD)/obj/tests/bench/test_bench_util.o: CPPFLAGS_ALL += -Itests/bench/common
$(BENCH_UTIL_TEST): $(BUILD)/obj/tests/bench/test_bench_util.o $(BENCH_UTIL_OBJ)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) -o $@ $^ $(LDFLAGS_ALL) $(CMOCKA_LIBS) -lm
TEST_BINS += $(BENCH_UTIL_TEST)
TEST_SUITES += $(BENCH_UTIL_TEST)

# ftcomm-bench (runtime/tools/ftcomm-bench) prints its rows with the same code.
ifneq ($(wildcard runtime/tools/ftcomm-bench/*.c),)
$(BUILD)/bin/ftcomm-bench: $(BENCH_UTIL_OBJ)
$(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard runtime/tools/ftcomm-bench/*.c)): CPPFLAGS_ALL += -Itests/bench/common
# A behaviour test (rows well-formed, #wrong = 0 at 2 ranks), not a timing one.
TEST_SUITES += tests/bench/ftcomm_bench_test.sh
test: export BUILD := $(BUILD)
endif

.PHONY: bench-bins
bench-bins: $(BENCH_BINS)

bench:
	@scripts/deps.sh
	@$(MAKE) --no-print-directory all bench-bins python
	@BUILD=$(BUILD) tests/bench/run.sh
	@BUILD=$(BUILD) tests/bench/recovery/run.sh

# PyTorch training through a kill -9: ftcomm.Manager against torchft 0.2.0 and
# torchrun --max-restarts, in one run (tests/bench/torch_recovery, docs/pytorch.md).
.PHONY: bench-torch-recovery
bench-torch-recovery:
	@scripts/deps.sh
	@$(MAKE) --no-print-directory all python
	@OMP_NUM_THREADS=1 $(TORCH_PY) tests/bench/torch_recovery/run.py --build $(BUILD) $(BENCH_TORCH_RECOVERY_ARGS)
