#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_register_retry.py — grpcd retries a registration the kubelet refused.
#
# Asserts: after a kubelet restart in which the simulator refuses the first 3 Register
# calls (gRPC error), both resources still end up registered, within 3 s, with grpcd
# retrying (each refused resource is seen again later); the plugins then serve
# ListAndWatch and Allocate; grpcd stays up. Then a kubelet that is down for 1 s
# (kubelet.sock deleted, nothing listening) and comes back is found again.

import time

import harness
from harness import check, TWO_GPUS


def run(node):
    sim = node.kubelet
    sim.reject_next = 3
    t0 = time.monotonic()
    got = sim.restart(resources=sorted(TWO_GPUS), timeout=10)
    dt = time.monotonic() - t0
    check(len(sim.rejected) == 3, 'refused %d registrations, expected 3' % len(sim.rejected))
    check(dt < 3.0, 'registration after 3 refusals took %.2f s' % dt)
    for res in TWO_GPUS:
        refused = [r for r in sim.rejected if r.resource_name == res]
        if refused:
            check(got[res] > refused[-1].t - sim.created_at,
                  '%s registered before its last refusal' % res)
    clients = sim.wait_connected(sorted(TWO_GPUS), timeout=5)
    for res, (gpu, _, _) in TWO_GPUS.items():
        c = clients[res].allocate([gpu])
        check(len(c['devices']) == 2, '%s Allocate after retried registration: %r' % (res, c))
    print('registered after 3 refusals in %.0f ms (%s)' % (
        dt * 1e3, ', '.join('%s %.0f ms' % (r, v * 1e3) for r, v in sorted(got.items()))))

    # kubelet gone for a while, then back
    sim._stop_servers()
    sim.delete_sockets()
    time.sleep(1.0)
    check(node.daemons['grpc'].alive(), 'grpcd died while the kubelet was away')
    got = sim.restart(resources=sorted(TWO_GPUS), timeout=10)
    check(set(got) == set(TWO_GPUS), 'after a 1 s outage: %r' % got)
    print('after a 1 s kubelet outage: %s' % ', '.join('%s %.1f ms' % (r, v * 1e3) for r, v in sorted(got.items())))


if __name__ == '__main__':
    harness.run_test(run)
