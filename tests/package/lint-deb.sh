#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# lint-deb.sh — lintian on the .deb: no errors and no warnings.
#
# Contract: `lint-deb.sh SRCDIR BUILDDIR`. Builds the .deb (or takes it from the cache,
# see build-packages.sh), runs `lintian --pedantic --display-info` on it and on the
# .changes, prints every tag, and fails on any E: or W: tag. Warnings that are right
# for kgpu are silenced in packaging/deb/debian/kgpu.lintian-overrides, each with the
# reason. I:/P:/X: tags are shown but do not fail. Exit 77 when lintian or
# dpkg-buildpackage is missing.
set -eu

src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
for t in lintian dpkg-buildpackage dh; do
        command -v $t >/dev/null || { echo "SKIP: $t is not installed"; exit 77; }
done
debdir=$("$src/tests/package/build-packages.sh" deb "$src" "$build/tests/package/pkg-out")
# lintian refuses to run as root without this hint, and warns otherwise.
out=$(lintian --pedantic --display-info --show-overrides --allow-root "$debdir"/kgpu_*.changes 2>&1) || true
printf '%s\n' "$out"
bad=$(printf '%s\n' "$out" | grep -E '^[EW]: ' || true)
if [ -n "$bad" ]; then
        echo "FAIL: lintian reports $(printf '%s\n' "$bad" | wc -l) error(s)/warning(s)"
        exit 1
fi
echo "ok: lintian: no errors, no warnings"
