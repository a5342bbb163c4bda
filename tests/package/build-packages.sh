#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# build-packages.sh — builds the .deb and/or .rpm of the working tree into OUTDIR.
#
# Contract: `build-packages.sh deb|rpm SRCDIR OUTDIR`. The tracked and untracked (not
# ignored) files of SRCDIR (outside git: all but build*/) are copied to a scratch
# tree, so what is tested is the working tree, not the last commit. Results are
# cached: OUTDIR/<kind>-<hash>/ keeps the packages of a tree whose content hash is
# <hash> (only the newest of each kind is kept); the script prints that directory.
# Concurrent callers serialise on OUTDIR/.lock-<kind>. Build logs go to
# OUTDIR/<kind>-<hash>.log; on failure its tail is printed and the exit status is 1.
set -eu

kind=$1 src=$(cd "$2" && pwd) out=$3
mkdir -p "$out"
out=$(cd "$out" && pwd)

# Content hash of every file that goes into the package build.
# Outside a git checkout (a release tarball): every file but build directories.
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        files=$(cd "$src" && git ls-files --cached --others --exclude-standard -z | xargs -0 -n1 sh -c 'test -f "$0" && echo "$0"' | LC_ALL=C sort)
else
        files=$(cd "$src" && find . -type f ! -path './build*' ! -path './obj-*' ! -path './debian/*' | sed 's|^\./||' | LC_ALL=C sort)
fi
hash=$(cd "$src" && printf '%s\n' "$files" | tr '\n' '\0' | xargs -0 sha256sum | sha256sum | cut -c1-16)
dest=$out/$kind-$hash
log=$out/$kind-$hash.log

exec 9>"$out/.lock-$kind"
flock 9
if [ -f "$dest/.done" ]; then
        echo "$dest"
        exit 0
fi
rm -rf "$dest" "$out/$kind-tree"
mkdir -p "$dest"
# The tree's own version (meson.build), so an older tree builds its own packages too.
version=$(sed -n "s/^ *version *: *'\([^']*\)',.*/\1/p" "$src/meson.build" | head -n1)
[ -n "$version" ] || { echo "no version in $src/meson.build" >&2; exit 1; }
tree=$out/$kind-tree/kgpu-$version
mkdir -p "$tree"
(cd "$src" && printf '%s\n' "$files" | tr '\n' '\0' | xargs -0 cp --parents -t "$tree")

fail() {
        echo "$kind package build failed; last lines of $log:" >&2
        tail -n 40 "$log" >&2
        exit 1
}

case $kind in
deb)
        cp -r "$tree/packaging/deb/debian" "$tree/debian"
        (cd "$tree" && dpkg-buildpackage -us -uc -b) >"$log" 2>&1 || fail
        mv "$out/$kind-tree/"*.deb "$out/$kind-tree/"*.changes "$out/$kind-tree/"*.buildinfo "$dest/"
        ;;
rpm)
        top=$out/$kind-tree/rpmbuild
        mkdir -p "$top/SOURCES"
        (cd "$out/$kind-tree" && tar -cJf "$top/SOURCES/kgpu-$version.tar.xz" "kgpu-$version")
        # On Debian the BuildRequires are Debian packages rpm cannot see (--nodeps),
        # and there is no find-debuginfo (no debuginfo package, so nothing strips the
        # binaries as Fedora does); Debian's brp-compress is bash run as /bin/sh
        # (dash), so it is called through bash.
        if [ -e /etc/debian_version ]; then
                set -- --nodeps --define "debug_package %{nil}" \
                        --define "__os_install_post bash /usr/lib/rpm/brp-compress /usr; find \"\$RPM_BUILD_ROOT/usr/bin\" \"\$RPM_BUILD_ROOT/usr/libexec\" -type f -exec strip --strip-unneeded {} +"
        else
                set --
        fi
        rpmbuild --define "_topdir $top" "$@" -bb "$tree/packaging/rpm/kgpu.spec" >"$log" 2>&1 || fail
        find "$top/RPMS" -name '*.rpm' -exec mv -t "$dest" {} +
        ;;
*)
        echo "usage: build-packages.sh deb|rpm SRCDIR OUTDIR" >&2
        exit 2
        ;;
esac
rm -rf "$out/$kind-tree"
touch "$dest/.done"
# Keep only the newest packages of each kind.
for d in "$out/$kind"-*; do
        [ "$d" = "$dest" ] || [ "$d" = "$log" ] || rm -rf "$d"
done
echo "$dest"
