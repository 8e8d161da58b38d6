#!/usr/bin/env bash
# images.sh - the container images without a container engine: runs
# `make image-rootfs IMAGE=<name> DESTDIR=...` (what each Dockerfile's build stage
# runs after `make deps`) and checks the tree the final stage copies to /:
#   the binaries run; every shared library they need is in the tree or comes from a
#   Debian package listed in images/<name>/packages.txt (or libc6, in every base);
#   files are root-owned (when built as root), none writable by group or others, no
#   setuid; the Dockerfiles are multi-stage, run the same target and USER 65532;
#   the runtime image's header, library and pkg-config file build a program.
set -euo pipefail
. "$(dirname "$0")/../cluster/lib.sh"
cd "$root"

packages_of() { grep -v '^#' "images/$1/packages.txt" | awk 'NF { print $1 }'; }

owner() {  # owner SONAME PATH: the Debian package that ships the SONAME the loader
  # resolved to PATH ("pkg:arch: /path/SONAME"); by PATH's folder first, as a SONAME may
  # be in several packages (libm.so.6: libc6 in /lib/x86_64-linux-gnu, libc6-i386 in
  # /lib32), with or without the /usr of a merged /usr
  local line want dir first=
  dir=$(dirname "$2"); dir=${dir#/usr}
  while IFS= read -r line; do
    want=${line#*: }
    [[ $want == */"$1" ]] || continue
    line=${line%%: *}; line=${line%%,*}; line=${line%%:*}
    [ -n "$first" ] || first=$line
    want=$(dirname "$want"); want=${want#/usr}
    if [ "$want" = "$dir" ]; then echo "$line"; return; fi
  done < <(dpkg -S "*/$1" 2>/dev/null)
  echo "$first"
}

libs_resolve() {  # libs_resolve IMAGE ROOTFS
  local image=$1 rfs=$2 rc=0 f lib path pkg
  local allowed
  allowed=" libc6 $(packages_of "$image" | tr '\n' ' ') "
  while IFS= read -r f; do
    file -b "$f" | grep -q '^ELF' || continue
    for lib in $(readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
      if [ -e "$rfs/opt/ftcomm/lib/$lib" ]; then continue; fi
      path=$(LD_LIBRARY_PATH=$rfs/opt/ftcomm/lib ldd "$f" | awk -v l="$lib" '$1 == l { print $3 }')
      if [ -z "$path" ] || [ "$path" = "not" ]; then
        [ "$lib" = ld-linux-x86-64.so.2 ] && continue   # the loader itself (libc6)
        echo "${f#"$rfs"}: $lib not found"; rc=1; continue
      fi
      pkg=$(owner "$lib" "$path")
      if [ -z "$pkg" ]; then echo "${f#"$rfs"}: $lib ($path) belongs to no Debian package"; rc=1; continue; fi
      if [[ $allowed != *" $pkg "* ]]; then
        echo "${f#"$rfs"} needs $lib from Debian package $pkg: add $pkg to images/$image/packages.txt"; rc=1
      fi
    done
  done < <(find "$rfs" -type f)
  return $rc
}

perms_sane() {  # perms_sane ROOTFS
  local rfs=$1 bad_files
  bad_files=$(find "$rfs" \( -perm -0002 -o -perm -0020 -o -perm -4000 -o -perm -2000 \) ! -type l)
  [ -z "$bad_files" ] || { echo "writable by group/others or setuid/setgid: $bad_files"; return 1; }
  if [ "$(id -u)" = 0 ]; then
    bad_files=$(find "$rfs" ! -user 0 -o ! -group 0)
    [ -z "$bad_files" ] || { echo "not owned by root: $bad_files"; return 1; }
  fi
  bad_files=$(find "$rfs/opt/ftcomm/bin" -type f ! -perm 0755)
  [ -z "$bad_files" ] || { echo "binaries not 0755: $bad_files"; return 1; }
  [ ! -e "$rfs/.stage" ] || { echo "the staging directory was left in the tree"; return 1; }
}

dockerfile_ok() {  # dockerfile_ok IMAGE
  local df=images/$1/Dockerfile
  grep -q '^FROM debian:bookworm AS build$' "$df" || { echo "$df: no debian:bookworm build stage"; return 1; }
  grep -q "make deps" "$df" || { echo "$df: the build stage does not run make deps"; return 1; }
  grep -q "make .*image-rootfs IMAGE=$1 DESTDIR=/rootfs" "$df" || { echo "$df: the build stage does not run make image-rootfs IMAGE=$1"; return 1; }
  grep -Eq '^FROM (debian:bookworm-slim|gcr.io/distroless/cc)' "$df" || { echo "$df: the final stage is not slim"; return 1; }
  grep -q "^COPY --from=build /rootfs/ /$" "$df" || { echo "$df: the final stage does not copy /rootfs"; return 1; }
  grep -q "images/$1/packages.txt" "$df" || { echo "$df: does not install images/$1/packages.txt"; return 1; }
  grep -q '^USER 65532:65532$' "$df" || { echo "$df: USER is not 65532"; return 1; }
}

built=" "
for image in controller runtime; do
  rfs=$work/$image
  if ! timeout 900 make --no-print-directory image-rootfs IMAGE=$image DESTDIR="$rfs" >"$work/$image.log" 2>&1; then
    bad "make image-rootfs IMAGE=$image"; tail -20 "$work/$image.log" | sed 's/^/       /'; continue
  fi
  built+="$image "
  ok "make image-rootfs IMAGE=$image DESTDIR=..."
  check "$image: Dockerfile is multi-stage, runs make deps and image-rootfs, USER 65532" dockerfile_ok $image
  check "$image: every shared library resolves from the tree or images/$image/packages.txt" libs_resolve $image "$rfs"
  check "$image: root-owned, nothing writable by the image's user, no setuid" perms_sane "$rfs"
  check_out "$image: ftcomm-trace runs" 'ftcomm-trace' "$rfs/opt/ftcomm/bin/ftcomm-trace" --help
done

if [[ $built == *" controller "* ]]; then
check_out "controller: ftcomm-controller runs and shows its flags" '--leader-elect' "$work/controller/opt/ftcomm/bin/ftcomm-controller" --help
check_out "controller: only the controller and ftcomm-trace" '^ftcomm-controller ftcomm-trace $' bash -c 'ls "$1" | tr "\n" " "' _ "$work/controller/opt/ftcomm/bin"
fi
if [[ $built == *" runtime "* ]]; then
rt=$work/runtime/opt/ftcomm
check_out "runtime: ftcomm-run runs" 'Usage: ftcomm-run' "$rt/bin/ftcomm-run" --help
check "runtime: header, libftcomm.so, libftcomm.a, ftcomm.pc, ftcomm-trainer" \
  test -f "$rt/include/ftcomm.h" -a -f "$rt/lib/libftcomm.a" -a -L "$rt/lib/libftcomm.so" -a -f "$rt/lib/pkgconfig/ftcomm.pc" -a -x "$rt/bin/ftcomm-trainer"
check_out "runtime: ld.so.conf.d names /opt/ftcomm/lib" '^/opt/ftcomm/lib$' cat "$work/runtime/etc/ld.so.conf.d/ftcomm.conf"
check_out "runtime: ftcomm.pc has prefix /opt/ftcomm" '^-I/opt/ftcomm/include -L/opt/ftcomm/lib -lftcomm' \
  env PKG_CONFIG_PATH="$rt/lib/pkgconfig" pkg-config --cflags --libs ftcomm
# A user's program built the way the pkg-config file says, against the image's tree
# (the sysroot maps /opt/ftcomm to the tree), and run with its libftcomm.so.
cat >"$work/user.c" <<'C'
#include <ftcomm.h>
#include <stdio.h>
int main(void) {
  printf("ftcomm %d: %s\n", ftc_version(), ftc_strerror(FTC_OK));
  return ftc_version() == FTC_VERSION_CODE ? 0 : 1;
}
C
build_user() {
  local flags
  flags=$(PKG_CONFIG_SYSROOT_DIR=$work/runtime PKG_CONFIG_PATH="$rt/lib/pkgconfig" pkg-config --cflags --libs ftcomm)
  # shellcheck disable=SC2086
  cc -o "$work/user" "$work/user.c" $flags && LD_LIBRARY_PATH=$rt/lib "$work/user"
}
check_out "runtime: a program builds with pkg-config and runs with libftcomm.so" '^ftcomm [0-9]+: ' build_user
fi

check_out ".dockerignore leaves build outputs out of the context" '^3$' bash -c 'grep -cxE "build|\.deps|\.git" .dockerignore'

finish
