# tests/cluster/ - the integration tests' local control plane (etcd, kube-apiserver,
# kubectl, helm, kwok built from their Go modules; see docs/testing-cluster.md).
#
# The binaries are built ahead of the suites (cluster-bins, part of test-bins): the
# first build takes far longer than a suite's time limit. build.sh skips the build
# when the cached binaries match tools/go.mod and go.sum.
TEST_BINS += cluster-bins
TEST_SUITES += tests/cluster/smoke.sh

.PHONY: cluster-bins
cluster-bins:
	$(say) GO tests/cluster/tools
	$(Q)tests/cluster/build.sh >/dev/null
