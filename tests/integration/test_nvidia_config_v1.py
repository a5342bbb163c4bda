#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_nvidia_config_v1.py — the daemons start with NVIDIA v1 configs that upstream accepts
# and kgpu used to refuse, and serve what upstream would (fake nvidia-smi and
# nvidia-cuda-mps-control, scenario l40s, one GPU):
#
# - the file the nos GPU partitioner writes (tests/data/config-nvidia-v1/nos-generated-mps.yaml:
#   unset flags as null, `resources: {gpus: null}`, `timeSlicing: {}` beside the MPS
#   section, renames without the nvidia.com/ prefix), plus a top-level key no release has:
#   the GPU is advertised as the two MPS slice resources, nvidia.com/gpu-2gb "<uuid>::0",
#   "::1" and nvidia.com/gpu-4gb "::2", "::3", no plain nvidia.com/gpu; probe and broker log
#   the unknown key at warning with file, line and key, and the empty timeSlicing at notice;
# - time-slicing (4 replicas) and MPS (2 replicas) both given
#   (tests/data/config-nvidia-v1/timeslicing-and-mps.yaml): MPS wins as upstream, the GPU
#   is nvidia.com/gpu "<uuid>::0", "::1" (not four time-sliced replicas), and the
#   warning names the file, the timeSlicing line and says MPS is used.
#
# Every daemon stays up (run_cases checks their exit at stop).

import os

import harness
from harness import check, RES_I915, RES_XE
from nvidia_sim import L40S, RES_GPU, wait_devices, run_cases

INTEL = [RES_I915, RES_XE]
CORPUS = os.path.join(harness.SOURCE_ROOT, 'tests', 'data', 'config-nvidia-v1')
RES_2GB = 'nvidia.com/gpu-2gb'
RES_4GB = 'nvidia.com/gpu-4gb'


def corpus(name, extra=''):
    with open(os.path.join(CORPUS, name)) as f:
        return f.read() + extra


def line_of(node, text):
    """1-based line of the config file (as the daemons read it) that starts with text."""
    with open(node.config_file) as f:
        for i, line in enumerate(f, 1):
            if line.startswith(text):
                return i
    raise AssertionError('%r not in %s' % (text, node.config_file))


def check_logged(node, want, daemons=('probe', 'broker')):
    for d in daemons:
        node.wait_for(lambda: check(want in node.daemons[d].log_text(), '%s log lacks %r' % (d, want)), 10,
                      what='%s logs %r' % (d, want))


def nos_file(node):
    wait_devices(node, RES_2GB, ['%s::0' % L40S, '%s::1' % L40S], timeout=15)
    wait_devices(node, RES_4GB, ['%s::2' % L40S, '%s::3' % L40S], timeout=15)
    registered = [r for r, _ in node.kubelet.plugin_items()]
    check(RES_GPU not in registered, 'plain nvidia.com/gpu advertised beside the MPS slices: %r' % registered)
    f = node.config_file
    check_logged(node, '<warning> %s:%d: futureSection: unknown key, ignored' % (f, line_of(node, 'futureSection:')))
    check_logged(node, '<notice> %s:%d: sharing.timeSlicing: empty, beside sharing.mps' % (f, line_of(node, '  timeSlicing: {}')))


def mps_wins(node):
    wait_devices(node, RES_GPU, ['%s::0' % L40S, '%s::1' % L40S], timeout=15)
    f = node.config_file
    ts = line_of(node, '  timeSlicing:') + 1     # the section's first line (its resources)
    check_logged(node, '<warning> %s:%d: sharing.timeSlicing: ignored, sharing.mps is given' % (f, ts))


CASES = [
    ('nos partitioner file', dict(nvidia_scenario='l40s', resources=INTEL + [RES_2GB, RES_4GB],
                                  config_extra=corpus('nos-generated-mps.yaml', 'futureSection:\n  enabled: true\n')),
     nos_file),
    ('time-slicing and MPS: MPS wins', dict(nvidia_scenario='l40s', resources=INTEL + [RES_GPU],
                                           config_extra=corpus('timeslicing-and-mps.yaml')), mps_wins),
]

if __name__ == '__main__':
    run_cases(CASES)
