#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# test-install.sh — builds the .deb, installs it into a debootstrapped bookworm root
# booted with systemd-nspawn, and runs in-container.py there.
#
# Contract: `test-install.sh SRCDIR BUILDDIR [SYSTEM_BUS]`, SYSTEM_BUS dbus-daemon (the
# default, Debian's) or dbus-broker (a root whose system bus is dbus-broker, as on Fedora
# and Arch: make-root.sh --system-bus=dbus-broker; in-container.py checks that bus and
# runs the same steps on it). Needs root, debootstrap, systemd-nspawn,
# dpkg-buildpackage and the Debian archive the first time (the root is cached under
# $KGPU_TEST_CACHE, default /var/cache/kgpu-test, see make-root.sh). Exits 77 (skip)
# when a prerequisite is missing, 0 when every in-container check passed, 1 otherwise
# (with the container's log). The container boots with --volatile=overlay, so the
# cached root is never changed. On hosts where /run is not a tmpfs (no systemd as
# PID 1), nspawn refuses to clean /run/systemd/nspawn, so it runs in a private mount
# namespace with a tmpfs there. KGPU_PKGTEST_KEEP=1 keeps the work directory.
set -eu

src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
system_bus=${3:-dbus-daemon}
here=$src/tests/package

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root"
for t in debootstrap systemd-nspawn dpkg-buildpackage dh unshare flock; do
        command -v $t >/dev/null || skip "$t is not installed (scripts/setup-deps.sh)"
done
testbed=$build/tests/testbed/kgpu-testbed
[ -x "$testbed" ] || skip "no $testbed (tests disabled?)"
if ldd "$testbed" | grep -q -e libasan -e libubsan; then
        skip "sanitizer build: the package test runs in the normal build"
fi

t0=$(date +%s)
root=$("$here/make-root.sh" --system-bus="$system_bus")
t1=$(date +%s)
debdir=$("$here/build-packages.sh" deb "$src" "$build/tests/package/pkg-out")
t2=$(date +%s)
echo "root: $root ($((t1 - t0)) s, system bus $system_bus), packages: $debdir ($((t2 - t1)) s)"

work=$(mktemp -d /var/tmp/kgpu-pkgtest.XXXXXX)
cleanup() {
        if [ "${KGPU_PKGTEST_KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
payload=$work/payload results=$work/results
mkdir -p "$payload/proto" "$results"
cp "$debdir"/kgpu_*.deb "$testbed" "$src/tests/data/testbeds/two-gpus.umockdev" \
   "$src/tests/integration/kubelet_sim.py" "$here/in-container.py" \
   "$here/kgpu-testbed.service" "$here/probe-testbed.conf" "$here/kgpu-kubelet-sim.service" \
   "$here/in_container_cluster.py" "$src/tests/integration/apiserver_sim.py" \
   "$src"/tests/integration/apisim_*.py "$payload/"
cp "$src"/daemons/grpc/proto/*.proto "$payload/proto/"
echo "$system_bus" >"$payload/system-bus"
# The fake NVIDIA tools and their recordings (the MPS section of in-container.py).
mkdir -p "$payload/fake-nvidia" "$payload/data"
cp "$src"/tests/fake-nvidia/fake_nvidia.py "$src"/tests/fake-nvidia/nvidia-smi \
   "$src"/tests/fake-nvidia/nvidia-cuda-mps-control "$payload/fake-nvidia/"
cp -r "$src/tests/data/nvidia" "$payload/data/"

set -- systemd-nspawn --quiet --register=no --keep-unit -D "$root" --volatile=overlay \
        --machine=kgpu-pkgtest --private-network \
        --bind-ro="$payload:/kgpu-test" --bind="$results:/kgpu-results" \
        --bind-ro="$here/kgpu-pkgtest.service:/etc/systemd/system/kgpu-pkgtest.service" \
        -b systemd.wants=kgpu-pkgtest.service
if [ "$(stat -f -c %T /run)" != tmpfs ]; then
        set -- unshare -m --propagation private sh -c \
                'mkdir -p /run/systemd/nspawn && mount -t tmpfs tmpfs /run/systemd/nspawn && exec "$@"' sh "$@"
fi
rc=0
timeout 480 "$@" >"$work/console.log" 2>&1 </dev/null || rc=$?
t3=$(date +%s)
cat "$results/log" 2>/dev/null || true
echo "container: nspawn exit $rc, $((t3 - t2)) s; total $((t3 - t0)) s"
if [ "$(cat "$results/rc" 2>/dev/null)" != 0 ]; then
        echo "--- container console (last 60 lines)"
        tail -n 60 "$work/console.log"
        echo "FAIL: in-container checks (rc $(cat "$results/rc" 2>/dev/null || echo none))"
        exit 1
fi
echo "PASS"
