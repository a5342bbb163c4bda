#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_reconcile_seen.py — the grace period (broker.reconcileGraceSec) is only for
# allocations the kubelet's PodResources has never reported; one it has reported and no
# longer reports is released by the first List that leaves it out.
#
# Asserts, with the DEFAULT grace (60 s, not overridden) and no periodic reconciliation,
# intel.sharedDevNum 2 then 1: once a List has reported a pod, its holder is recorded in
# the state database and the pod that was never reported has none. The broker is stopped,
# one reported pod (xe) is deleted and the limit lowered to 1: the restarted broker
# releases that pod's allocation at the List that follows its start (the "reported" fact
# survived the restart), seconds after it was made, and keeps the never-reported one.
# With the i915 GPU at its limit (one reported pod on it), the pod is deleted and a new
# container asks for the GPU: the broker refuses, grpcd lists the kubelet's pods once,
# that List releases the deleted pod's share and the Allocate asked again is admitted.
# The never-reported allocation on the xe GPU still counts (its container may not exist
# yet): an Allocate there is refused naming the GPU and the limit.

import os
import signal
import sqlite3

import grpc

import harness
from harness import check, RES_I915, RES_XE, GPU_I915, GPU_XE

# No KGPU_RECONCILE_GRACE_SEC: the default grace is what this test is about.
ENV = {'KGPU_RECONCILE_INTERVAL_SEC': '0'}


def holders(node):
    c = sqlite3.connect('file:%s?mode=ro' % os.path.join(node.state_dir, 'kgpu.db'), uri=True)
    try:
        c.execute('PRAGMA busy_timeout = 2000')
        return {row[0]: row[1] for row in c.execute('SELECT id, pod_name FROM allocations')}
    finally:
        c.close()


def ids_by_device(node):
    return {tuple(a[2]): a[0] for a in node.list_allocations()}


def run(node):
    node.kubelet.wait_connected([RES_I915, RES_XE], timeout=10)
    i915 = node.kubelet.plugin(RES_I915)
    xe = node.kubelet.plugin(RES_XE)
    i915.wait_update(lambda d: len(d) == 2, timeout=5)
    xe.wait_update(lambda d: len(d) == 2, timeout=5)

    # p1 on the i915 GPU and p2 on the xe GPU are reported; p3's container (xe) is never
    # created, so the kubelet never reports it.
    i915.allocate([GPU_I915 + '-0'])
    xe.allocate([GPU_XE + '-0'])
    xe.allocate([GPU_XE + '-1'])
    ids = ids_by_device(node)
    check(len(ids) == 3, 'allocations %r' % node.list_allocations())
    p1, p2, p3 = ids[(GPU_I915 + '-0',)], ids[(GPU_XE + '-0',)], ids[(GPU_XE + '-1',)]
    node.kubelet.set_pods([('p1', 'ns', [('c', [(RES_I915, [GPU_I915 + '-0'])])]),
                           ('p2', 'ns', [('c', [(RES_XE, [GPU_XE + '-0'])])])])

    # A reload makes grpcd list the pods: the holders of p1 and p2 are recorded.
    n = node.kubelet.list_calls
    node.daemons['grpc'].send_signal(signal.SIGHUP)
    node.wait_for(lambda: check(holders(node) == {p1: 'p1', p2: 'p2', p3: ''}, 'holders %r' % holders(node)),
                  5, what='holders recorded')
    check(node.kubelet.list_calls == n + 1, '%d List calls for one reload' % (node.kubelet.list_calls - n))

    # p2 deleted while the broker is down, the limit lowered to 1. The List that follows
    # the broker's start releases p2 (reported before), not p3 (never reported, young).
    node.daemons['broker'].stop()
    node.kubelet.set_pods([('p1', 'ns', [('c', [(RES_I915, [GPU_I915 + '-0'])])])])
    node.write_config_extra('intel:\n  sharedDevNum: 1\n')
    n = node.kubelet.list_calls
    node.restart_broker()
    i915.wait_update(lambda d: [x['id'] for x in d] == [GPU_I915], timeout=5)
    xe.wait_update(lambda d: [x['id'] for x in d] == [GPU_XE], timeout=5)
    node.wait_for(lambda: check(set(ids_by_device(node).values()) == {p1, p3},
                                'after the restart: %r' % node.list_allocations()),
                  5, what='p2 released at the List after the broker\'s start')
    check(node.kubelet.list_calls == n + 1, '%d List calls after the broker\'s start' % (node.kubelet.list_calls - n))
    log = node.daemons['broker'].log_text()
    check('Released allocation %d ' % p2 in log and 'reported it before' in log, 'release of p2 not logged')

    # The i915 GPU is at its limit (p1). p1 is deleted; a new container asks for the GPU:
    # refused by the broker, and the one List grpcd makes then frees p1's share, however
    # young it is; the Allocate asked again is admitted.
    node.kubelet.set_pods([])
    n = node.kubelet.list_calls
    try:
        i915.allocate([GPU_I915])
    except grpc.RpcError as e:
        raise AssertionError('refused although PodResources no longer reports p1: %s %r' % (e.code(), e.details()))
    check(node.kubelet.list_calls == n + 1, 'admitted after %d List calls, expected 1' % (node.kubelet.list_calls - n))
    ids = ids_by_device(node)
    check(set(ids) == {(GPU_I915,), (GPU_XE + '-1',)}, 'allocations after the release %r' % node.list_allocations())
    check(p1 not in ids.values() and ids[(GPU_XE + '-1',)] == p3, 'allocations %r' % node.list_allocations())

    # p3 was never reported: it keeps its share within the grace period.
    n = node.kubelet.list_calls
    try:
        xe.allocate([GPU_XE])
        raise AssertionError('an Allocate on %s was admitted while p3 (never reported) holds it' % GPU_XE)
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, 'xe: %s %r' % (e.code(), e.details()))
        check(GPU_XE in e.details() and 'at most 1' in e.details(), 'message %r' % e.details())
    check(node.kubelet.list_calls == n + 1, 'refused after %d List calls, expected 1' % (node.kubelet.list_calls - n))
    check(ids_by_device(node).get((GPU_XE + '-1',)) == p3, 'p3 released: %r' % node.list_allocations())


if __name__ == '__main__':
    harness.run_test(run, extra_env=ENV, config_extra='intel:\n  sharedDevNum: 2\n')
