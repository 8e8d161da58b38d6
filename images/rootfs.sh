#!/usr/bin/env bash
# rootfs.sh IMAGE DESTDIR PREFIX BUILD - second half of `make image-rootfs`: from
# DESTDIR/.stage (a `make install PREFIX=PREFIX`), keep what image IMAGE ships.
#   controller: ftcomm-controller and ftcomm-trace (to read dumps in the volume)
#   runtime:    libftcomm (shared, static), ftcomm.h, ftcomm.pc, ftcomm-run,
#               ftcomm-trace and the example trainer, for users to build FROM
set -euo pipefail
image=$1 dest=$2 prefix=$3 build=$4
stage=$dest/.stage
[ -d "$stage$prefix" ] || { echo "rootfs.sh: $stage$prefix is missing (make install failed?)" >&2; exit 1; }
case $image in
  controller)
    install -d -m 0755 "$dest$prefix/bin"
    install -m 0755 "$stage$prefix/bin/ftcomm-controller" "$stage$prefix/bin/ftcomm-trace" "$dest$prefix/bin/"
    ;;
  runtime)
    install -d -m 0755 "$(dirname "$dest$prefix")"
    cp -a "$stage$prefix" "$dest$prefix"
    install -m 0755 "$build/bin/ftcomm-trainer" "$dest$prefix/bin/"
    rm -f "$dest$prefix/bin/ftcomm-controller"
    # The dynamic loader finds libftcomm.so without LD_LIBRARY_PATH.
    install -d -m 0755 "$dest/etc/ld.so.conf.d"
    echo "$prefix/lib" >"$dest/etc/ld.so.conf.d/ftcomm.conf"
    chmod 0644 "$dest/etc/ld.so.conf.d/ftcomm.conf"
    ;;
  *) echo "rootfs.sh: unknown image $image" >&2; exit 2 ;;
esac
rm -rf "$stage"
# Nothing the image's user could change; directories 0755, files 0644 or 0755.
chmod -R u+rwX,go+rX,go-w "$dest"
find "$dest" -type d -exec chmod 0755 {} +
if [ "$(id -u)" = 0 ]; then chown -R 0:0 "$dest"; fi
