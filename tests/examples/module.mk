TEST_SUITES += tests/examples/trainer-matches-serial.sh
# tests/examples/ - the example programs do what their docs say.
