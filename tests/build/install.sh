#!/usr/bin/env bash
# make install PREFIX=... gives a header, a pkg-config file and libraries that
# a user's program compiles and links against, shared and static.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make --no-print-directory install PREFIX="$tmp/prefix" >/dev/null
for f in include/ftcomm.h lib/libftcomm.so lib/libftcomm.a lib/pkgconfig/ftcomm.pc; do
  [ -e "$tmp/prefix/$f" ] || { echo "make install did not install $f" >&2; exit 1; }
done
cat > "$tmp/user.c" <<'C'
#include <ftcomm.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  if (ftc_version() != FTC_VERSION_CODE) { printf("version mismatch\n"); return 1; }
  if (strcmp(ftc_strerror(FTC_ERR_TIMEOUT), "operation timed out") != 0) return 1;
  printf("libftcomm %d: %s\n", ftc_version(), ftc_strerror(FTC_OK));
  return 0;
}
C
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
cc -Wall -Werror $(pkg-config --cflags ftcomm) "$tmp/user.c" -o "$tmp/user-shared" $(pkg-config --libs ftcomm)
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/user-shared"
cc -Wall -Werror $(pkg-config --cflags ftcomm) "$tmp/user.c" -o "$tmp/user-static" \
  "$tmp/prefix/lib/libftcomm.a" $(pkg-config --libs-only-other --static ftcomm) \
  $(pkg-config --static --libs ftcomm | tr ' ' '\n' | grep -v -- '-lftcomm' | tr '\n' ' ')
"$tmp/user-static"
# Only the public API is exported from the shared library.
bad=$(nm -D --defined-only "$tmp/prefix/lib/libftcomm.so" | awk '{print $3}' | grep -v '^ftc_' | grep -v '^_' || true)
if [ -n "$bad" ]; then echo "libftcomm.so exports non-API symbols:" $bad >&2; exit 1; fi
echo "install: shared and static builds link and run"
