#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# kgpu-render-device (the container helper) answers like `kgpuctl render-device` on a
# fake /dev with render nodes created out of order, runs a command with the node
# appended (Intel's render-device.sh form), and is statically linked when the build
# says so. usage: check-render-device.sh KGPU_RENDER_DEVICE KGPUCTL true|false
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
# The command form of Intel's render-device.sh: [N] COMMAND ARG... with the node
# appended, exec'd without a shell; the command's own options are never ours.
mkdir "$tmp/bin"
printf '#!/bin/sh\necho "vainfo $*"\n' >"$tmp/bin/vainfo"
chmod +x "$tmp/bin/vainfo"
out=$(PATH="$tmp/bin:$PATH" "$helper" vainfo --display drm --device 2>"$tmp/err") || { cat "$tmp/err"; exit 1; }
[ "$out" = "vainfo --display drm --device /dev/dri/renderD128" ] || { echo "command form: '$out'"; exit 1; }
grep -q "^Running: vainfo --display drm --device /dev/dri/renderD128$" "$tmp/err" || { cat "$tmp/err"; exit 1; }
out=$(PATH="$tmp/bin:$PATH" "$helper" 2 vainfo --device 2>/dev/null)
[ "$out" = "vainfo --device /dev/dri/renderD130" ] || { echo "command form, N=2: '$out'"; exit 1; }
out=$("$helper" echo --json '--help;$(id) x' --device 2>/dev/null)
[ "$out" = '--json --help;$(id) x --device /dev/dri/renderD128' ] || { echo "arguments changed: '$out'"; exit 1; }
out=$("$kgpuctl" render-device 2 echo --json --device 2>/dev/null)
[ "$out" = "--json --device /dev/dri/renderD130" ] || { echo "kgpuctl command form: '$out'"; exit 1; }
out=$("$helper" -- 2 echo --device 2>/dev/null)
[ "$out" = "--device /dev/dri/renderD130" ] || { echo "after --: '$out'"; exit 1; }
rc=0; "$helper" kgpu-no-such-command --device 2>"$tmp/err" || rc=$?
[ "$rc" = 127 ] && grep -q "Command 'kgpu-no-such-command' not found" "$tmp/err" || {
        echo "missing command: rc $rc"; cat "$tmp/err"; exit 1; }
rc=0; "$helper" "$tmp/dri" --device 2>"$tmp/err" || rc=$?
[ "$rc" = 126 ] && grep -q "Cannot run '$tmp/dri'" "$tmp/err" || { echo "directory as command: rc $rc"; cat "$tmp/err"; exit 1; }
if "$helper" --json vainfo --device 2>"$tmp/err"; then echo "--json with a command accepted"; exit 1; fi
grep -q "does not go with a command" "$tmp/err" || { cat "$tmp/err"; exit 1; }
if "$helper" 3 echo --device 2>"$tmp/err"; then echo "command with N=3 of 2 ran"; exit 1; fi
grep -q "only 2 present" "$tmp/err" || { cat "$tmp/err"; exit 1; }
[ "$("$helper" 2 --json)" = "$("$helper" --json 2)" ] || { echo "--json after N differs"; exit 1; }
if "$helper" -vers 2>"$tmp/err"; then echo "-vers accepted"; exit 1; fi
grep -q "unknown option" "$tmp/err" || { cat "$tmp/err"; exit 1; }
rm "$tmp"/dri/renderD*
if "$helper" 2>"$tmp/err"; then echo "no render node but success"; exit 1; fi
grep -q "No render device" "$tmp/err" || { cat "$tmp/err"; exit 1; }
if [ "$static" = true ]; then
        if readelf -d "$helper" | grep -q NEEDED; then echo "$helper needs shared libraries:"; readelf -d "$helper" | grep NEEDED; exit 1; fi
fi
echo "kgpu-render-device ok (static: $static)"
