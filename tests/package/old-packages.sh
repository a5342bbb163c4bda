#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# old-packages.sh — builds the packages of the previous release from git history, for
# the upgrade tests, and prints the directory that holds them.
#
# Contract: `old-packages.sh deb|rpm SRCDIR [CACHE_DIR]`. The previous release is commit
# $KGPU_PREVIOUS_COMMIT (default below: 0.1.0). Its tree (`git -C SRCDIR archive`) is
# built with this tree's build-packages.sh, and the packages are cached by commit in
# CACHE_DIR (default $KGPU_TEST_CACHE or /var/cache/kgpu-test)/old-packages/<kind>-<commit>,
# so they are built once per machine, not once per build directory. Concurrent callers
# serialise on a lock there. Exit 0 and the directory on stdout; 77 with the reason on
# stderr when SRCDIR is no git checkout holding the commit; 1 when the build fails.
set -eu

kind=$1 src=$(cd "$2" && pwd)
cache=${3:-${KGPU_TEST_CACHE:-/var/cache/kgpu-test}}
commit=${KGPU_PREVIOUS_COMMIT:-7e8ff62}
here=$(cd "$(dirname "$0")" && pwd)

full=$(git -C "$src" rev-parse --verify -q "$commit^{commit}" 2>/dev/null) || {
        echo "no commit $commit in $src (not a git checkout, or a shallow one)" >&2
        exit 77
}
dest=$cache/old-packages/$kind-$full
if [ -f "$dest/.done" ]; then
        echo "$dest"
        exit 0
fi
mkdir -p "$cache/old-packages"
exec 9>"$cache/old-packages/.lock-$kind"
flock 9
if [ ! -f "$dest/.done" ]; then
        tmp=$(mktemp -d "$cache/old-packages/tmp.XXXXXX")
        trap 'rm -rf "$tmp"' EXIT
        mkdir "$tmp/src"
        git -C "$src" archive "$full" | tar -x -C "$tmp/src"
        out=$("$here/build-packages.sh" "$kind" "$tmp/src" "$tmp/out") || exit 1
        rm -rf "$dest"
        mkdir -p "$dest"
        find "$out" -maxdepth 1 -type f \( -name '*.deb' -o -name '*.rpm' \) -exec mv -t "$dest" {} +
        touch "$dest/.done"
fi
echo "$dest"
