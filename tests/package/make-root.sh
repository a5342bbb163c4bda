#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# make-root.sh — prints the path of a cached, debootstrapped Debian bookworm root for
# the package install test, creating it when missing.
#
# Contract: `make-root.sh [--system-bus=dbus-broker] [CACHE_DIR]` (default $KGPU_TEST_CACHE
# or /var/cache/kgpu-test); `make-root.sh --print-mirror` prints the Debian mirror it would
# use, and nothing else. --system-bus=dbus-broker makes a root whose system bus is
# dbus-broker, as on Fedora and Arch: dbus-broker instead of dbus (so no dbus-daemon),
# and dbus-broker.service enabled, which makes it dbus.service (its Alias=).
# The root is named after a hash of the package list below, so changing the list makes
# a new root; it is built in a temporary directory and renamed into place, so a half
# built root is never used. Needs root and the Debian archive (the mirror of the host's
# apt sources, overridable with KGPU_DEBIAN_MIRROR). The root itself is never modified
# afterwards: the test boots it with --volatile=overlay. Exit 0 and the path on stdout,
# or non-zero with the reason on stderr.
set -eu

print_mirror=0
if [ "${1:-}" = --print-mirror ]; then
        print_mirror=1
        shift
fi
system_bus=dbus-daemon
case "${1:-}" in
--system-bus=dbus-broker) system_bus=dbus-broker; shift ;;
--system-bus=dbus-daemon) shift ;;
--system-bus=*) echo "unknown ${1}" >&2; exit 1 ;;
esac
cache=${1:-${KGPU_TEST_CACHE:-/var/cache/kgpu-test}}
# The runtime dependencies of the .deb are in the root so that dpkg -i works offline;
# python3-grpcio/-grpc-tools/-protobuf run the kubelet simulator, umockdev the
# simulated GPUs; acl (getfacl) shows that nothing sets ACLs on the kubelet's
# directories, and has the setfacl the upgrade from 0.1.0 uses; libcurl4 and libjson-c5
# are kgpu-clusterd's, python3-h2 and openssl run the API server simulator and make its
# test PKI.
pkgs=systemd,systemd-sysv,dbus,udev,acl,procps,man-db,python3,python3-grpcio,python3-grpc-tools,python3-pkg-resources,python3-protobuf,umockdev,libnghttp2-14,libprotobuf-c1,libyaml-0-2,libsqlite3-0,libcap-ng0,libcurl4,libjson-c5,python3-h2,openssl

if [ $system_bus = dbus-broker ]; then
        pkgs=$(printf '%s\n' "$pkgs" | sed 's/,dbus,/,dbus-broker,/')
fi

mirror=${KGPU_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
        mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
        [ -n "$mirror" ] || mirror=$(sed -n 's/^deb \(http[^ ]*debian\) bookworm .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -n1)
        [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi
if [ $print_mirror = 1 ]; then
        echo "$mirror"
        exit 0
fi

key=$(printf '%s\n' "$pkgs" | sha256sum | cut -c1-12)
root=$cache/bookworm-$key
if [ -x "$root/usr/lib/systemd/systemd" ]; then
        echo "$root"
        exit 0
fi

command -v debootstrap >/dev/null || { echo "debootstrap is not installed" >&2; exit 1; }
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ ! -x "$root/usr/lib/systemd/systemd" ]; then
        tmp=$(mktemp -d "$cache/tmp.XXXXXX")
        if ! debootstrap --variant=minbase --include="$pkgs" bookworm "$tmp" "$mirror" >"$tmp.log" 2>&1; then
                tail -n 20 "$tmp.log" >&2
                rm -rf "$tmp"
                echo "debootstrap failed (mirror $mirror)" >&2
                exit 1
        fi
        if [ $system_bus = dbus-broker ]; then
                # dbus-broker's postinst enables it already; made sure of here, and no
                # dbus-daemon may have come in through a dependency.
                systemctl --root="$tmp" enable dbus-broker.service >>"$tmp.log" 2>&1
                if [ -e "$tmp/usr/bin/dbus-daemon" ] ||
                   [ "$(readlink "$tmp/etc/systemd/system/dbus.service")" != /lib/systemd/system/dbus-broker.service ]; then
                        ls -l "$tmp/etc/systemd/system/dbus.service" "$tmp/usr/bin/dbus-daemon" >&2 || true
                        rm -rf "$tmp" "$tmp.log"
                        echo "the root's system bus is not dbus-broker alone" >&2
                        exit 1
                fi
        fi
        # The container gets no network and needs no apt lists or cached debs.
        rm -rf "$tmp/var/cache/apt/archives/"*.deb "$tmp/var/lib/apt/lists/"* "$tmp.log"
        rm -rf "$root"
        mv "$tmp" "$root"
fi
echo "$root"
