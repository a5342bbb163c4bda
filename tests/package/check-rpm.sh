#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# check-rpm.sh — builds the .rpm, lints it, installs, upgrades and erases it in scratch roots.
#
# Contract: `check-rpm.sh SRCDIR BUILDDIR`. 1) rpmbuild (build-packages.sh rpm; on
# Debian with fallbacks for the Fedora macros). 2) rpmlint with packaging/rpm's
# config and filters: any E: or W: line fails. 3) As root, in overlays on the cached
# bookworm root of the install test (make-root.sh; it has the /bin/sh,
# systemd-sysusers, systemd-tmpfiles, getfacl/setfacl and libraries the scriptlets
# and kgpu-probed need), each in a private mount namespace: `rpm --root=R --initdb`
# and `rpm --root=R -i --nodeps`, then checks that every file of the package is in R
# (`rpm -V`), that %post created the users kgpu, kgpu-broker and kgpu-cluster, that the kubelet's
# directories (made before, 0750 and 0755) keep their mode, owner and ACL and that
# %post made no NFD or CDI directory; with kgpu's label file and CDI specs and another
# vendor's files put in place (as a running probe and others would), `rpm -e` removes
# the package's files and kgpu's outputs (%preun) and keeps the others and the
# kubelet's directories as they were. 4) The upgrade from the previous release
# (old-packages.sh rpm: 0.1.0 from git history): 0.1.0 installed on a node whose
# kubelet directories are in use adds its kgpu ACL entries and makes NFD's directory;
# `rpm -U` to this package takes back exactly those (%triggerun). Without root step 3
# and 4 are skipped (said so), step 4 also without git history; exit 77 when rpmbuild
# or rpmlint is missing.
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
old=
if old=$("$src/tests/package/old-packages.sh" rpm "$src"); then
        old=$(ls "$old"/kgpu-[0-9]*.rpm | head -n1)
else
        [ $? = 77 ] || fail=1
        echo "SKIP: upgrade from the previous release: its package cannot be built here"
        old=
fi
work=$(mktemp -d /var/tmp/kgpu-rpmroot.XXXXXX)
trap 'rm -rf "$work"' EXIT
# In a private mount namespace: the overlay goes away with it, the cache stays as it is.
# Everything in the root is done through chroot: its /var/run is a link to /run.
pkg=$pkg old=$old root=$root work=$work unshare -m --propagation private sh -eu -c '
        # The overlays upper and work directories on a tmpfs: overlayfs refuses an upper
        # directory on overlayfs (a container whose root is one, as a fresh CI machine).
        mount -t tmpfs -o size=2g,mode=0700 tmpfs "$work"
        fail=0
        ok() { echo "ok: $*"; }
        bad() { echo "FAIL: $*"; fail=1; }
        newroot() {
                rm -rf "$work/$1"; mkdir -p "$work/$1/upper" "$work/$1/work" "$work/$1/merged"
                m=$work/$1/merged
                mount -t overlay overlay -o "lowerdir=$root,upperdir=$work/$1/upper,workdir=$work/$1/work" "$m"
                mount -t proc proc "$m/proc"    # systemd-tmpfiles in %post needs it
                rpm --root="$m" --initdb
        }
        in_root() { chroot "$m" sh -eu -c "$1"; }
        # The kubelet made its directories (0750, and one 0755) and uses them.
        kubelet_dirs() {
                in_root "mkdir -p -m 0750 /var/lib/kubelet /var/lib/kubelet/device-plugins
                         mkdir -p -m $1 /var/lib/kubelet/pod-resources
                         echo {} > /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
        }
        kubelet_state() {
                in_root "for d in /var/lib/kubelet /var/lib/kubelet/device-plugins /var/lib/kubelet/pod-resources; do
                                 stat -c \"%n %a %U %G\" \$d; getfacl -cpE \$d; done"
        }

        # --- install, erase ---------------------------------------------------------
        newroot install
        kubelet_dirs 0755
        before=$(kubelet_state)
        if ! rpm --root="$m" -i --nodeps "$pkg" >"$work/install.log" 2>&1; then
                cat "$work/install.log"; echo "FAIL: rpm -i"; exit 1
        fi
        cat "$work/install.log"
        ok "rpm --root -i --nodeps"
        n=$(rpm --root="$m" -ql kgpu | wc -l)
        if v=$(rpm --root="$m" -V --nodeps kgpu 2>&1) && [ -z "$v" ]; then
                ok "rpm -V: all $n files in place, unchanged"
        else
                printf "%s\n" "$v"; bad "rpm -V"
        fi
        for u in kgpu kgpu-broker kgpu-cluster; do
                if grep -q "^$u:" "$m/etc/passwd"; then ok "%post created user $u"
                else bad "%post did not create user $u"; fi
        done
        if [ "$(kubelet_state)" = "$before" ]; then ok "%post left the kubelet directories as they were (mode, owner, ACL)"
        else printf "%s\n--- now\n%s\n" "$before" "$(kubelet_state)"; bad "%post changed the kubelet directories"; fi
        if in_root "test ! -e /etc/kubernetes && test ! -e /run/cdi"; then ok "%post made no NFD or CDI directory"
        else bad "%post made /etc/kubernetes or /run/cdi"; fi
        # What a running probe writes, and other vendors files beside them.
        in_root "mkdir -p /etc/kubernetes/node-feature-discovery/features.d /var/run/cdi
                 cd /etc/kubernetes/node-feature-discovery/features.d
                 printf \"gpu.intel.com/tiles=1\nnvidia.com/gpu.count=1\n\" > kgpu
                 echo vendor.example.com/x=1 > other-labeler
                 cd /var/run/cdi
                 echo {} > kgpu-intel-gpu.json; echo x > kgpu-nvidia.yaml; echo x > other-vendor.yaml"
        if rpm --root="$m" -e kgpu && [ ! -e "$m/usr/libexec/kgpu-brokerd" ] && [ ! -e "$m/usr/bin/kgpuctl" ]; then
                ok "rpm -e removes the files"
        else
                bad "rpm -e"
        fi
        if in_root "cd /etc/kubernetes/node-feature-discovery/features.d && test ! -e kgpu && test -e other-labeler
                    cd /var/run/cdi && test ! -e kgpu-intel-gpu.json && test ! -e kgpu-nvidia.yaml && test -e other-vendor.yaml"; then
                ok "%preun removed kgpu labels and CDI specs, kept the other vendors files"
        else
                in_root "ls -l /etc/kubernetes/node-feature-discovery/features.d /var/run/cdi" || true
                bad "rpm -e: kgpu outputs left or others removed"
        fi
        if [ "$(kubelet_state)" = "$before" ]; then ok "after rpm -e the kubelet directories are as they were"
        else bad "rpm -e changed the kubelet directories"; fi
        umount "$m/proc" "$m"

        # --- upgrade from the previous release ----------------------------------------
        if [ -n "$old" ]; then
                newroot upgrade
                kubelet_dirs 0750
                before=$(kubelet_state)
                rpm --root="$m" -i --nodeps "$old" >"$work/old.log" 2>&1 || { cat "$work/old.log"; bad "rpm -i $old"; }
                acl=$(in_root "getfacl -cpE /var/lib/kubelet/device-plugins")
                case $acl in
                *group:kgpu:rwx*default:group:kgpu:rw*) ok "the previous release added its kgpu ACL entries (as it did)" ;;
                *) printf "%s\n" "$acl"; bad "the previous release did not add its ACL entries: the upgrade test tests nothing" ;;
                esac
                if rpm --root="$m" -U --nodeps "$pkg" >"$work/upgrade.log" 2>&1; then
                        ok "rpm -U $(basename "$old") -> $(basename "$pkg")"
                else
                        cat "$work/upgrade.log"; bad "rpm -U"
                fi
                if [ "$(kubelet_state)" = "$before" ]; then
                        ok "after the upgrade the kubelet directories are as the kubelet made them (kgpu ACL entries taken back)"
                else
                        printf "%s\n--- now\n%s\n" "$before" "$(kubelet_state)"; bad "the upgrade left the kubelet directories changed"
                fi
                if in_root "test ! -e /etc/kubernetes"; then ok "the upgrade removed the empty NFD directories the previous release made"
                else bad "/etc/kubernetes left after the upgrade"; fi
                umount "$m/proc" "$m"
        fi
        exit $fail
' || fail=1
exit $fail
