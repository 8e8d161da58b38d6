# tests/ - test suites. Parts add executables to TEST_SUITES (run in order by
# tests/run.sh) and the binaries they need to TEST_BINS.
TEST_BINS :=
TEST_SUITES :=

CMOCKA_LIBS := -lcmocka

include $(wildcard tests/*/module.mk)

.PHONY: test-bins
test-bins: $(TEST_BINS)

test:
	@scripts/deps.sh
	@$(MAKE) --no-print-directory all test-bins
	@tests/run.sh $(TEST_SUITES)

# The suites, for tests/run.sh by hand: tests/run.sh $(make -s print-suites)
.PHONY: print-suites
print-suites:
	@echo $(TEST_SUITES)
