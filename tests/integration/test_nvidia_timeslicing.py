#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_nvidia_timeslicing.py — sharing.timeSlicing end to end (fake nvidia-smi, scenarios
# l40s and 8xh100-nvlink), as the NVIDIA device plugin documents it: `replicas: N`
# turns a GPU into N devices "<uuid>::0".."<uuid>::N-1" of the same resource;
# renameByDefault advertises them as "<name>.shared", `rename` under the given name;
# entries with `devices` give GPUs different replica counts (GPUs no entry names stay
# plain); failRequestsGreaterThanOne refuses a container asking for more than one
# replica with an error naming the resource, the number asked and the limit 1.
#
# Asserts: the exact ListAndWatch ids per case; Allocate answers carry the GPU's UUID
# once in NVIDIA_VISIBLE_DEVICES however many of its replicas are asked; the refusal's
# gRPC status and message; the labels nvidia.com/gpu.replicas=4, gpu.product with
# "-SHARED" and gpu.sharing-strategy=time-slicing in the probe's feature file.

import grpc

from harness import check, RES_I915, RES_XE
from nvidia_sim import L40S, H100X8, RES_GPU, yaml_config, ids, wait_devices, check_answer, run_cases

INTEL = [RES_I915, RES_XE]


def ts(resources, rename_by_default=None, fail_gt1=None):
    out = 'sharing:\n  timeSlicing:\n'
    if rename_by_default is not None:
        out += '    renameByDefault: %s\n' % ('true' if rename_by_default else 'false')
    if fail_gt1 is not None:
        out += '    failRequestsGreaterThanOne: %s\n' % ('true' if fail_gt1 else 'false')
    out += '    resources:\n'
    for r in resources:
        out += '    - name: %s\n      replicas: %d\n' % (r['name'], r['replicas'])
        if 'rename' in r:
            out += '      rename: %s\n' % r['rename']
        if 'devices' in r:
            out += '      devices: [%s]\n' % ', '.join('"%s"' % d for d in r['devices'])
    return yaml_config('none', extra=out)


def replicas(uuid, n):
    return ['%s::%d' % (uuid, i) for i in range(n)]


def read_labels(node):
    try:
        with open(node.feature_file) as f:
            return dict(line.split('=', 1) for line in f.read().splitlines() if '=' in line)
    except FileNotFoundError:
        return {}


def l40s_replicas(node):
    devs = wait_devices(node, RES_GPU, replicas(L40S, 4))
    check(all(d['numa'] == devs[0]['numa'] for d in devs), 'replicas with different NUMA nodes: %r' % devs)
    cl = node.kubelet.plugin(RES_GPU)
    check_answer(cl.allocate([L40S + '::1']), env=L40S, what='one replica')
    # Without failRequestsGreaterThanOne two replicas go to one container; the GPU once.
    check_answer(cl.allocate([L40S + '::0', L40S + '::2']), env=L40S, what='two replicas')
    want = {'nvidia.com/gpu.replicas': '4', 'nvidia.com/gpu.product': 'NVIDIA-L40S-SHARED',
            'nvidia.com/gpu.sharing-strategy': 'time-slicing'}
    node.wait_for(lambda: check(all(read_labels(node).get(k) == v for k, v in want.items()),
                                'labels %r, expected %r' % (read_labels(node), want)), 10, what='labels')


def l40s_rename_by_default(node):
    wait_devices(node, RES_GPU + '.shared', replicas(L40S, 4))
    for r, cl in node.kubelet.plugin_items():
        if r == RES_GPU:
            check(cl.devices() == [], 'renameByDefault: nvidia.com/gpu still has %r' % cl.devices())
    check_answer(node.kubelet.plugin(RES_GPU + '.shared').allocate([L40S + '::3']), env=L40S, what='.shared')


def l40s_rename(node):
    wait_devices(node, 'nvidia.com/l40s-shared', replicas(L40S, 2))
    check_answer(node.kubelet.plugin('nvidia.com/l40s-shared').allocate([L40S + '::1']), env=L40S,
                 what='renamed')


def l40s_fail_gt1(node):
    wait_devices(node, RES_GPU, replicas(L40S, 4))
    cl = node.kubelet.plugin(RES_GPU)
    try:
        a = cl.allocate([L40S + '::0', L40S + '::1'])
        raise AssertionError('two replicas in one container accepted: %r' % a)
    except grpc.RpcError as e:
        msg = e.details() or ''
        check(e.code() != grpc.StatusCode.OK, 'status %s' % e.code())
        check(RES_GPU in msg and '2' in msg and '1' in msg,
              'refusal does not name the resource, the number and the limit: %r' % msg)
    check_answer(cl.allocate([L40S + '::1']), env=L40S, what='one replica still fine')
    # Several containers of one request, one replica each: fine.
    answers = cl.allocate_multi([[L40S + '::2'], [L40S + '::3']])
    check(len(answers) == 2, 'two containers: %r' % answers)


def h100x8_per_gpu(node):
    want = (replicas(H100X8[0], 2) + replicas(H100X8[1], 2) + replicas(H100X8[2], 4) + H100X8[3:])
    wait_devices(node, RES_GPU, want)
    cl = node.kubelet.plugin(RES_GPU)
    check_answer(cl.allocate([H100X8[2] + '::3']), env=H100X8[2], what='GPU 2 replica')
    check_answer(cl.allocate([H100X8[5]]), env=H100X8[5], what='plain GPU 5')
    check_answer(cl.allocate([H100X8[0] + '::1', H100X8[1] + '::0']), env='%s,%s' % (H100X8[0], H100X8[1]),
                 what='replicas of two GPUs')


def h100x8_all(node):
    want = [x for g in H100X8 for x in replicas(g, 8)]
    devs = wait_devices(node, RES_GPU, want)
    numa = {d['id'].split('::')[0]: d['numa'] for d in devs}
    # topo -m of a DGX H100: GPUs 0-3 on NUMA node 0, 4-7 on node 1.
    check(all(numa[H100X8[i]] == [0] for i in range(4)) and all(numa[H100X8[i]] == [1] for i in range(4, 8)),
          'NUMA nodes of the replicas: %r' % numa)


CASES = [
    ('l40s, replicas 4', dict(nvidia_scenario='l40s', resources=INTEL + [RES_GPU],
                              config_extra=ts([{'name': RES_GPU, 'replicas': 4}])), l40s_replicas),
    ('l40s, renameByDefault', dict(nvidia_scenario='l40s', resources=INTEL + [RES_GPU + '.shared'],
                                   config_extra=ts([{'name': RES_GPU, 'replicas': 4}], rename_by_default=True)),
     l40s_rename_by_default),
    ('l40s, rename', dict(nvidia_scenario='l40s', resources=INTEL + ['nvidia.com/l40s-shared'],
                          config_extra=ts([{'name': RES_GPU, 'replicas': 2, 'rename': 'nvidia.com/l40s-shared'}])),
     l40s_rename),
    ('l40s, failRequestsGreaterThanOne', dict(nvidia_scenario='l40s', resources=INTEL + [RES_GPU],
                                              config_extra=ts([{'name': RES_GPU, 'replicas': 4}], fail_gt1=True)),
     l40s_fail_gt1),
    ('8xh100, per-GPU replica counts',
     dict(nvidia_scenario='8xh100-nvlink', resources=INTEL + [RES_GPU],
          config_extra=ts([{'name': RES_GPU, 'replicas': 2, 'devices': ['0', '1']},
                           {'name': RES_GPU, 'replicas': 4, 'devices': [H100X8[2]]}])), h100x8_per_gpu),
    ('8xh100, replicas 8', dict(nvidia_scenario='8xh100-nvlink', resources=INTEL + [RES_GPU],
                                config_extra=ts([{'name': RES_GPU, 'replicas': 8}])), h100x8_all),
]

if __name__ == '__main__':
    run_cases(CASES)
