#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_nvidia_strategies.py — MIG strategies, device id strategies and device list
# strategies end to end: fake nvidia-smi (scenarios h100-mig, h100-mig-7x1g), probe,
# broker, grpcd, kubelet simulator; the expected values are the NVIDIA device plugin's
# for the same `version: v1` config (its README: migStrategy none|single|mixed,
# deviceIDStrategy uuid|index, deviceListStrategy envvar|volume-mounts|cdi-annotations|
# cdi-cri, passDeviceSpecs) and the recorded GPU / MIG ids.
#
# Asserts per case: the resource names and ListAndWatch ids (always UUIDs, as upstream:
# deviceIDStrategy only changes what the runtime is told), and each Allocate answer's
# NVIDIA_VISIBLE_DEVICES, volume mounts (/dev/null -> /var/run/nvidia-container-devices/
# <id>), CDI annotation (cdi.k8s.io/nvidia-device-plugin_* = nvidia.com/gpu=<id>,...),
# CDI device names and device specs (the GPU's /dev/nvidiaN, nvidiactl, nvidia-uvm,
# nvidia-uvm-tools and, for a MIG device, its GI and CI capability nodes). migStrategy
# single on a GPU with MIG devices of several profiles registers nvidia.com/gpu with no
# device.

import harness
from harness import check, RES_I915, RES_XE
from nvidia_sim import (H100, H100_MIG, H100B, H100B_7X1G, RES_GPU, MIG, VOLUME_ROOT, COMMON_NODES,
                        yaml_config, ids, wait_devices, check_answer, mig_nodes, run_cases)

INTEL = [RES_I915, RES_XE]


def none_uuid_envvar(node):
    wait_devices(node, RES_GPU, [H100])
    for r, _ in node.kubelet.plugin_items():
        check(not r.startswith(MIG), 'migStrategy none advertised %s' % r)
    a = node.kubelet.plugin(RES_GPU).allocate([H100])
    check_answer(a, env=H100, what='none/uuid/envvar')


def none_index_cri_specs(node):
    wait_devices(node, RES_GPU, [H100])
    a = node.kubelet.plugin(RES_GPU).allocate([H100])
    check_answer(a, env='0', cdi=['nvidia.com/gpu=0'], devices=['/dev/nvidia0'] + COMMON_NODES,
                 what='none/index/envvar+cdi-cri/passDeviceSpecs')


def mixed_uuid_volume_mounts(node):
    by_profile = {}
    for uuid, profile, _, _ in H100_MIG.values():
        by_profile.setdefault(MIG + profile, []).append(uuid)
    for res, want in by_profile.items():
        wait_devices(node, res, want)
    if any(r == RES_GPU for r, _ in node.kubelet.plugin_items()):
        check(node.kubelet.plugin(RES_GPU).devices() == [], 'mixed: the MIG GPU is also a nvidia.com/gpu device')
    mig2 = H100_MIG[2][0]
    a = node.kubelet.plugin(MIG + '1g.10gb').allocate([mig2])
    check_answer(a, env=VOLUME_ROOT, mounts=[(VOLUME_ROOT + '/' + mig2, '/dev/null')],
                 what='mixed/uuid/volume-mounts')


def mixed_index_annotations_specs(node):
    wait_devices(node, MIG + '2g.20gb', [H100_MIG[1][0]])
    wait_devices(node, MIG + '1g.10gb', [H100_MIG[2][0], H100_MIG[3][0]])
    _, _, gi, ci = H100_MIG[1]
    a = node.kubelet.plugin(MIG + '2g.20gb').allocate([H100_MIG[1][0]])
    check_answer(a, env='0:1', annotation_ids=['0:1'],
                 devices=['/dev/nvidia0'] + COMMON_NODES + mig_nodes(0, gi, ci),
                 what='mixed/index/envvar+cdi-annotations/passDeviceSpecs, one MIG device')
    a = node.kubelet.plugin(MIG + '1g.10gb').allocate([H100_MIG[2][0], H100_MIG[3][0]])
    nodes = ['/dev/nvidia0'] + COMMON_NODES + mig_nodes(0, H100_MIG[2][2], 0) + mig_nodes(0, H100_MIG[3][2], 0)
    check_answer(a, env='0:2,0:3', annotation_ids=['0:2', '0:3'], devices=nodes,
                 what='mixed/index/envvar+cdi-annotations/passDeviceSpecs, two MIG devices')


def single_inconsistent(node):
    # MIG devices of three profiles: single cannot advertise them as one resource.
    node.wait_for(lambda: check(any('not advertised as configured' in l and 'single' in l
                                    for l in node.daemons['broker'].log_text().splitlines()), 'no log'), 5,
                  what='the broker saying why nothing is advertised')
    # nvidia.com/gpu is registered, with no device (docs/NVIDIA.md).
    cl = node.kubelet.plugin(RES_GPU, 15)
    cl.wait_update(timeout=10)
    check(cl.devices() == [], 'single with mixed profiles advertised %r' % cl.devices())
    for r, _ in node.kubelet.plugin_items():
        check(not r.startswith(MIG), 'migStrategy single advertised %s' % r)


def single_7x1g(node):
    wait_devices(node, RES_GPU, H100B_7X1G)
    cl = node.kubelet.plugin(RES_GPU)
    check(H100B not in ids(cl.devices()), 'the MIG-enabled GPU itself is advertised')
    a = cl.allocate([H100B_7X1G[3]])
    check_answer(a, env=H100B_7X1G[3], what='single/uuid/envvar')


def single_7x1g_index(node):
    wait_devices(node, RES_GPU, H100B_7X1G)
    a = node.kubelet.plugin(RES_GPU).allocate([H100B_7X1G[3], H100B_7X1G[5]])
    check_answer(a, env='0:3,0:5', cdi=['nvidia.com/gpu=0:3', 'nvidia.com/gpu=0:5'],
                 what='single/index/envvar+cdi-cri')


CASES = [
    ('none, uuid, envvar', dict(nvidia_scenario='h100-mig', config_extra=yaml_config('none'),
                                resources=INTEL + [RES_GPU]), none_uuid_envvar),
    ('none, index, envvar+cdi-cri, passDeviceSpecs',
     dict(nvidia_scenario='h100-mig', resources=INTEL + [RES_GPU],
          config_extra=yaml_config('none', 'index', ['envvar', 'cdi-cri'], True)), none_index_cri_specs),
    ('mixed, uuid, volume-mounts',
     dict(nvidia_scenario='h100-mig', resources=INTEL + [MIG + '1g.10gb'],
          config_extra=yaml_config('mixed', 'uuid', 'volume-mounts')), mixed_uuid_volume_mounts),
    ('mixed, index, envvar+cdi-annotations, passDeviceSpecs',
     dict(nvidia_scenario='h100-mig', resources=INTEL + [MIG + '2g.20gb'],
          config_extra=yaml_config('mixed', 'index', ['envvar', 'cdi-annotations'], True)),
     mixed_index_annotations_specs),
    ('single, MIG profiles mixed: nvidia.com/gpu with no device',
     dict(nvidia_scenario='h100-mig', resources=INTEL, config_extra=yaml_config('single')), single_inconsistent),
    ('single, 7x 1g.10gb, uuid', dict(nvidia_scenario='h100-mig-7x1g', resources=INTEL + [RES_GPU],
                                      config_extra=yaml_config('single')), single_7x1g),
    ('single, 7x 1g.10gb, index, envvar+cdi-cri',
     dict(nvidia_scenario='h100-mig-7x1g', resources=INTEL + [RES_GPU],
          config_extra=yaml_config('single', 'index', ['envvar', 'cdi-cri'])), single_7x1g_index),
]

if __name__ == '__main__':
    run_cases(CASES)
