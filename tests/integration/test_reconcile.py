#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_reconcile.py — grpcd reads the kubelet's PodResources and the broker releases
# what no live container holds.
#
# Asserts (reconcile every 1 s, grace 2 s): an allocation the kubelet reports survives
# and its holder (namespace/pod/container) is recorded in the state database; one it
# does not report survives while younger than the grace period and is released after;
# after a "reboot" (the stored boot ids changed while the broker was down) a restarted
# broker keeps only what the kubelet reports, young or not; a PodResources reply with an
# empty pod name or an over-long device id releases nothing; while PodResources does not
# answer nothing is released; Reconcile is refused to other users (policy and broker).

import os
import pwd
import sqlite3
import time

import harness
from harness import check, RES_I915, RES_XE, GPU_I915, GPU_XE

ENV = {'KGPU_RECONCILE_INTERVAL_SEC': '1', 'KGPU_RECONCILE_GRACE_SEC': '2'}


def ids_of(node):
    return {a[0]: (a[1], tuple(a[2])) for a in node.list_allocations()}


def db(node):
    c = sqlite3.connect('file:%s?mode=ro' % os.path.join(node.state_dir, 'kgpu.db'), uri=True)
    c.execute('PRAGMA busy_timeout = 2000')
    return c


def poll(fn, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return
        time.sleep(0.05)
    raise AssertionError('timed out after %ss waiting for %s' % (timeout, what))


def wait_rounds(node, n):
    start = node.kubelet.list_calls
    poll(lambda: node.kubelet.list_calls >= start + n, 10, '%d PodResources List calls' % n)
    time.sleep(0.2)  # the Reconcile that follows the List


def run(node):
    node.kubelet.wait_connected([RES_I915, RES_XE], timeout=10)
    check(node.kubelet.list_calls >= 1, 'no PodResources List at start')

    node.kubelet.set_pods([('p1', 'ns1', [('c1', [(RES_I915, [GPU_I915])])])])
    node.kubelet.plugin(RES_I915).allocate([GPU_I915])
    node.kubelet.plugin(RES_XE).allocate([GPU_XE])
    allocs = ids_of(node)
    check(len(allocs) == 2, 'allocations %r' % allocs)
    (i915_id,) = [k for k, v in allocs.items() if v[0] == RES_I915]
    (xe_id,) = [k for k, v in allocs.items() if v[0] == RES_XE]

    # within the grace period: both kept, the reported one has its holder
    wait_rounds(node, 1)
    allocs = ids_of(node)
    check(set(allocs) == {i915_id, xe_id}, 'young allocation released too early: %r' % allocs)
    row = db(node).execute('SELECT pod_namespace, pod_name, container_name FROM allocations WHERE id = ?',
                           (i915_id,)).fetchone()
    check(row == ('ns1', 'p1', 'c1'), 'holder recorded %r' % (row,))

    # past the grace period: the unreported one is released, the reported one stays
    time.sleep(2.1)
    wait_rounds(node, 1)
    allocs = ids_of(node)
    check(set(allocs) == {i915_id}, 'after grace: %r (expected only %d)' % (allocs, i915_id))
    node.wait_for(lambda: check('Released allocation %d' % xe_id in node.daemons['broker'].log_text(),
                                'release not logged'), 3, what='release log')

    # the pod goes away: released after the next round
    node.kubelet.set_pods([])
    wait_rounds(node, 1)
    check(ids_of(node) == {}, 'after the pod ended: %r' % ids_of(node))

    # reboot: old allocations survive only if reported, however young
    node.kubelet.set_pods([('p2', 'ns2', [('c2', [(RES_XE, [GPU_XE])])])])
    node.kubelet.plugin(RES_I915).allocate([GPU_I915])
    node.kubelet.plugin(RES_XE).allocate([GPU_XE])
    allocs = ids_of(node)
    check(len(allocs) == 2, 'allocations %r' % allocs)
    (xe_id,) = [k for k, v in allocs.items() if v[0] == RES_XE]
    node.daemons['broker'].stop()
    c = sqlite3.connect(os.path.join(node.state_dir, 'kgpu.db'))
    c.execute("UPDATE allocations SET boot_id = 'an-older-boot'")
    c.execute("UPDATE meta SET value = 'an-older-boot' WHERE key = 'boot_id'")
    c.commit()
    c.close()
    bu = pwd.getpwnam(harness.BROKER_USER)
    for f in os.listdir(node.state_dir):
        os.chown(os.path.join(node.state_dir, f), bu.pw_uid, bu.pw_gid)
    node.restart_broker()
    poll(lambda: set(ids_of(node)) == {xe_id}, 5, 'only the reported allocation of the older boot kept')

    # Reconcile from another user: refused by the bus policy (and by the broker)
    r = node.busctl('call', harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS,
                    'Reconcile', 'a(sassss)', '0', user='nobody', check=False)
    check(r.returncode != 0 and b'ccess denied' in r.stderr, 'Reconcile as nobody: %r' % (r.stderr,))
    # malformed input from an allowed caller: empty pod name
    r = node.busctl('call', harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS,
                    'Reconcile', 'a(sassss)', '1', RES_I915, '1', 'x', 'ns', '', 'c', check=False)
    check(r.returncode != 0 and b'Pod name' in r.stderr, 'empty pod name accepted: %r' % (r.stderr,))
    check(set(ids_of(node)) == {xe_id}, 'a refused Reconcile changed something')

    # a reply with an invalid name (empty pod name) or an over-long device id: nothing
    # released, grpcd says why
    for bad in [('', 'ns', [('c', [(RES_I915, [GPU_I915])])]),
                ('p', 'ns', [('c', [(RES_I915, ['x' * 300])])])]:
        node.kubelet.set_pods([bad])
        wait_rounds(node, 1)
        check(set(ids_of(node)) == {xe_id}, 'released on a malformed PodResources reply: %r' % ids_of(node))
    node.wait_for(lambda: check('has an invalid name or device id' in node.daemons['grpc'].log_text(),
                                'malformed reply not logged'), 3, what='malformed reply log')

    # PodResources unreachable: nothing released, however old
    node.kubelet._pr_server.stop(0).wait(2)
    node.kubelet.set_pods([])
    time.sleep(3.5)
    check(set(ids_of(node)) == {xe_id}, 'released without a PodResources answer: %r' % ids_of(node))
    check('not reconciling until it answers' in node.daemons['grpc'].log_text(),
          'grpcd did not say why it is not reconciling')


if __name__ == '__main__':
    harness.run_test(run, need_root=True, extra_env=ENV)
