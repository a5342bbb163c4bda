#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_intel_policies.py — allocation policies on layout eight-gpus (8 x i915 at
# 0000:{18,28,38,48,98,a8,b8,c8}:00.0) with intel.sharedDevNum=4: the same pod sequence
# (one device each, except pod-4 with two) under balanced (config file), packed (the
# Intel flag -allocation-policy packed on the command line, with -bypath=all) and none
# (default).
#
# Asserts the exact GPUs each pod lands on, written below: balanced spreads (eight pods
# on eight different GPUs, pod-4's two devices on two GPUs, the ninth device back on the
# first GPU), packed fills 0000:18 before 0000:28 before 0000:38 (pod-4's two devices on
# one GPU), none takes one device of each distinct GPU first, in the kubelet's order.
# Each Allocate answer grants exactly the nodes of the GPUs of its ids; with -bypath=all
# the mount is the whole /dev/dri/by-path directory, read-only (when the probe exports
# Gpu1.ByPathNodes).

import harness
import intel_devmgr
from harness import check, RES_I915

G = ['0000:%s:00.0' % b for b in ('18', '28', '38', '48', '98', 'a8', 'b8', 'c8')]
SIZES = [1, 1, 1, 1, 2, 1, 1, 1]

EXPECTED = {
    'balanced': [[G[0]], [G[1]], [G[2]], [G[3]], [G[4], G[5]], [G[6]], [G[7]], [G[0]]],
    'packed': [[G[0]], [G[0]], [G[0]], [G[0]], [G[1], G[1]], [G[1]], [G[1]], [G[2]]],
    'none': [[G[0]], [G[0]], [G[0]], [G[0]], [G[1], G[2]], [G[1]], [G[1]], [G[1]]],
}
EXPECTED_IDS = {
    'balanced': [G[0] + '-0', G[1] + '-0', G[2] + '-0', G[3] + '-0', G[4] + '-0', G[5] + '-0',
                 G[6] + '-0', G[7] + '-0', G[0] + '-1'],
    'packed': [G[0] + '-0', G[0] + '-1', G[0] + '-2', G[0] + '-3', G[1] + '-0', G[1] + '-1',
               G[1] + '-2', G[1] + '-3', G[2] + '-0'],
    'none': [G[0] + '-0', G[0] + '-1', G[0] + '-2', G[0] + '-3', G[1] + '-0', G[2] + '-0',
             G[1] + '-1', G[1] + '-2', G[1] + '-3'],
}


def nodes_of(gpu):
    i = G.index(gpu)
    return ['/dev/dri/card%d' % i, '/dev/dri/renderD%d' % (128 + i)]


def sequence(node, policy, by_path_all=False):
    dm = intel_devmgr.DeviceManager(node)
    _, devs = dm.cl.wait_update(lambda d: len(d) == 32, timeout=5)
    got, ids_in_order = [], []
    for i, size in enumerate(SIZES):
        ids, answer = dm.admit('pod-%d' % i, size)
        ids_in_order += ids
        gpus = [intel_devmgr.gpu_of(x) for x in ids]
        got.append(gpus)
        want_nodes = sorted(n for g in sorted(set(gpus)) for n in nodes_of(g))
        have = sorted(d['host_path'] for d in answer['devices'])
        check(have == want_nodes, '%s pod-%d: devices %r, expected %r' % (policy, i, have, want_nodes))
        if by_path_all and intel_devmgr.by_path_links(node, gpus[0]) is not None:
            check(answer['mounts'] == [{'container_path': '/dev/dri/by-path', 'host_path': '/dev/dri/by-path',
                                        'read_only': True}], '%s: mounts %r' % (policy, answer['mounts']))
    print('%-8s %s' % (policy, ' '.join('+'.join(g[5:7] for g in p) for p in got)))
    check(got == EXPECTED[policy], '%s: placements %r, expected %r' % (policy, got, EXPECTED[policy]))
    check(ids_in_order == EXPECTED_IDS[policy], '%s: ids %r' % (policy, ids_in_order))
    return dm


def run_balanced(node):
    dm = sequence(node, 'balanced')
    check(len(dm.holders()) == 8, 'balanced used %r' % dm.holders())
    check(max(dm.holders().values()) == 2, 'balanced holders %r' % dm.holders())


def run_packed(node):
    dm = sequence(node, 'packed', by_path_all=True)
    check(sorted(dm.holders().items()) == [(G[0], 4), (G[1], 3), (G[2], 1)], 'packed holders %r' % dm.holders())


def run_none(node):
    sequence(node, 'none')


def run(node):
    run_balanced(node)
    for policy, fn, kw in (('packed', run_packed, {'broker_args': ['-allocation-policy', 'packed', '-bypath=all'],
                                                   'config_extra': 'intel:\n  sharedDevNum: 4\n'}),
                           ('none', run_none, {'config_extra': 'intel:\n  sharedDevNum: 4\n'})):
        with harness.Node(layout='eight-gpus', resources=[RES_I915], **kw) as n:
            fn(n)


if __name__ == '__main__':
    harness.run_test(run, layout='eight-gpus', resources=[RES_I915],
                     config_extra='intel:\n  sharedDevNum: 4\n  allocationPolicy: balanced\n')
