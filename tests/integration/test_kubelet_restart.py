#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_kubelet_restart.py — grpcd re-registers after every kubelet restart.
#
# Asserts: 20 times (KGPU_KUBELET_RESTARTS), the simulator restarts the way the kubelet does (servers stopped,
# every socket in the device-plugins directory deleted, kubelet.sock recreated) and
# both resources register again within 10 s each time, and the plugin sockets they
# name exist again; a regular file in the directory survives (only sockets deleted);
# grpcd keeps running; after the last restart ListAndWatch and Allocate work through the
# new registration. Prints p50/max re-registration times.

import os
import stat

import harness
from harness import check, TWO_GPUS

ROUNDS = int(os.environ.get('KGPU_KUBELET_RESTARTS', '20'))  # the closing note runs 100


def run(node):
    keep = os.path.join(node.plugin_dir, 'DEPRECATION')
    with open(keep, 'w') as f:
        f.write('not a socket\n')
    lat = []
    for i in range(ROUNDS):
        got = node.kubelet.restart(resources=sorted(TWO_GPUS), timeout=10)
        check(set(got) == set(TWO_GPUS), 'round %d: registrations %r' % (i, got))
        lat += got.values()
        check(node.daemons['grpc'].alive(), 'round %d: grpcd died' % i)
        for res in TWO_GPUS:
            p = os.path.join(node.plugin_dir, 'kgpu-%s.sock' % res.replace('/', '-'))
            node.wait_for(lambda: check(os.path.exists(p) and stat.S_ISSOCK(os.lstat(p).st_mode),
                                        '%s missing' % p), 5, node.daemons['grpc'], p)
    check(os.path.isfile(keep), 'a regular file in the plugin directory was deleted')
    clients = node.kubelet.wait_connected(sorted(TWO_GPUS), timeout=10)
    for res, (gpu, card, render) in TWO_GPUS.items():
        devs = clients[res].devices()
        check([d['id'] for d in devs] == [gpu], '%s after restarts: %r' % (res, devs))
        c = clients[res].allocate([gpu])
        check(len(c['devices']) == 2, '%s: Allocate after restarts %r' % (res, c))
    lat.sort()
    print('re-registration over %d restarts: p50 %.1f ms, max %.1f ms' % (
        ROUNDS, lat[len(lat) // 2] * 1e3, lat[-1] * 1e3))


if __name__ == '__main__':
    harness.run_test(run)
