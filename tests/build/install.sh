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
# Only the public API is exported from the shared library (the version script
# runtime/libftcomm.map): every defined dynamic symbol is an ftc_* function of
# version FTCOMM_0, or the version node itself, and they are exactly the
# functions ftcomm.h declares (none missing, none extra).
nm -D --defined-only "$tmp/prefix/lib/libftcomm.so" | awk '{print $3}' >"$tmp/exported"
bad=$(grep -v -e '^ftc_[a-z0-9][a-z0-9_]*@@FTCOMM_0$' -e '^FTCOMM_0$' "$tmp/exported" || true)
if [ -n "$bad" ]; then echo "libftcomm.so exports symbols outside the public API (runtime/libftcomm.map):" $bad >&2; exit 1; fi
grep -q '^FTCOMM_0$' "$tmp/exported" || { echo "libftcomm.so has no FTCOMM_0 version node (runtime/libftcomm.map not used?)" >&2; exit 1; }
sed -n 's/@@FTCOMM_0$//p' "$tmp/exported" | sort -u >"$tmp/exported.api"
grep -oE '\bftc_[a-z0-9_]+[[:space:]]*\(' "$tmp/prefix/include/ftcomm.h" | tr -d '( \t' | sort -u >"$tmp/declared.api"
if ! diff_out=$(diff "$tmp/declared.api" "$tmp/exported.api"); then
  echo "libftcomm.so's exports differ from ftcomm.h's functions (< declared only, > exported only):" >&2
  echo "$diff_out" >&2
  exit 1
fi
echo "install: shared and static builds link and run; libftcomm.so exports the $(wc -l <"$tmp/exported.api") functions of ftcomm.h, versioned FTCOMM_0, and nothing else"
