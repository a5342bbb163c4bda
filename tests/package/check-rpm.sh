#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# check-rpm.sh — builds the .rpm, lints it, installs it into a scratch root.
#
# Contract: `check-rpm.sh SRCDIR BUILDDIR`. 1) rpmbuild (build-packages.sh rpm; on
# Debian with fallbacks for the Fedora macros). 2) rpmlint with packaging/rpm's
# config and filters: any E: or W: line fails. 3) As root: `rpm --root=R --initdb` and
# `rpm --root=R -i --nodeps` into R, an overlay on the cached bookworm root of the
# install test (make-root.sh; it has the /bin/sh, systemd-sysusers and
# systemd-tmpfiles the scriptlets call), then checks that every file of the package
# is in R (`rpm --root=R -V`), that %post created the users kgpu and kgpu-broker and
# the kubelet directory with the kgpu group's ACL, and that `rpm -e` removes the files
# again. Without root step 3 is skipped (said so); exit 77 when rpmbuild or rpmlint is
# missing.
set -eu

src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
for t in rpmbuild rpmlint rpm; do
        command -v $t >/dev/null || { echo "SKIP: $t is not installed"; exit 77; }
done
fail=0
rpmdir=$("$src/tests/package/build-packages.sh" rpm "$src" "$build/tests/package/pkg-out")
pkg=$(ls "$rpmdir"/kgpu-[0-9]*.rpm | head -n1)
echo "package: $pkg"

out=$(rpmlint -c "$src/packaging/rpm/rpmlint.toml" -r "$src/packaging/rpm/kgpu.rpmlintrc" "$pkg" 2>&1) || true
printf '%s\n' "$out" | grep -E '^[^ ]+: [EW]: |packages and' || true
if printf '%s\n' "$out" | grep -qE '^[^ ]+: [EW]: '; then
        echo "FAIL: rpmlint reports errors or warnings"
        fail=1
else
        echo "ok: rpmlint: no errors, no warnings"
fi

if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
        echo "SKIP: rpm --root install needs root"
        exit $fail
fi
root=$("$src/tests/package/make-root.sh") || { echo "SKIP: no bookworm root for the scriptlets"; exit $fail; }
work=$(mktemp -d /var/tmp/kgpu-rpmroot.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/upper" "$work/work" "$work/merged"
# In a private mount namespace: the overlay goes away with it, the cache stays as it is.
pkg=$pkg root=$root work=$work unshare -m --propagation private sh -eu -c '
        m=$work/merged
        mount -t overlay overlay -o "lowerdir=$root,upperdir=$work/upper,workdir=$work/work" "$m"
        mount -t proc proc "$m/proc"    # systemd-tmpfiles in %post needs it
        fail=0
        rpm --root="$m" --initdb
        if ! rpm --root="$m" -i --nodeps "$pkg" >"$work/install.log" 2>&1; then
                cat "$work/install.log"; echo "FAIL: rpm -i"; exit 1
        fi
        cat "$work/install.log"
        echo "ok: rpm --root -i --nodeps"
        n=$(rpm --root="$m" -ql kgpu | wc -l)
        if v=$(rpm --root="$m" -V --nodeps kgpu 2>&1) && [ -z "$v" ]; then
                echo "ok: rpm -V: all $n files in place, unchanged"
        else
                printf "%s\n" "$v"; echo "FAIL: rpm -V"; fail=1
        fi
        for u in kgpu kgpu-broker; do
                if grep -q "^$u:" "$m/etc/passwd"; then echo "ok: %post created user $u"
                else echo "FAIL: %post did not create user $u"; fail=1; fi
        done
        acl=$(chroot "$m" getfacl -p /var/lib/kubelet/device-plugins 2>/dev/null || true)
        case $acl in
        *group:kgpu:rwx*) echo "ok: %post applied tmpfiles.d (kgpu ACL on device-plugins)" ;;
        *) printf "%s\n" "$acl"; echo "FAIL: no kgpu ACL on /var/lib/kubelet/device-plugins"; fail=1 ;;
        esac
        if rpm --root="$m" -e kgpu && [ ! -e "$m/usr/libexec/kgpu-brokerd" ] && [ ! -e "$m/usr/bin/kgpuctl" ]; then
                echo "ok: rpm -e removes the files"
        else
                echo "FAIL: rpm -e"; fail=1
        fi
        exit $fail
' || fail=1
exit $fail
