# tests/net/ - network faults between hosts: each rank of ftcomm-trainer and
# the coordinator in a network namespace of its own, joined by veth pairs on
# a bridge (198.18.0.0/15), faults made with blackhole routes (lib.sh). Every
# case of faults.sh (a partition of one rank from everyone, from its peers
# only, from the coordinator only, an asymmetric cut, a node of two ranks
# cut off, flaps shorter and longer than the heartbeat timeout, a 30 s
# coordinator outage, a heal after the job moved on) runs once in
# `make test` (about 3 minutes); `make bench-net-faults` runs each 20 times
# and prints the table of docs/recovery.md "Network faults". Root only.
NET_FAULTS_SUITE := $(BUILD)/tests/net/faults
$(NET_FAULTS_SUITE): tests/net/faults.sh
	@mkdir -p $(dir $@)
	$(Q)printf '#!/bin/sh\nexec tests/net/faults.sh %s\n' '$(BUILD)' >$@ && chmod +x $@

TEST_BINS += $(NET_FAULTS_SUITE) $(BUILD)/bin/ftcomm-run $(BUILD)/bin/ftcomm-trainer
TEST_SUITES += $(NET_FAULTS_SUITE)

.PHONY: bench-net-faults
bench-net-faults: $(BUILD)/bin/ftcomm-run $(BUILD)/bin/ftcomm-trainer
	@FTC_NET_TRIALS=$${FTC_NET_TRIALS:-20} tests/net/faults.sh $(BUILD)

# Allreduce behind tbf-limited links (1 and 5 Gbit/s), each rank in its own
# namespace: ftcomm vs Open MPI TCP vs Gloo ring in one run, busbw as a
# fraction of the link rate (tests/net/bandwidth.sh; docs/benchmarks.md).
.PHONY: bench-net-bandwidth
bench-net-bandwidth: $(BUILD)/bin/ftcomm-run $(BUILD)/bin/ftcomm-bench bench-bins
	@tests/net/bandwidth.sh $(BUILD)
