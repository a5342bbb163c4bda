#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# Install every build and test dependency of kgpu on Debian bookworm, by package name.
set -eu
if [ "$(id -u)" != 0 ]; then
        exec sudo "$0" "$@"
fi
export DEBIAN_FRONTEND=noninteractive
# build-essential: dpkg-buildpackage checks for it (package tests, the README's .deb
# line); python3-dbus: dbus-python (integ-hostile-dbus, integ-nvidia-mps-probe);
# python3-gi: GLib's main loop for dbus-python services (integ-gate's fake broker);
# libglib2.0-bin: gdbus (integ-broker-errors); xz-utils: the .rpm's source tarball;
# podman, crun, runc, busybox-static: a real CDI consumer (integ-cdi-consumer; runc where
# crun refuses hybrid cgroups), with golang-go
# and the CDI library's -dev package as its fallback where podman cannot run;
# libcurl4-openssl-dev, libjson-c-dev: kgpu-clusterd (HTTPS/HTTP2 and JSON toward the API
# server); python3-h2, openssl: the API server simulator (TLS, ALPN h2) and its test PKI;
# dbus-broker: the other system bus daemon (Fedora, Arch), for the bench and install test.
pkgs="
build-essential meson ninja-build gcc clang pkg-config git xz-utils
libsystemd-dev libudev-dev libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler
libyaml-dev libsqlite3-dev libcap-ng-dev check libcurl4-openssl-dev libjson-c-dev
umockdev libumockdev-dev gir1.2-umockdev-1.0 libglib2.0-bin
dbus util-linux sqlite3 libxml2-utils procps psmisc
python3 python3-grpcio python3-grpc-tools python3-protobuf python3-hpack python3-dbus python3-gi
python3-h2 python3-yaml openssl dbus-broker
libclang-rt-14-dev valgrind
debootstrap systemd-container debhelper dpkg-dev lintian rpm rpmlint acl man-db piuparts
podman crun runc busybox-static golang-go golang-github-container-orchestrated-devices-container-device-interface-dev
"
if [ -z "${KGPU_SKIP_APT_UPDATE:-}" ]; then
        apt-get update -q
fi
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $pkgs
