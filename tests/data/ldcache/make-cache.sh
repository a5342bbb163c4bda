#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Writes ld.so.cache: the cache the real `ldconfig -r` writes for a small driver
# root holding the library names of that NVIDIA driver version (tiny ELF shared objects made here
# with the names and sonames of the real ones), one unrelated library and one 32-bit
# library. Needs gcc (with -m32 support for the 32-bit one, else it is left out) and
# root (ldconfig -r chroots). Usage: tests/data/ldcache/make-cache.sh [VERSION]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
v=${1:-550.54.15}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
r=$t/root
lib=$r/usr/lib/x86_64-linux-gnu
lib32=$r/usr/lib/i386-linux-gnu
mkdir -p "$r/etc" "$lib" "$lib32"
printf 'int kgpu_fixture;\n' > "$t/x.c"
so() { # file soname [gcc flags]
        gcc -shared -fPIC -nostdlib -Wl,-soname,"$2" -o "$1" "$t/x.c" ${3:-}
}
for n in cuda nvidia-ml nvidia-ptxjitcompiler nvidia-opticalflow; do
        so "$lib/lib$n.so.$v" "lib$n.so.1"
done
ln -s libcuda.so.1 "$lib/libcuda.so"
so "$lib/libkgpu-other.so.2.0.0" libkgpu-other.so.2
so "$lib32/libcuda32.so.$v" libcuda32.so.1 -m32 || echo "no 32-bit library: gcc -m32 failed" >&2
printf '%s\n' /usr/lib/x86_64-linux-gnu /usr/lib/i386-linux-gnu > "$r/etc/ld.so.conf"
ldconfig -r "$r"
cp "$r/etc/ld.so.cache" "$here/ld.so.cache"
ldconfig -r "$r" -p > "$here/ld.so.cache.txt"
