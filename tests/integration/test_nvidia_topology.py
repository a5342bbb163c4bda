#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_nvidia_topology.py — GetPreferredAllocation for whole NVIDIA GPUs from the probe's
# `nvidia-smi topo -m` links, through grpcd, as the kubelet asks it.
#
# 8xh100-nvlink (DGX H100: NV18 between every pair, GPUs 0-3 on NUMA node 0, 4-7 on 1):
# GetPreferredAllocation is advertised; every answer is a connected set (each pair
# NVLinked) of the requested size holding must_include, and among equally NVLinked sets
# it stays on one NUMA node (4 of 8 -> GPUs 0-3; with GPU 5 required -> 4-7; 2 with GPU 6
# required -> a partner on node 1); only offered GPUs are chosen.
# 5xrtx4090-pcie (PCIe only: GPU1-GPU2 and GPU3-GPU4 under a host bridge (PHB), GPU1/2
# to GPU3/4 NODE, GPU0 on the other NUMA node, SYS to all): a set of 2 or 4 never takes
# GPU0 unless required, and a pair is the one behind a host bridge (GPU1+GPU2; GPU3+GPU4
# when GPU3 is required). Replicas (8xh100, replicas 2): distributed spreads a request
# over GPUs, nvidia.replicaPolicy packed fills one GPU first.

from harness import check, RES_I915, RES_XE
from nvidia_sim import H100X8, RES_GPU, yaml_config, wait_devices, run_cases

INTEL = [RES_I915, RES_XE]
RTX = ['GPU-4090000%d-0000-0000-0000-00000000000%d' % (i, i) for i in range(5)]


def pref(cl, available, must=(), size=1):
    got = cl.get_preferred_allocation(list(available), list(must), size)
    check(len(got) == size and len(set(got)) == size, 'size %d: %r' % (size, got))
    check(all(m in got for m in must), 'must_include %r missing from %r' % (must, got))
    check(all(g in available for g in got), 'not offered: %r' % got)
    return got


def h100x8(node):
    wait_devices(node, RES_GPU, H100X8)
    cl = node.kubelet.plugin(RES_GPU)
    check(cl.options['get_preferred_allocation_available'], 'GetPreferredAllocation not advertised')
    node0, node1 = set(H100X8[:4]), set(H100X8[4:])
    got = pref(cl, H100X8, size=4)
    check(set(got) in (node0, node1), '4 of 8: %r, expected one NUMA node' % got)
    got = pref(cl, H100X8, must=[H100X8[5]], size=4)
    check(set(got) == node1, '4 with GPU 5: %r' % got)
    got = pref(cl, H100X8, must=[H100X8[6]], size=2)
    check(set(got) <= node1, '2 with GPU 6: %r' % got)
    got = pref(cl, H100X8, size=8)
    check(set(got) == set(H100X8), 'all 8: %r' % got)
    # Only what is offered: GPUs 0, 1, 4 offered, 2 wanted: the same-node pair.
    got = pref(cl, [H100X8[4], H100X8[0], H100X8[1]], size=2)
    check(set(got) == {H100X8[0], H100X8[1]}, '2 of {0,1,4}: %r' % got)


def rtx(node):
    wait_devices(node, RES_GPU, RTX)
    cl = node.kubelet.plugin(RES_GPU)
    for size in (2, 3, 4):
        got = pref(cl, RTX, size=size)
        check(RTX[0] not in got, '%d of 5: %r took the GPU on the other NUMA node' % (size, got))
    got = pref(cl, RTX, size=4)
    check(set(got) == set(RTX[1:]), '4 of 5: %r' % got)
    got = pref(cl, RTX, must=[RTX[0]], size=2)
    check(RTX[0] in got, 'must_include GPU0: %r' % got)
    # Two GPUs: a pair behind one host bridge (PHB) beats a NODE pair: GPU1+GPU2 (lowest),
    # and with GPU3 required its PHB partner GPU4. Only the probe's Links tell these apart.
    got = pref(cl, RTX, size=2)
    check(set(got) == {RTX[1], RTX[2]}, '2 of 5: %r, expected the PHB pair GPU1+GPU2' % got)
    got = pref(cl, RTX, must=[RTX[3]], size=2)
    check(set(got) == {RTX[3], RTX[4]}, 'with GPU3: %r, expected its PHB partner GPU4' % got)


def replicas_policy(packed):
    def fn(node):
        all_ids = ['%s::%d' % (g, i) for g in H100X8 for i in range(2)]
        wait_devices(node, RES_GPU, all_ids)
        cl = node.kubelet.plugin(RES_GPU)
        got = pref(cl, all_ids, size=2)
        gpus = {i.split('::')[0] for i in got}
        if packed:
            check(len(gpus) == 1, 'packed: %r spreads over GPUs' % got)
        else:
            check(len(gpus) == 2, 'distributed: %r on one GPU' % got)
        # GPU 2's ::0 is in use (not offered): packed takes its ::1 first, distributed avoids it.
        avail = [i for i in all_ids if i != H100X8[2] + '::0']
        got = pref(cl, avail, size=1)
        if packed:
            check(got == [H100X8[2] + '::1'], 'packed with GPU 2 half used: %r' % got)
        else:
            check(not got[0].startswith(H100X8[2]), 'distributed with GPU 2 half used: %r' % got)
    return fn


REPLICAS = 'sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n'

CASES = [
    ('8xh100 NVLink', dict(nvidia_scenario='8xh100-nvlink', resources=INTEL + [RES_GPU],
                           config_extra=yaml_config('none')), h100x8),
    ('5x RTX 4090 PCIe, partially connected', dict(nvidia_scenario='5xrtx4090-pcie', resources=INTEL + [RES_GPU],
                                                  config_extra=yaml_config('none')), rtx),
    ('8xh100 replicas, distributed', dict(nvidia_scenario='8xh100-nvlink', resources=INTEL + [RES_GPU],
                                          config_extra=yaml_config('none', extra=REPLICAS)), replicas_policy(False)),
    ('8xh100 replicas, packed', dict(nvidia_scenario='8xh100-nvlink', resources=INTEL + [RES_GPU],
                                     config_extra=yaml_config('none', extra='nvidia:\n  replicaPolicy: packed\n' + REPLICAS)),
     replicas_policy(True)),
]

if __name__ == '__main__':
    run_cases(CASES)
