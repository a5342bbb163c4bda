#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# demo.sh — install the dependencies, build, run kgpu on a simulated node and show what
# the kubelet sees (scripts/demo.py does the showing; see its --help).
#
# Usage: sudo ./scripts/demo.sh [--keep] [--no-deps]
#   --keep     leave the node running and print how to poke it (Ctrl-C stops it)
#   --no-deps  do not run scripts/setup-deps.sh (also: KGPU_DEMO_NO_DEPS=1)
# Builds in build-demo/ (meson setup on first use). Root is needed for apt-get and to
# run the daemons the way they are deployed (probe as root, the others dropping to the
# kgpu and kgpu-broker users); as non-root it skips the install and runs everything as
# the calling user on a permissive private bus.
set -eu
cd "$(dirname "$0")/.."

no_deps="${KGPU_DEMO_NO_DEPS:-}"
for a in "$@"; do
        [ "$a" = --no-deps ] && no_deps=1
done

if [ -z "$no_deps" ]; then
        if [ "$(id -u)" = 0 ]; then
                echo "==> Installing dependencies (scripts/setup-deps.sh)"
                ./scripts/setup-deps.sh >/tmp/kgpu-demo-deps.log 2>&1 || {
                        tail -20 /tmp/kgpu-demo-deps.log
                        echo "demo: installing dependencies failed (log: /tmp/kgpu-demo-deps.log)" >&2
                        exit 1
                }
        else
                echo "==> Not root: skipping dependency installation (run with sudo to install)"
        fi
fi

echo "==> Building (build-demo/)"
if [ ! -f build-demo/build.ninja ]; then
        meson setup build-demo >/tmp/kgpu-demo-setup.log 2>&1 || {
                tail -30 /tmp/kgpu-demo-setup.log
                exit 1
        }
fi
ninja -C build-demo -j "$(nproc 2>/dev/null || echo 2)" >/tmp/kgpu-demo-build.log 2>&1 || {
        tail -30 /tmp/kgpu-demo-build.log
        echo "demo: build failed (log: /tmp/kgpu-demo-build.log)" >&2
        exit 1
}

exec /usr/bin/python3 scripts/demo.py --build-root build-demo "$@"
