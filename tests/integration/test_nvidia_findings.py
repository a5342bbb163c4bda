#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_nvidia_findings.py — recorded nvidia-smi outputs that once went wrong, end to end
# (fake nvidia-smi, probe, broker, grpcd, kubelet simulator):
# - gpu-lost-at-start (error-GPU-lost-1.txt: "Unable to determine the device handle for
#   GPU 0000:02:00.0: GPU is lost..."), failOnInitError false: nvidia.com/gpu lists the
#   lost GPU as one Unhealthy device "nvidia-pci-0000:02:00.0", and the probe says so at
#   warning;
# - h200-mig (no -q answer; the plain table's MIG devices box gives the GPU and compute
#   instances): the Allocate answer of a MIG device carries its two capability nodes
#   (passDeviceSpecs), GI 2 / CI 1 for device 1;
# - migStrategy single on an invalid node, both layouts: MIG on one GPU of two
#   (h100-mig-and-h100) and MIG devices of several profiles (h100-mig): nvidia.com/gpu is
#   registered with no device, and the broker says why at warning;
# - no-nvml-library (error-libnvidia-ml-1.txt, exit 12, output kgpu does not recognise):
#   the probe's warning quotes the tool's words and exit status.

import harness
from harness import check, RES_I915, RES_XE
from nvidia_sim import RES_GPU, MIG, COMMON_NODES, yaml_config, wait_devices, check_answer, mig_nodes, run_cases

INTEL = [RES_I915, RES_XE]
NO_FAIL = 'version: v1\nflags:\n  migStrategy: none\n  failOnInitError: false\n'
H200_MIG1 = 'MIG-00000001-0000-0000-0000-000000000001'      # L-H200-MIG-1.txt device 1, 2c.3g.71gb


def log_has(node, daemon, *words):
    return any(all(w in line for w in words) for line in node.daemons[daemon].log_text().splitlines())


def lost_at_start(node):
    devs = wait_devices(node, RES_GPU, ['nvidia-pci-0000:02:00.0'], healthy=False, timeout=15)
    check([d['health'] for d in devs] == ['Unhealthy'], 'lost GPU %r' % devs)
    node.wait_for(lambda: check(log_has(node, 'probe', 'NVIDIA GPU at 0000:02:00.0 is lost',
                                        'nvidia-pci-0000:02:00.0', 'Unhealthy'), 'no warning'), 5,
                  what='the probe naming the lost GPU')
    print('lost GPU advertised Unhealthy as nvidia-pci-0000:02:00.0')


def mig_ids_from_table(node):
    wait_devices(node, MIG + '2c.3g.71gb', [H200_MIG1])
    a = node.kubelet.plugin(MIG + '2c.3g.71gb').allocate([H200_MIG1])
    check_answer(a, env='0:1', devices=['/dev/nvidia0'] + COMMON_NODES + mig_nodes(0, 2, 1),
                 what='h200-mig without -q, mixed/index/passDeviceSpecs')
    print('MIG device 0:1 answered with GI 2 / CI 1 capability nodes')


def single_invalid(node):
    cl = node.kubelet.plugin(RES_GPU, 15)
    node.wait_for(lambda: check(log_has(node, 'broker', 'not advertised as configured', 'migStrategy single'),
                                'no log'), 5, what='the broker saying why nothing is advertised')
    cl.wait_update(timeout=10)
    check(cl.devices() == [], 'single on an invalid node advertised %r' % cl.devices())
    for r, _ in node.kubelet.plugin_items():
        check(not r.startswith(MIG), 'migStrategy single advertised %s' % r)
    print('nvidia.com/gpu registered with no device')


def unrecognised_output(node):
    node.wait_for(lambda: check(log_has(node, 'probe', 'unrecognised output (exit status 12)',
                                        "NVIDIA-SMI couldn't find libnvidia-ml.so"), 'no quote'), 10,
                  what="the probe quoting nvidia-smi's words")
    print("the probe's warning quotes nvidia-smi and its exit status")


CASES = [
    ('GPU lost at start, failOnInitError false',
     dict(nvidia_scenario='gpu-lost-at-start', resources=INTEL + [RES_GPU], config_extra=NO_FAIL), lost_at_start),
    ('MIG instances from the plain table (no -q), mixed, index, passDeviceSpecs',
     dict(nvidia_scenario='h200-mig', resources=INTEL + [MIG + '2c.3g.71gb'],
          config_extra=yaml_config('mixed', 'index', 'envvar', True)), mig_ids_from_table),
    ('single, MIG on one GPU of two: nvidia.com/gpu with no device',
     dict(nvidia_scenario='h100-mig-and-h100', resources=INTEL, config_extra=yaml_config('single')),
     single_invalid),
    ('single, MIG profiles mixed: nvidia.com/gpu with no device',
     dict(nvidia_scenario='h100-mig', resources=INTEL, config_extra=yaml_config('single')), single_invalid),
    ('unrecognised nvidia-smi output, failOnInitError false',
     dict(nvidia_scenario='no-nvml-library', resources=INTEL, config_extra=NO_FAIL), unrecognised_output),
]

if __name__ == '__main__':
    run_cases(CASES)
