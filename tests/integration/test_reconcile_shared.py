#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_reconcile_shared.py — shared resources reconcile right before each decision.
#
# Asserts (intel.sharedDevNum 2, no periodic reconciliation, grace 0): the broker lists
# both Intel resources in HolderDependentResources; every Allocate and
# GetPreferredAllocation of them makes grpcd ask the kubelet's PodResources first (one
# List per call); an allocation whose pod is gone is released by the reconciliation
# that precedes the next Allocate, before that one is recorded; with PodResources down
# the Allocate still goes through within 2 s; with sharedDevNum 1
# the property is empty and Allocate asks the kubelet nothing.

import time

import harness
from harness import check, RES_I915, RES_XE, GPU_I915, GPU_XE

ENV = {'KGPU_RECONCILE_INTERVAL_SEC': '0', 'KGPU_RECONCILE_GRACE_SEC': '0'}


def holder_dependent(node):
    return sorted(node.busctl('get-property', harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS,
                              'HolderDependentResources')['data'])


def run(node):
    node.kubelet.wait_connected([RES_I915, RES_XE], timeout=10)
    check(holder_dependent(node) == sorted([RES_I915, RES_XE]), 'property %r' % holder_dependent(node))
    i915 = node.kubelet.plugin(RES_I915)
    i915.wait_update(lambda d: len(d) == 2, timeout=5)
    time.sleep(0.3)  # grpcd reads the property after ListResources
    a, b = GPU_I915 + '-0', GPU_I915 + '-1'

    n = node.kubelet.list_calls
    i915.allocate([a])
    check(node.kubelet.list_calls == n + 1, 'Allocate: %d PodResources List calls' % (node.kubelet.list_calls - n))
    (first,) = [x[0] for x in node.list_allocations()]

    node.kubelet.set_pods([('p1', 'ns', [('c', [(RES_I915, [a])])])])
    n = node.kubelet.list_calls
    pref = i915.get_preferred_allocation([b], [], 1)
    check(pref == [b], 'preferred %r' % pref)
    check(node.kubelet.list_calls == n + 1, 'GetPreferredAllocation: %d List calls' % (node.kubelet.list_calls - n))
    i915.allocate([b])
    check(len(node.list_allocations()) == 2, 'p1 released although reported: %r' % node.list_allocations())

    # p1 ends; p2 (on b) is reported; the next Allocate first releases p1's allocation
    node.kubelet.set_pods([('p2', 'ns', [('c', [(RES_I915, [b])])])])
    i915.allocate([a])
    ids = [x[0] for x in node.list_allocations()]
    check(first not in ids and len(ids) == 2, 'p1 not released before the Allocate: %r' % ids)

    # PodResources down: the Allocate of a shared resource still goes through, promptly
    node.kubelet._pr_server.stop(0).wait(2)
    t0 = time.monotonic()
    node.kubelet.plugin(RES_XE).allocate([GPU_XE + '-0'])
    check(time.monotonic() - t0 < 2.0, 'Allocate with PodResources down took %.1f s' % (time.monotonic() - t0))
    node.kubelet._start_pod_resources()

    # unshared: nothing to ask (the reconciliation when the broker comes back, with no pod
    # reported, releases everything)
    node.kubelet.set_pods([])
    node.daemons['broker'].stop()
    node.config_extra = ''
    with open(node.config_file) as f:
        text = f.read().replace('sharedDevNum: 2', 'sharedDevNum: 1')
    with open(node.config_file, 'w') as f:
        f.write(text)
    node.restart_broker()
    node.wait_for(lambda: check(holder_dependent(node) == [], 'property %r' % holder_dependent(node)), 5,
                  what='empty HolderDependentResources')
    i915.wait_update(lambda d: [x['id'] for x in d] == [GPU_I915], timeout=5)
    node.wait_for(lambda: check(node.list_allocations() == [], 'not released'), 5, what='release at restart')
    time.sleep(0.3)
    n = node.kubelet.list_calls
    i915.allocate([GPU_I915])
    check(node.kubelet.list_calls == n, 'unshared Allocate asked the kubelet')


if __name__ == '__main__':
    harness.run_test(run, extra_env=ENV, config_extra='intel:\n  sharedDevNum: 2\n')
