#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_broker_crash.py — acknowledged allocations survive kill -9 of the broker.
#
# Asserts: after N=10 Allocate calls acknowledged through grpcd, alternating between the
# two GPUs, Broker1.ListAllocations lists the last one of each GPU (an Allocate of an id
# supersedes the older allocation of it: the kubelet hands an id to a new container only
# once the old one is gone); the broker is killed with SIGKILL; while it is down an
# Allocate through grpcd fails with gRPC UNAVAILABLE in under 2 s (no hang); the
# restarted broker lists exactly the same allocations (ids, resources, device ids,
# times); Allocate through grpcd works again on the kubelet's existing connection (grpcd
# does not re-register, its ListAndWatch stream stays open) and replaces the i915 GPU's
# allocation with a newer one.

import signal
import time

import grpc

import harness
from harness import check, TWO_GPUS, RES_I915, RES_XE

N = 10


def run(node):
    res_order = [RES_I915, RES_XE]
    for i in range(N):
        res = res_order[i % 2]
        gpu = TWO_GPUS[res][0]
        c = node.kubelet.plugin(res).allocate([gpu])
        check(len(c['devices']) == 2, 'Allocate %d: %r' % (i, c))
    before = sorted(node.list_allocations())
    check([(a[0], a[1], a[2]) for a in before] == [(N - 1, RES_I915, [TWO_GPUS[RES_I915][0]]),
                                                   (N, RES_XE, [TWO_GPUS[RES_XE][0]])],
          'ListAllocations after %d Allocates: %r' % (N, before))

    broker = node.daemons['broker']
    broker.send_signal(signal.SIGKILL)
    broker.proc.wait(5)
    node.wait_bus_name_gone(harness.BROKER_BUS, 5)

    cl = node.kubelet.plugin(RES_I915)
    t0 = time.monotonic()
    try:
        cl.allocate([TWO_GPUS[RES_I915][0]], timeout=10)
        raise AssertionError('Allocate succeeded while the broker was down')
    except grpc.RpcError as e:
        dt = time.monotonic() - t0
        check(e.code() == grpc.StatusCode.UNAVAILABLE,
              'broker down: got %s %r, expected UNAVAILABLE' % (e.code(), e.details()))
        check(dt < 2.0, 'broker down: UNAVAILABLE took %.2f s' % dt)
        print('Allocate while the broker is down: %s after %.1f ms' % (e.code().name, dt * 1e3))

    node.restart_broker()
    after = sorted(node.list_allocations())
    check(after == before, 'allocations after kill -9 differ:\n before %r\n after  %r' % (before, after))

    # The kubelet's connection stays valid: grpcd keeps its sockets and does not need to
    # register again (the kubelet would drop the resource's capacity meanwhile). Retry
    # only UNAVAILABLE, for the moment grpcd needs to see the broker back.
    deadline = time.monotonic() + 5
    while True:
        try:
            c = cl.allocate([TWO_GPUS[RES_I915][0]])
            break
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise AssertionError('Allocate after broker restart: %s %r' % (e.code(), e.details()))
            time.sleep(0.05)
    check(len(c['devices']) == 2, 'Allocate after restart: %r' % c)
    time.sleep(0.3)
    regs = node.kubelet.registrations_since(t0)
    check(not regs, 'grpcd registered again after the broker restart: %r' % regs)
    check(not cl.watch_ended, 'the ListAndWatch stream ended (%s) across the broker restart' % cl.watch_error)
    final = sorted(node.list_allocations())
    check(len(final) == 2 and final[0] == before[1] and final[1][0] > N and final[1][1:3] == before[0][1:3],
          'after restart and one more Allocate of %s: %r' % (RES_I915, final))


if __name__ == '__main__':
    harness.run_test(run)
