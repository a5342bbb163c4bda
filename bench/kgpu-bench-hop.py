#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# kgpu-bench-hop.py — the broker hop alone, over the system bus and over the peer socket.
#
# Starts a node (tests/integration/harness.py: private dbus-daemon with the project's
# policy, the three daemons from --build-root, log level info) and calls
# Broker1.PreStartContainer (no decision, no disk) from one process over two
# connections: the bus (through dbus-daemon) and the broker's peer socket (direct). After
# 200 warm-up calls on each, --blocks blocks of --calls calls alternate between the two,
# the order flipping every block, so both see the same minute of the machine. Prints
# p50, p90, p99 per transport (client-side wall time, dbus-python's own cost included on
# both). Needs root (as the tests) or runs as the caller on a permissive bus.
#
#   sudo /usr/bin/python3 bench/kgpu-bench-hop.py --build-root build
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'tests', 'integration'))

import dbus  # noqa: E402

import harness  # noqa: E402
from harness import RES_I915, GPU_I915  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build-root', required=True)
    ap.add_argument('--blocks', type=int, default=20)
    ap.add_argument('--calls', type=int, default=250, help='calls per block')
    args = ap.parse_args()
    os.environ['KGPU_BUILD_ROOT'] = os.path.abspath(args.build_root)
    node = harness.Node(build_root=os.path.abspath(args.build_root), extra_env={'KGPU_LOG_LEVEL': 'info'}).start()
    try:
        bus = dbus.bus.BusConnection(node.bus_address)
        peer = dbus.connection.Connection('unix:path=' + node.broker_socket)
        ways = (('bus', bus, harness.BROKER_BUS), ('peer socket', peer, None))

        def call(conn, dest):
            conn.call_blocking(dest, harness.BROKER_PATH, harness.BROKER_BUS, 'PreStartContainer', 'sas',
                               [RES_I915, [GPU_I915]], timeout=5)

        for _ in range(200):
            for _, conn, dest in ways:
                call(conn, dest)
        res = {name: [] for name, _, _ in ways}
        for block in range(args.blocks):
            for name, conn, dest in (ways if block % 2 else ways[::-1]):
                for _ in range(args.calls):
                    t = time.perf_counter_ns()
                    call(conn, dest)
                    res[name].append((time.perf_counter_ns() - t) / 1e6)
        print('load average %.2f' % os.getloadavg()[0])
        for name, v in res.items():
            v.sort()
            print('PreStartContainer over the %-11s n=%d p50 %.3f p90 %.3f p99 %.3f ms' % (
                name, len(v), v[len(v) // 2], v[int(len(v) * 0.9)], v[int(len(v) * 0.99)]))
    finally:
        node.stop()


if __name__ == '__main__':
    main()
