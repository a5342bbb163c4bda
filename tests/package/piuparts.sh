#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# piuparts.sh — Debian's piuparts on the .deb, on bookworm: the package installs,
# removes, purges and upgrades cleanly and touches nothing it does not own.
#
# Contract: `piuparts.sh SRCDIR BUILDDIR`. Four piuparts runs, each from a copy of the
# cached bookworm root of the install test (make-root.sh, `--existing-chroot`; the
# cache is never changed) with the Debian archive of make-root.sh for dependencies:
#   install    install, remove, purge;
#   reinstall  install, remove, install again (config-files state), purge;
#   upgrade    the previous release (old-packages.sh: 0.1.0 from git history, served
#              from a local repository bind-mounted into the chroot), upgrade to this
#              .deb, purge, on a root without kubelet: what 0.1.0 made goes again;
#   upgrade-kubelet  the same on a node whose kubelet made its directories 0750 and
#              uses them: 0.1.0's ACL entries are taken back, nothing else changes.
# piuparts itself fails a run on files left, removed or changed after the purge. Our
# scripts (copied into the chroot, see write_scripts) add: on the install runs the
# kubelet's directories exist before the install with modes 0750 and 0755 and must
# keep their mode, owner and no extended ACL (getfacl) after install, remove and
# purge; NFD's features.d and the CDI directory exist with another vendor's files,
# kgpu's label file and CDI specs are put there as the probe writes them (piuparts
# starts no service), and after the removal kgpu's are gone and the others stay.
# Prints the verdict lines of each run. Exit 0 when every run passed, 1 when one
# failed (its log's tail is printed), 77 where root, piuparts, debootstrap, the
# archive or the network is missing. The upgrade runs are skipped (said so) when the
# previous release cannot be built from git history. KGPU_PIUPARTS_KEEP=1 keeps the
# work directory (logs).
set -eu

src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
here=$src/tests/package

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root"
for t in piuparts debootstrap dpkg-buildpackage dh dpkg-scanpackages flock python3; do
        command -v $t >/dev/null || skip "$t is not installed (scripts/setup-deps.sh)"
done
if ldd "$build/daemons/probe/kgpu-probed" 2>/dev/null | grep -q -e libasan -e libubsan; then
        skip "sanitizer build: the package test runs in the normal build"
fi

mirror=$("$here/make-root.sh" --print-mirror)
if ! python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20).read(1)' \
        "$mirror/dists/bookworm/Release" 2>/dev/null; then
        skip "the Debian archive at $mirror cannot be reached (no network?)"
fi
root=$("$here/make-root.sh") || skip "no bookworm root (debootstrap failed, see above)"
debdir=$("$here/build-packages.sh" deb "$src" "$build/tests/package/pkg-out")
deb=$(ls "$debdir"/kgpu_*.deb | head -n1)
olddir=
if olddir=$("$here/old-packages.sh" deb "$src"); then
        :
else
        rc=$?
        [ $rc = 77 ] || { echo "FAIL: building the previous release's package"; exit 1; }
        olddir=
fi

work=$(mktemp -d /var/tmp/kgpu-piuparts.XXXXXX)
cleanup() {
        if [ "${KGPU_PIUPARTS_KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# write_scripts DIR SCENARIO: piuparts custom scripts (run inside the chroot, as root;
# a non-zero exit fails the run). post_setup runs before piuparts records the
# reference state, so what it makes is the node as it was before kgpu.
write_scripts() {
        d=$1 scenario=$2
        mkdir -p "$d"
        # Named pre_* so that piuparts copies it into the chroot; no step is called
        # "pre_kgpu", so it is only sourced, never run.
        cat >"$d/pre_kgpu_common.inc" <<'EOF'
set -eu
PLUGINS=/var/lib/kubelet/device-plugins PODRES=/var/lib/kubelet/pod-resources
FEATURES=/etc/kubernetes/node-feature-discovery/features.d CDI=/var/run/cdi
step=${0##*/}
step=${step%_kgpu_node}
fail() { echo "FAIL: [$step] $*" >&2; exit 1; }
# dir_is DIR MODE: mode, owner root:root and no extended ACL entry (getfacl -s prints
# nothing for a directory that has only the base entries).
dir_is() {
        [ -d "$1" ] || fail "$1 is gone"
        [ "$(stat -c '%a %U %G' "$1")" = "$2 root root" ] || fail "$1 is $(stat -c '%a %U %G' "$1"), was $2 root root"
        acl=$(getfacl -s -p "$1")
        [ -z "$acl" ] || fail "$1 has ACL entries: $acl"
        echo "ok: [$step] $1 is $2 root root, no ACL entry"
}
EOF
        case $scenario in
        install)
                cat >"$d/post_setup_kgpu_node" <<'EOF'
#!/bin/sh
. /tmp/scripts/pre_kgpu_common.inc
# The kubelet made these (0750 as it does, and 0755 as some nodes have them).
mkdir -p /var/lib/kubelet
mkdir -m 0750 "$PLUGINS"
mkdir -m 0755 "$PODRES"
echo '{}' >"$PLUGINS/kubelet_internal_checkpoint"
# NFD and the container runtime made theirs, with another vendor's files.
mkdir -p "$FEATURES" "$CDI"
echo 'vendor.example.com/thing=1' >"$FEATURES/other-labeler"
echo 'cdiVersion: "0.5.0"' >"$CDI/other-vendor.yaml"
EOF
                cat >"$d/post_install_kgpu_node" <<'EOF'
#!/bin/sh
. /tmp/scripts/pre_kgpu_common.inc
dir_is "$PLUGINS" 750
dir_is "$PODRES" 755
# What a running probe writes (piuparts starts no service).
printf 'gpu.intel.com/millicores=1000\ngpu.intel.com/tiles=1\n' >"$FEATURES/kgpu"
echo '{}' >"$CDI/kgpu-intel-gpu.json"
echo 'cdiVersion: "0.5.0"' >"$CDI/kgpu-nvidia.yaml"
EOF
                cat >"$d/post_remove_kgpu_node" <<'EOF'
#!/bin/sh
. /tmp/scripts/pre_kgpu_common.inc
dir_is "$PLUGINS" 750
dir_is "$PODRES" 755
[ -e "$PLUGINS/kubelet_internal_checkpoint" ] || fail "the kubelet's checkpoint is gone"
for f in "$FEATURES/kgpu" "$CDI/kgpu-intel-gpu.json" "$CDI/kgpu-nvidia.yaml"; do
        [ ! -e "$f" ] || fail "$f is still there after the removal"
done
for f in "$FEATURES/other-labeler" "$CDI/other-vendor.yaml"; do
        [ -e "$f" ] || fail "$f was removed"
done
echo "ok: [$step] kgpu's labels and CDI specs removed, other files kept"
EOF
                cp "$d/post_remove_kgpu_node" "$d/post_purge_kgpu_node"
                ;;
        upgrade)
                # A root without kubelet or NFD: 0.1.0's tmpfiles.d makes their
                # directories; piuparts checks they are gone after the purge.
                cat >"$d/post_install_kgpu_node" <<'EOF'
#!/bin/sh
. /tmp/scripts/pre_kgpu_common.inc
case ${PIUPARTS_PHASE:-} in
install)        # 0.1.0 as it was: else this run tests nothing
        getfacl -cpE "$PLUGINS" | grep -q '^group:kgpu:rwx' || fail "0.1.0 did not make $PLUGINS with its ACL"
        [ -d "$FEATURES" ] || fail "0.1.0 did not make $FEATURES"
        echo "ok: [$step] 0.1.0 made $PLUGINS (kgpu ACL), $PODRES and $FEATURES" ;;
upgrade)
        for p in "$PLUGINS" "$PODRES" /var/lib/kubelet "$FEATURES" /etc/kubernetes; do
                [ ! -e "$p" ] || fail "$p is still there after the upgrade"
        done
        echo "ok: [$step] the upgrade removed the empty directories 0.1.0 made" ;;
esac
EOF
                cat >"$d/post_purge_kgpu_node" <<'EOF'
#!/bin/sh
. /tmp/scripts/pre_kgpu_common.inc
for p in "$PLUGINS" "$PODRES" /var/lib/kubelet "$FEATURES" /etc/kubernetes; do
        [ ! -e "$p" ] || fail "$p is still there"
done
echo "ok: [$step] the directories 0.1.0 made are gone"
EOF
                ;;
        upgrade-kubelet)
                cat >"$d/post_setup_kgpu_node" <<'EOF'
#!/bin/sh
. /tmp/scripts/pre_kgpu_common.inc
mkdir -p /var/lib/kubelet
mkdir -m 0750 "$PLUGINS" "$PODRES"
echo '{}' >"$PLUGINS/kubelet_internal_checkpoint"
echo 'stands for the socket' >"$PODRES/kubelet.sock"
EOF
                cat >"$d/post_install_kgpu_node" <<'EOF'
#!/bin/sh
. /tmp/scripts/pre_kgpu_common.inc
case ${PIUPARTS_PHASE:-} in
install)        # 0.1.0 as it was: else this run tests nothing
        for p in "$PLUGINS" "$PODRES"; do
                getfacl -cpE "$p" | grep -q '^default:group:kgpu:rw' || fail "0.1.0 did not add its ACL entries to $p"
        done
        echo "ok: [$step] 0.1.0 added its kgpu ACL entries to $PLUGINS and $PODRES" ;;
upgrade)
        dir_is "$PLUGINS" 750
        dir_is "$PODRES" 750
        [ ! -e /etc/kubernetes ] || fail "/etc/kubernetes is still there after the upgrade"
        echo "ok: [$step] the upgrade took back 0.1.0's ACL entries and its empty NFD directories" ;;
esac
EOF
                cat >"$d/post_remove_kgpu_node" <<'EOF'
#!/bin/sh
. /tmp/scripts/pre_kgpu_common.inc
# 0.1.0 added group:kgpu and default ACL entries; the upgrade took them back.
dir_is "$PLUGINS" 750
dir_is "$PODRES" 750
[ -e "$PLUGINS/kubelet_internal_checkpoint" ] && [ -e "$PODRES/kubelet.sock" ] || fail "the kubelet's files are gone"
EOF
                cp "$d/post_remove_kgpu_node" "$d/post_purge_kgpu_node"
                ;;
        esac
        chmod 0755 "$d"/post_* "$d"/pre_* 2>/dev/null || true
}

# run NAME SCENARIO PIUPARTS-OPTIONS...: one piuparts run; prints its verdict lines.
fail=0
run() {
        name=$1 scenario=$2
        shift 2
        write_scripts "$work/scripts-$name" "$scenario"
        mkdir -p "$work/tmp"
        log=$work/$name.log
        t0=$(date +%s)
        rc=0
        piuparts --distribution=bookworm --mirror="$mirror" --existing-chroot="$root" \
                --tmpdir="$work/tmp" --scriptsdir="$work/scripts-$name" --log-file="$log" \
                "$@" "$deb" >/dev/null 2>&1 </dev/null || rc=$?
        echo "--- piuparts $name: exit $rc, $(($(date +%s) - t0)) s"
        # Verdicts (piuparts) and our scripts' lines (in the dumped command output).
        grep -E '(INFO|ERROR): (PASS|FAIL|SKIP): |^ *(ok|FAIL): ' "$log" | sed 's/^ */  /' || true
        if [ $rc != 0 ] || ! grep -q 'PASS: All tests' "$log"; then
                echo "  --- last lines of the piuparts log"
                tail -n 40 "$log" | sed 's/^/  /'
                fail=1
        fi
}

run install install --no-upgrade-test
run reinstall install --no-upgrade-test --install-remove-install
if [ -n "$olddir" ]; then
        repo=$work/oldrepo
        mkdir -p "$repo"
        cp "$olddir"/kgpu_*.deb "$repo/"
        (cd "$repo" && dpkg-scanpackages -m . >Packages 2>/dev/null)
        ver=$(dpkg-deb -f "$(ls "$repo"/kgpu_*.deb | head -n1)" Version)
        echo "previous release: kgpu $ver from $olddir"
        for s in upgrade upgrade-kubelet; do
                run "$s" "$s" --no-install-purge-test --bindmount="$repo" \
                        --extra-repo="deb [trusted=yes] file://$repo ./"
        done
else
        echo "SKIP: upgrade runs: the previous release cannot be built here (see above)"
fi

if [ $fail != 0 ]; then
        echo "FAIL: piuparts"
        exit 1
fi
echo "PASS"
