# tests/build/ - the project's own promises: generated docs are fresh, make
# install gives a usable library (header, pkg-config, shared and static).
TEST_SUITES += tests/build/env-doc-fresh.sh tests/build/install.sh
