# lib.sh - kept for suites that source it from here: the harness is tests/cluster/lib.sh.
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"
