#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_nvidia_timeslicing.py — sharing.timeSlicing end to end (fake nvidia-smi, scenarios
# l40s and 8xh100-nvlink), as the NVIDIA device plugin documents it: `replicas: N`
# turns a GPU into N devices "<uuid>::0".."<uuid>::N-1" of the same resource;
# renameByDefault advertises them as "<name>.shared", `rename` under the given name;
# entries with `devices` give GPUs different replica counts (GPUs no entry names stay
# plain); failRequestsGreaterThanOne refuses a container asking for more than one
# replica with an error naming the resource, the number asked and the limit 1. Under
# migStrategy mixed a `nvidia.com/mig-<profile>` entry shares the MIG devices of that
# profile (scenario h100-mig), under single the MIG devices advertised as nvidia.com/gpu
# (scenario h100-mig-7x1g); the runtime is told the MIG device, never the replica.
#
# Asserts: the exact ListAndWatch ids per case; Allocate answers carry the GPU's UUID
# once in NVIDIA_VISIBLE_DEVICES however many of its replicas are asked (MIG replicas:
# the MIG device's index or UUID once, in the envvar, the CDI annotation or the CDI
# names, with its GPU's node and capability nodes as device specs); the refusal's
# gRPC status (INVALID_ARGUMENT) and upstream's message; the labels nvidia.com/gpu.replicas=4, gpu.product with
# "-SHARED" and gpu.sharing-strategy=time-slicing in the probe's feature file.

import grpc

from harness import check, RES_I915, RES_XE
from nvidia_sim import (L40S, H100X8, H100_MIG, H100B_7X1G, MIG, RES_GPU, COMMON_NODES, yaml_config, ids,
                        wait_devices, check_answer, mig_nodes, run_cases)

INTEL = [RES_I915, RES_XE]


def ts(resources, rename_by_default=None, fail_gt1=None, mig='none', id_strategy=None, list_strategy=None,
       pass_specs=None):
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
    return yaml_config(mig, id_strategy, list_strategy, pass_specs, extra=out)


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
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, 'status %s' % e.code())
        # The upstream plugin's words (plugin/server.go), resource, count and limit filled in.
        want = "request for '%s: 2' too large: maximum request size for shared resources is 1" % RES_GPU
        check(want in msg, 'refusal %r does not say %r' % (msg, want))
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


def mixed_mig_replicas(node):
    # h100-mig: 1g.10gb devices are MIG device 2 (GI 9) and 3 (GI 10); the others stay plain.
    mig2, mig3 = H100_MIG[2][0], H100_MIG[3][0]
    wait_devices(node, MIG + '1g.10gb', replicas(mig2, 2) + replicas(mig3, 2))
    wait_devices(node, MIG + '3g.40gb', [H100_MIG[0][0]])
    wait_devices(node, MIG + '2g.20gb', [H100_MIG[1][0]])
    for r, cl in node.kubelet.plugin_items():
        check(r not in (RES_GPU, RES_GPU + '.shared') or cl.devices() == [],
              'mixed: %s advertised %r' % (r, cl.devices()))
    cl = node.kubelet.plugin(MIG + '1g.10gb')
    gpu = ['/dev/nvidia0'] + COMMON_NODES
    check_answer(cl.allocate([mig3 + '::1']), env='0:3', annotation_ids=['0:3'],
                 devices=gpu + mig_nodes(0, H100_MIG[3][2], 0), what='one MIG replica')
    check_answer(cl.allocate([mig3 + '::0', mig3 + '::1']), env='0:3', annotation_ids=['0:3'],
                 devices=gpu + mig_nodes(0, H100_MIG[3][2], 0), what='two replicas of one MIG device')
    check_answer(cl.allocate([mig2 + '::0', mig3 + '::1']), env='0:2,0:3', annotation_ids=['0:2', '0:3'],
                 devices=gpu + mig_nodes(0, H100_MIG[2][2], 0) + mig_nodes(0, H100_MIG[3][2], 0),
                 what='replicas of two MIG devices')


def single_mig_replicas(node):
    want = [x for m in H100B_7X1G for x in replicas(m, 2)]
    wait_devices(node, RES_GPU + '.shared', want)
    for r, cl in node.kubelet.plugin_items():
        check(r != RES_GPU or cl.devices() == [], 'renameByDefault: nvidia.com/gpu still has %r' % cl.devices())
    cl = node.kubelet.plugin(RES_GPU + '.shared')
    m = H100B_7X1G[3]
    check_answer(cl.allocate([m + '::1']), env=m, cdi=['nvidia.com/gpu=' + m], what='single, one MIG replica')
    check_answer(cl.allocate([m + '::0', H100B_7X1G[5] + '::1']), env='%s,%s' % (m, H100B_7X1G[5]),
                 cdi=['nvidia.com/gpu=' + m, 'nvidia.com/gpu=' + H100B_7X1G[5]], what='single, two MIG replicas')


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
    ('h100-mig, mixed, 1g.10gb replicas 2, index, envvar+cdi-annotations, passDeviceSpecs',
     dict(nvidia_scenario='h100-mig', resources=INTEL + [MIG + '1g.10gb'],
          config_extra=ts([{'name': MIG + '1g.10gb', 'replicas': 2}], mig='mixed', id_strategy='index',
                          list_strategy=['envvar', 'cdi-annotations'], pass_specs=True)), mixed_mig_replicas),
    ('h100 7x 1g.10gb, single, replicas 2, renameByDefault, envvar+cdi-cri',
     dict(nvidia_scenario='h100-mig-7x1g', resources=INTEL + [RES_GPU + '.shared'],
          config_extra=ts([{'name': RES_GPU, 'replicas': 2}], rename_by_default=True, mig='single',
                          list_strategy=['envvar', 'cdi-cri'])), single_mig_replicas),
]

if __name__ == '__main__':
    run_cases(CASES)
