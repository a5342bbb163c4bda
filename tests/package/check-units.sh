#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# check-units.sh — exposure thresholds and `systemd-analyze verify` for kgpu's units.
#
# Contract: `check-units.sh SRCDIR BUILDDIR`. 1) `systemd-analyze security
# --offline=true` on the units generated in BUILDDIR/units must stay at or under
# grpcd 1.5, broker 1.5, probe 4.0 (DESIGN/issue 6 targets), kgpu-clusterd 2.0 (issue
# 14: it needs AF_INET/AF_INET6 and the host's network, limited by IPAddressDeny=), an
# MPS daemon's unit (kgpu-mps@.service, root with CAP_SETUID/CAP_SETGID) 2.0; each score
# is printed. The four daemons' system call filters leave out @privileged and @resources
# (the probe's too, though it is root); kgpu-clusterd's unit holds no device, no
# capability, only AF_UNIX AF_INET AF_INET6 and IPAddressDeny=any.
# 2) The .deb (built or taken from the cache by build-packages.sh) is unpacked into a
# scratch root and `systemd-analyze verify --root=... --man=no` runs on its units: exit
# 0 and nothing at all on stderr. (Man page references are checked in the install test,
# where man-db is present.) 3) Every service unit bounds its memory and tasks (a
# MemoryMax= and a TasksMax= of its own, docs/PERFORMANCE.md). Exit 77 when
# systemd-analyze or dpkg-buildpackage is missing.
set -eu

src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
command -v systemd-analyze >/dev/null || { echo "SKIP: no systemd-analyze"; exit 77; }
fail=0

# The MPS template is scored as an instance (its name: a GPU UUID).
for spec in kgpu-grpcd:1.5 kgpu-brokerd:1.5 kgpu-probed:4.0 kgpu-clusterd:2.0 kgpu-mps@GPU-00000000-0000-0000-0000-000000000000:2.0; do
        unit=${spec%%:*}.service limit=${spec#*:}
        out=$(cd "$build/units" && systemd-analyze security --offline=true --no-pager "$unit" 2>&1) || true
        score=$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
        if [ -z "$score" ]; then
                echo "FAIL: no exposure score for $unit:"; printf '%s\n' "$out" | tail -n 5
                fail=1
        elif awk "BEGIN { exit !($score <= $limit) }"; then
                echo "ok: $unit exposure $score <= $limit"
        else
                echo "FAIL: $unit exposure $score > $limit"
                printf '%s\n' "$out" | grep '✗' || true
                fail=1
        fi
        case $unit in kgpu-mps@*) continue ;; esac
        for set in privileged resources; do
                if printf '%s\n' "$out" | grep -q "✓ SystemCallFilter=~@$set "; then
                        echo "ok: $unit filters out @$set"
                else
                        echo "FAIL: $unit allows @$set:"; printf '%s\n' "$out" | grep "SystemCallFilter=~@$set " || true
                        fail=1
                fi
        done
done

# kgpu-clusterd: what the issue asks of the API server's client, line by line.
cl=$build/units/kgpu-clusterd.service
for want in 'User=kgpu-cluster' 'CapabilityBoundingSet=' 'AmbientCapabilities=' 'PrivateDevices=yes' \
            'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' 'IPAddressDeny=any' 'ProtectSystem=strict' \
            'Restart=on-failure' 'NoNewPrivileges=yes'; do
        if grep -qx "$want" "$cl"; then
                echo "ok: kgpu-clusterd.service: $want"
        else
                echo "FAIL: kgpu-clusterd.service lacks $want"
                fail=1
        fi
done
for bad in '^DeviceAllow=' '^ReadWritePaths=' '^StateDirectory=' '^SupplementaryGroups='; do
        if grep -q "$bad" "$cl"; then
                echo "FAIL: kgpu-clusterd.service has $(grep "$bad" "$cl")"
                fail=1
        fi
done

for unit in kgpu-grpcd kgpu-brokerd kgpu-probed kgpu-clusterd kgpu-mps@; do
        for key in MemoryMax TasksMax; do
                if grep -Eq "^$key=[0-9]+[KMGT]?\$" "$build/units/$unit.service"; then
                        echo "ok: $unit.service $(grep "^$key=" "$build/units/$unit.service")"
                else
                        echo "FAIL: $unit.service has no $key= of its own"
                        fail=1
                fi
        done
done

if ! command -v dpkg-buildpackage >/dev/null; then
        echo "SKIP: no dpkg-buildpackage for verify"
        [ $fail = 0 ] && exit 77
        exit 1
fi
debdir=$("$src/tests/package/build-packages.sh" deb "$src" "$build/tests/package/pkg-out")
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
dpkg-deb -x "$debdir"/kgpu_*.deb "$root"
# verify resolves ExecStart=, ExecReload=, ExecStop= (kill, sh) and the units ours
# depend on inside the root: give it those programs and the host's systemd units (ours
# win).
mkdir -p "$root/usr/lib/systemd/system"
cp -rn /lib/systemd/system/. "$root/usr/lib/systemd/system/" 2>/dev/null || true
for p in /bin/kill /usr/bin/kill /bin/mkdir /usr/bin/mkdir /bin/sh; do
        [ -x "$p" ] && mkdir -p "$root$(dirname "$p")" && cp "$p" "$root$p"
done
err=$(cd "$root" && systemd-analyze verify --root="$root" --man=no \
        lib/systemd/system/kgpu-probed.service lib/systemd/system/kgpu-brokerd.service \
        lib/systemd/system/kgpu-grpcd.service lib/systemd/system/kgpu-clusterd.service \
        lib/systemd/system/kgpu-mps@.service \
        lib/systemd/system/kgpu.target 2>&1 >/dev/null) && rc=0 || rc=$?
if [ "$rc" != 0 ] || [ -n "$err" ]; then
        echo "FAIL: systemd-analyze verify (exit $rc):"; printf '%s\n' "$err"
        fail=1
else
        echo "ok: systemd-analyze verify: exit 0, nothing on stderr"
fi
exit $fail
