# tests/examples/ - the example programs do what their docs say.
TEST_SUITES += tests/examples/trainer-matches-serial.sh tests/examples/api-loop.sh
