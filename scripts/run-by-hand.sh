#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Runs the three daemons from the build tree by hand against a private bus and any
# device-plugins directory, on the real GPUs of this machine (or, with --simulated, on
# the two-GPU umockdev testbed). Prints what to type to poke them; Ctrl-C stops all.
#
#   sudo ./scripts/run-by-hand.sh [--simulated] [BUILD_DIR] [DEVICE_PLUGINS_DIR]
set -eu
cd "$(dirname "$0")/.."
sim=0
[ "${1:-}" = --simulated ] && { sim=1; shift; }
build=$(realpath "${1:-build}")
dp=${2:-$(mktemp -d /tmp/kgpu-device-plugins.XXXXXX)}
tmp=$(mktemp -d /tmp/kgpu-by-hand.XXXXXX)
chmod 0755 "$tmp"   # the daemons that drop privileges reach the bus socket in it
pids=()
cleanup() {
        kill "${pids[@]}" 2>/dev/null || true
        wait 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

[ -x "$build/daemons/grpc/kgpu-grpcd" ] || { echo "Build first: meson setup $build && ninja -C $build"; exit 1; }
mkdir -p "$dp" "$tmp/state"

# A private bus with the project's policy files, like the system bus.
sed -e "s|@BUS_SOCKET@|$tmp/bus|" -e "s|@POLICY_DIR@|$PWD/dbus|" -e "s|@EXTRA_POLICY@||" \
    tests/integration/bus.conf.in >"$tmp/bus.conf"
dbus-daemon --config-file="$tmp/bus.conf" --nofork & pids+=($!)
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$tmp/bus
for _ in $(seq 50); do [ -S "$tmp/bus" ] && break; sleep 0.1; done

probe_env=()
if [ $sim = 1 ]; then
        # Simulated GPUs: keep their labels and CDI spec out of the real /etc and /run.
        probe_env+=(KGPU_LABELS_FEATURE_FILE="$tmp/features.d/kgpu" KGPU_CDI_SPEC_DIRECTORY="$tmp/cdi")
        mkdir -p "$tmp/features.d" "$tmp/cdi"
        mkfifo "$tmp/testbed.in"
        "$build/tests/testbed/kgpu-testbed" two-gpus <"$tmp/testbed.in" >"$tmp/testbed.out" & pids+=($!)
        exec 3>"$tmp/testbed.in"
        for _ in $(seq 50); do grep -q '^ready' "$tmp/testbed.out" 2>/dev/null && break; sleep 0.1; done
        probe_env+=(LD_PRELOAD=libumockdev-preload.so.0 "$(grep '^UMOCKDEV_DIR=' "$tmp/testbed.out")")
fi

# Root is needed for the probe; the others drop to kgpu-broker/kgpu when started as root
# (those users must exist then; use --broker-user/--grpc-user to pick others). The probe
# alone touches the device-plugins directory: it makes grpcd's sockets there and
# connects to the kubelet's for it, so the directory keeps whatever mode it has.
if [ "$(id -u)" = 0 ]; then
        chown "${KGPU_BROKER_USER:-kgpu-broker}" "$tmp/state"
fi
env "${probe_env[@]}" "$build/daemons/probe/kgpu-probed" --device-plugin-path="$dp" & pids+=($!)
"$build/daemons/broker/kgpu-brokerd" --state-directory="$tmp/state" & pids+=($!)
"$build/daemons/grpc/kgpu-grpcd" & pids+=($!)

cat <<EOM

kgpu is running. In another shell:
  export DBUS_SYSTEM_BUS_ADDRESS=$DBUS_SYSTEM_BUS_ADDRESS
  $build/tools/kgpuctl status
  $build/tools/kgpuctl devices
  $build/tools/kgpuctl resources
  ${probe_env[0]:-}${probe_env[0]:+ }$build/tools/kgpuctl labels
  busctl tree io.kgpu.Probe1
  ls -l $dp        # one socket per resource; a kubelet would create kubelet.sock here
Ctrl-C stops everything.
EOM
wait
