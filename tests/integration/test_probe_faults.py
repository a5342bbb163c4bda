#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_probe_faults.py — the probe dies; the broker is restarted while the probe is down.
#
# Asserts: after SIGKILL of the probe, the broker and grpcd keep serving the last
# inventory (ListResources, ListAndWatch unchanged, Allocate works); a broker restarted
# while the probe is still down serves the inventory saved in its state database (both
# resources listed, Allocate works and supersedes the allocation of the same GPU made
# before the restart, grpcd keeps its registrations); a GPU removed while
# the probe is down is gone once the probe is back (the broker resynchronizes: its
# resource lists no device, ListAndWatch sends the empty list), the other stays.

import signal
import time

import harness
from harness import check, RES_I915, RES_XE, GPU_I915, GPU_XE


def resources(node):
    return sorted(r[0] for r in node.busctl('call', harness.BROKER_BUS, harness.BROKER_PATH,
                                            harness.BROKER_BUS, 'ListResources')['data'][0])


def run(node):
    node.kubelet.wait_connected([RES_I915, RES_XE], timeout=10)
    i915 = node.kubelet.plugin(RES_I915)
    _, before = i915.wait_update(lambda d: len(d) == 1, timeout=5)

    node.daemons['probe'].send_signal(signal.SIGKILL)
    node.daemons['probe'].proc.wait(5)
    node.wait_bus_name_gone(harness.PROBE_BUS)
    time.sleep(0.5)
    check(resources(node) == sorted([RES_I915, RES_XE]), 'probe down: resources %r' % resources(node))
    check(i915.devices() == before, 'probe down: ListAndWatch changed to %r' % i915.devices())
    i915.allocate([GPU_I915])

    # the broker restarted while the probe is down serves the saved inventory
    regs = len(node.kubelet.registrations)
    node.daemons['broker'].stop()
    node.restart_broker()
    node.wait_for(lambda: check(resources(node) == sorted([RES_I915, RES_XE]), 'no saved inventory'), 5,
                  what='saved inventory')
    node.wait_for(lambda: check('saved by the last run' in node.daemons['broker'].log_text(), 'not logged'), 3,
                  what='saved inventory log')
    first = node.list_allocations()
    node.kubelet.plugin(RES_XE).allocate([GPU_XE])
    i915.allocate([GPU_I915])
    # The i915 GPU's allocation made before the restart is superseded by this one.
    now = sorted(node.list_allocations(), key=lambda a: a[1])
    check([(a[1], a[2]) for a in now] == [(RES_I915, [GPU_I915]), (RES_XE, [GPU_XE])] and
          now[0][0] > max(a[0] for a in first), 'allocations %r, before the restart %r' % (now, first))
    time.sleep(0.5)
    check(i915.devices() == before, 'broker restarted: ListAndWatch changed to %r' % i915.devices())
    check(len(node.kubelet.registrations) == regs, 'grpcd re-registered after the broker restart')

    # a GPU goes away while the probe is down; the probe comes back: resync
    xe = node.kubelet.plugin(RES_XE)
    node.testbed_cmd('remove ' + GPU_XE)
    t0 = time.monotonic()
    node.start_probe()
    node.wait_bus_name(harness.PROBE_BUS, 10, node.daemons['probe'])
    xe.wait_update(lambda d: d == [], after=t0, timeout=5)
    devs = node.busctl('call', harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS, 'GetDevices', 's',
                       RES_XE)['data'][0]
    check(devs == [], 'xe devices after the resync: %r' % devs)
    print('resync after the probe returned: %.0f ms' % ((time.monotonic() - t0) * 1e3))
    check(i915.devices() == before, 'i915 changed by the resync: %r' % i915.devices())
    i915.allocate([GPU_I915])


if __name__ == '__main__':
    harness.run_test(run)
