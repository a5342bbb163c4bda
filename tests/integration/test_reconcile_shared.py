#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_reconcile_shared.py — a refused Allocate reconciles with the kubelet and is asked
# once more; nothing else waits for the kubelet.
#
# Asserts (no periodic reconciliation, grace 0): the broker lists both Intel resources in
# HolderDependentResources at intel.sharedDevNum 2; Allocate and GetPreferredAllocation
# of shared resources ask the kubelet's PodResources nothing while the limit is not
# reached (a reconciliation only releases, so it could not change an admission). With
# the limit lowered to 1 while two pods hold shares of the GPU: an Allocate is refused by
# the broker, grpcd lists the kubelet's pods once, reconciles and asks once more; while
# the pods live the answer stays FAILED_PRECONDITION (Exhausted) naming the GPU and the
# limit, exactly one List per Allocate; once they are gone the same single List releases
# them and the retried Allocate is admitted and recorded. With PodResources down a
# refusal comes back within 2 s and records nothing.

import time

import grpc

import harness
from harness import check, RES_I915, RES_XE, GPU_I915, GPU_XE

ENV = {'KGPU_RECONCILE_INTERVAL_SEC': '0', 'KGPU_RECONCILE_GRACE_SEC': '0'}


def holder_dependent(node):
    return sorted(node.busctl('get-property', harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS,
                              'HolderDependentResources')['data'])


def refused(plugin, ids):
    try:
        plugin.allocate(ids)
    except grpc.RpcError as e:
        return e
    return None


def run(node):
    node.kubelet.wait_connected([RES_I915, RES_XE], timeout=10)
    check(holder_dependent(node) == sorted([RES_I915, RES_XE]), 'property %r' % holder_dependent(node))
    i915 = node.kubelet.plugin(RES_I915)
    i915.wait_update(lambda d: len(d) == 2, timeout=5)
    a, b = GPU_I915 + '-0', GPU_I915 + '-1'

    # Under the limit: no PodResources round trip before Allocate or GetPreferredAllocation.
    n = node.kubelet.list_calls
    i915.allocate([a])
    pref = i915.get_preferred_allocation([b], [], 1)
    check(pref == [b], 'preferred %r' % pref)
    i915.allocate([b])
    node.kubelet.plugin(RES_XE).allocate([GPU_XE + '-0'])
    check(node.kubelet.list_calls == n, '%d PodResources List calls under the limit' % (node.kubelet.list_calls - n))
    check(len(node.list_allocations()) == 3, 'allocations %r' % node.list_allocations())
    node.kubelet.set_pods([('p1', 'ns', [('c', [(RES_I915, [a])])]),
                           ('p2', 'ns', [('c', [(RES_I915, [b])])]),
                           ('p3', 'ns', [('c', [(RES_XE, [GPU_XE + '-0'])])])])

    # The limit lowered to 1 while p1 and p2 hold shares of the GPU.
    node.daemons['broker'].stop()
    node.config_extra = ''
    with open(node.config_file) as f:
        text = f.read().replace('sharedDevNum: 2', 'sharedDevNum: 1')
    with open(node.config_file, 'w') as f:
        f.write(text)
    node.restart_broker()
    i915.wait_update(lambda d: [x['id'] for x in d] == [GPU_I915], timeout=5)
    node.wait_for(lambda: check(holder_dependent(node) == [], 'property %r' % holder_dependent(node)), 5,
                  what='empty HolderDependentResources')
    check(len(node.list_allocations()) == 3, 'the broker\'s start released live pods: %r' % node.list_allocations())

    # Live holders: refused after one reconciliation, which releases nothing.
    n = node.kubelet.list_calls
    e = refused(i915, [GPU_I915])
    check(e is not None and e.code() == grpc.StatusCode.FAILED_PRECONDITION,
          'a third holder with sharedDevNum 1: %r' % ((e and (e.code(), e.details())),))
    check(GPU_I915 in e.details() and 'at most 1' in e.details(), 'message %r' % e.details())
    check(node.kubelet.list_calls == n + 1, 'refused Allocate: %d List calls, expected 1' % (node.kubelet.list_calls - n))
    check(len(node.list_allocations()) == 3, 'allocations %r' % node.list_allocations())

    # p1 and p2 end: the one reconciliation after the refusal releases them, the Allocate
    # asked again is admitted and recorded; p3 (xe) stays.
    node.kubelet.set_pods([('p3', 'ns', [('c', [(RES_XE, [GPU_XE + '-0'])])])])
    n = node.kubelet.list_calls
    i915.allocate([GPU_I915])
    check(node.kubelet.list_calls == n + 1, 'admitted after a release: %d List calls' % (node.kubelet.list_calls - n))
    allocs = node.list_allocations()
    check(sorted(x[1] for x in allocs) == [RES_I915, RES_XE], 'allocations after the release %r' % allocs)
    check([x[2] for x in allocs if x[1] == RES_I915] == [[GPU_I915]], 'i915 allocation %r' % allocs)

    # PodResources down: a refusal still comes back promptly (the broker's answer; p3's
    # share of the xe GPU counts, nothing can be released without the kubelet).
    node.kubelet._pr_server.stop(0).wait(2)
    t0 = time.monotonic()
    e = refused(node.kubelet.plugin(RES_XE), [GPU_XE])
    check(e is not None and e.code() == grpc.StatusCode.FAILED_PRECONDITION,
          'PodResources down, over the limit: %r' % (e and e.code()))
    check(time.monotonic() - t0 < 2.0, 'refusal with PodResources down took %.1f s' % (time.monotonic() - t0))
    check(len(node.list_allocations()) == 2, 'allocations %r' % node.list_allocations())

if __name__ == '__main__':
    harness.run_test(run, extra_env=ENV, config_extra='intel:\n  sharedDevNum: 2\n')
