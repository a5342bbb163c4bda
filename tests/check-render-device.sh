#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# kgpu-render-device (the container helper) answers like `kgpuctl render-device` on a
# fake /dev with render nodes created out of order, and is statically linked when the
# build says so. usage: check-render-device.sh KGPU_RENDER_DEVICE KGPUCTL true|false
set -eu
helper=$1
kgpuctl=$2
static=$3
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root for mknod"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/dri"
mknod "$tmp/dri/renderD130" c 226 130
mknod "$tmp/dri/renderD128" c 226 128
mknod "$tmp/dri/card0" c 226 0
export KGPU_DEV_ROOT="$tmp"
for n in 1 2; do
        a=$("$helper" "$n")
        b=$("$kgpuctl" render-device "$n")
        [ "$a" = "$b" ] || { echo "N=$n: helper '$a', kgpuctl '$b'"; exit 1; }
done
[ "$("$helper")" = /dev/dri/renderD128 ] || { echo "default is not the lowest minor"; exit 1; }
[ "$("$helper" 2)" = /dev/dri/renderD130 ] || { echo "second is not renderD130"; exit 1; }
[ "$("$helper" --json 2)" = '{"device":"/dev/dri/renderD130","index":2,"devices":["/dev/dri/renderD128","/dev/dri/renderD130"]}' ] || {
        echo "json: $("$helper" --json 2)"; exit 1; }
if "$helper" 3 2>"$tmp/err"; then echo "N=3 of 2 succeeded"; exit 1; fi
grep -q "only 2 present" "$tmp/err" || { cat "$tmp/err"; exit 1; }
if "$helper" x 2>/dev/null; then echo "N=x accepted"; exit 1; fi
rm "$tmp"/dri/renderD*
if "$helper" 2>"$tmp/err"; then echo "no render node but success"; exit 1; fi
grep -q "No render device" "$tmp/err" || { cat "$tmp/err"; exit 1; }
if [ "$static" = true ]; then
        if readelf -d "$helper" | grep -q NEEDED; then echo "$helper needs shared libraries:"; readelf -d "$helper" | grep NEEDED; exit 1; fi
fi
echo "kgpu-render-device ok (static: $static)"
