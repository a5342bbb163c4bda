#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_intel_sharing.py — intel.sharedDevNum=2 on two i915 GPUs (0000:18:00.0 card0/renderD128
# and 0000:28:00.0 card1/renderD129, a subset of layout eight-gpus).
#
# Asserts: ListAndWatch lists exactly the four ids <gpu>-0 and <gpu>-1, Healthy, NUMA [0];
# six pods asking for one device each: four are admitted, each gets exactly its GPU's card
# and render node (rw) and that GPU's two by-path links (read-only; when the probe exports
# Gpu1.ByPathNodes), no GPU has more than
# 2 holders, and the kubelet has nothing left for the fifth; the broker records 4
# allocations. Restarted with -shared-dev-num 1 (Intel flag on the command line) while the
# four pods hold their shares, the broker lists the plain GPU ids and refuses a new
# container on either GPU with FAILED_PRECONDITION (io.kgpu.Error.Exhausted) naming the GPU
# and the limit. Its two pods deleted from PodResources, reconciliation (every 1 s, grace
# 2 s) releases them and GPU 0000:18 takes one container again, 0000:28 still none. Back
# at sharedDevNum 2: the freed shares go to new pods, exactly 2 holders per GPU again.

import os
import time

import grpc

import harness
import intel_devmgr
from harness import check, RES_I915

GPUS = {
    '0000:18:00.0': ('/dev/dri/card0', '/dev/dri/renderD128'),
    '0000:28:00.0': ('/dev/dri/card1', '/dev/dri/renderD129'),
}


def check_answer(node, pod, ids, answer):
    gpus = {intel_devmgr.gpu_of(i) for i in ids}
    check(len(gpus) == 1, '%s: %r' % (pod, ids))
    g = gpus.pop()
    card, render = GPUS[g]
    got = sorted((d['container_path'], d['host_path'], d['permissions']) for d in answer['devices'])
    check(got == sorted([(card, card, 'rw'), (render, render, 'rw')]), '%s: devices %r' % (pod, got))
    links = ['/dev/dri/by-path/pci-%s-card' % g, '/dev/dri/by-path/pci-%s-render' % g]
    if intel_devmgr.by_path_links(node, g) is None:
        links = []  # a probe without Gpu1.ByPathNodes: nothing to mount
    mounts = sorted((m['container_path'], m['host_path'], m['read_only']) for m in answer['mounts'])
    check(mounts == sorted((p, p, True) for p in links), '%s: mounts %r' % (pod, mounts))


def run(node):
    dm = intel_devmgr.DeviceManager(node)
    want = sorted('%s-%d' % (g, i) for g in GPUS for i in range(2))
    _, devs = dm.cl.wait_update(lambda d: len(d) == 4, timeout=5)
    check(sorted(d['id'] for d in devs) == want, 'ListAndWatch ids %r' % devs)
    check(all(d['health'] == 'Healthy' and d['numa'] == [0] for d in devs), 'ListAndWatch %r' % devs)

    admitted = 0
    for i in range(6):
        pod = 'pod-%d' % i
        try:
            ids, answer = dm.admit(pod)
        except RuntimeError:
            continue
        admitted += 1
        check_answer(node, pod, ids, answer)
    check(admitted == 4, 'admitted %d pods, expected 4' % admitted)
    h = dm.holders()
    check(sorted(h.items()) == [(g, 2) for g in sorted(GPUS)], 'holders per GPU %r' % h)
    check(len(node.list_allocations()) == 4, 'broker allocations %r' % node.list_allocations())

    # Sharing reduced to 1 while both GPUs have two holders: nothing more fits.
    node.broker_args = ['-shared-dev-num', '1']
    node.restart_broker()
    _, devs = dm.cl.wait_update(lambda d: sorted(x['id'] for x in d) == sorted(GPUS), timeout=10)
    for g in GPUS:
        try:
            dm.cl.allocate([g])
            raise AssertionError('a third container on %s was allowed with sharedDevNum 1' % g)
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, '%s: %s %r' % (g, e.code(), e.details()))
            check(g in e.details() and 'at most 1' in e.details(), 'message %r' % e.details())

    # Pods deleted from PodResources: reconciliation releases their allocations, and
    # GPU 18 takes a container again even at sharedDevNum 1; GPU 28 still does not.
    g18, g28 = sorted(GPUS)
    on18 = [n for n, gpus in dm.placements() if gpus == [g18]]
    for n in on18:
        dm.delete(n)
    wait_released(node, g18)
    answer = dm.cl.allocate([g18])
    check_answer(node, 'plain', [g18], answer)
    try:
        dm.cl.allocate([g28])
        raise AssertionError('a third container on %s was allowed with sharedDevNum 1' % g28)
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, '%s: %s %r' % (g28, e.code(), e.details()))
    # That container goes too (never reported by the kubelet: released after the grace).
    wait_released(node, g18)

    # Back to 2 (config file value): the freed shares are reused, still at most 2 per GPU.
    node.broker_args = []
    node.restart_broker()
    dm.cl.wait_update(lambda d: sorted(x['id'] for x in d) == want, timeout=10)
    freed = dm.delete('pod-1')
    check(freed[0].startswith(g28), 'pod-1 had %r' % freed)
    for n in ('pod-new-0', 'pod-new-1', 'pod-new-2'):
        ids, answer = dm.admit(n)
        check_answer(node, n, ids, answer)
    check(not dm.free, 'free after reuse %r' % dm.free)
    h = dm.holders()
    check(sorted(h.items()) == [(g, 2) for g in sorted(GPUS)], 'holders per GPU after reuse %r' % h)
    print('placements: %r' % dm.placements())


def wait_released(node, gpu, timeout=15):
    """Waits until the broker holds no allocation of gpu (reconciliation every second,
    grace 2 s)."""
    deadline = time.monotonic() + timeout
    while True:
        held = [a for a in node.list_allocations() if any(i.startswith(gpu) for i in a[2])]
        if not held:
            return
        if time.monotonic() > deadline:
            raise AssertionError('allocations of %s not released: %r' % (gpu, held))
        time.sleep(0.2)


def main():
    tmp = os.environ.get('TMPDIR', '/tmp')
    layout = intel_devmgr.layout_subset('eight-gpus', list(GPUS), os.path.join(
        tmp, 'kgpu-intel-sharing-%d.umockdev' % os.getpid()))
    try:
        harness.run_test(run, layout=layout, resources=[RES_I915],
                         extra_env={'KGPU_RECONCILE_INTERVAL_SEC': '1', 'KGPU_RECONCILE_GRACE_SEC': '2'},
                         config_extra='intel:\n  sharedDevNum: 2\n  allocationPolicy: balanced\n')
    finally:
        os.unlink(layout)


if __name__ == '__main__':
    main()
