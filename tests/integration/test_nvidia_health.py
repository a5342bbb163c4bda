#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_nvidia_health.py — a GPU lost in the fake nvidia-smi output (set_lost: "Unable to
# determine the device handle for GPU...", exit 15) turns every id on it Unhealthy in
# ListAndWatch within one poll interval, and Healthy again after the configured number of
# good polls; the other GPUs' ids stay Healthy throughout.
#
# Cases: 8xh100-nvlink with time-slicing replicas 2 (GPU 3 lost: "<uuid3>::0/1"),
# h100-mig with migStrategy mixed (every MIG device of the GPU), l40s with MPS slices.
# nvidia.healthIntervalMs 1000, nvidia.healthRecoverPolls 2. Measured from the moment
# the state file says "lost" to the ListAndWatch update: at most one interval plus 0.8 s
# (the poll's own run time: the fake tools are python); recovery not before one interval
# (two good polls are needed) and within three intervals plus 0.8 s. The count is checked
# on the fake's command log too: the ids come back after exactly healthRecoverPolls
# --query-gpu polls started after the GPU came back (the clock bounds alone cannot tell
# 2 from the default 3 on a slow machine). The first of them starts a full interval after
# the poll that reported the loss, and the next one a full interval after the last, so the
# count is exact.

import time

from harness import check, RES_I915, RES_XE
from nvidia_sim import (H100X8, H100_MIG, L40S, MIG, RES_GPU, yaml_config, wait_devices, run_cases)

INTEL = [RES_I915, RES_XE]
INTERVAL = 1.0
RECOVER = 2
SLACK = 0.8
HEALTH = 'nvidia:\n  healthIntervalMs: %d\n  healthRecoverPolls: %d\n' % (INTERVAL * 1000, RECOVER)


def polls(node):
    return sum(1 for c in node.nvidia_commands() if c.startswith('nvidia-smi') and '--query-gpu=' in c)


def lose_and_recover(node, index, watched, lost_ids):
    """watched: {resource: all its ids}; lost_ids: the ids that must go Unhealthy."""
    for res, want in watched.items():
        wait_devices(node, res, want, timeout=15)
    time.sleep(INTERVAL)        # a few good polls first

    def state(devs):
        return {d['id']: d['health'] for d in devs}

    t0 = time.monotonic()
    node.nvidia_set_lost([index])
    for res, want in watched.items():
        cl = node.kubelet.plugin(res)
        lost_here = [i for i in want if i in lost_ids]
        if not lost_here:
            continue
        t, devs = cl.wait_update(lambda d: all(state(d).get(i) == 'Unhealthy' for i in lost_here), after=t0,
                                 timeout=INTERVAL * 3 + 5)
        delay = t - t0
        print('%s: %d id(s) Unhealthy %.3f s after the GPU was lost' % (res, len(lost_here), delay))
        check(delay <= INTERVAL + SLACK, '%s: Unhealthy after %.3f s, more than one poll interval (%.1f s)'
              % (res, delay, INTERVAL))
        others = [d for d in devs if d['id'] not in lost_ids]
        check(all(d['health'] == 'Healthy' for d in others), '%s: other ids affected: %r' % (res, others))
        check(len(devs) == len(want), '%s: ids dropped instead of Unhealthy: %r' % (res, devs))

    t1 = time.monotonic()
    polls_before = polls(node)
    node.nvidia_set_lost([])
    for res, want in watched.items():
        if not any(i in lost_ids for i in want):
            continue
        cl = node.kubelet.plugin(res)
        t, devs = cl.wait_update(lambda d: all(x['health'] == 'Healthy' for x in d) and len(d) == len(want),
                                 after=t1, timeout=INTERVAL * (RECOVER + 3) + 5)
        delay = t - t1
        print('%s: Healthy again %.3f s after the GPU came back' % (res, delay))
        check(delay >= (RECOVER - 1) * INTERVAL * 0.9,
              '%s: Healthy after %.3f s: fewer than %d good polls' % (res, delay, RECOVER))
        check(delay <= (RECOVER + 1) * INTERVAL + SLACK, '%s: recovery took %.3f s' % (res, delay))
        n = polls(node) - polls_before
        check(n == RECOVER, '%s: Healthy again after %d good polls, expected healthRecoverPolls %d' % (res, n, RECOVER))


def h100x8(node):
    all_ids = ['%s::%d' % (g, i) for g in H100X8 for i in range(2)]
    lose_and_recover(node, 3, {RES_GPU: all_ids}, [H100X8[3] + '::0', H100X8[3] + '::1'])


def h100_mig(node):
    watched = {}
    for uuid, profile, _, _ in H100_MIG.values():
        watched.setdefault(MIG + profile, []).append(uuid)
    lose_and_recover(node, 0, watched, [m[0] for m in H100_MIG.values()])


def l40s_mps(node):
    lose_and_recover(node, 0, {RES_GPU: ['%s::%d' % (L40S, i) for i in range(3)]},
                     ['%s::%d' % (L40S, i) for i in range(3)])


CASES = [
    ('8xh100, replicas 2, GPU 3 lost',
     dict(nvidia_scenario='8xh100-nvlink', resources=INTEL + [RES_GPU],
          config_extra=yaml_config('none', extra=HEALTH + 'sharing:\n  timeSlicing:\n    resources:\n'
                                   '    - name: nvidia.com/gpu\n      replicas: 2\n')), h100x8),
    ('h100-mig, mixed, GPU 0 lost', dict(nvidia_scenario='h100-mig', resources=INTEL + [MIG + '1g.10gb'],
                                         config_extra=yaml_config('mixed', extra=HEALTH)), h100_mig),
    ('l40s, MPS slices, GPU 0 lost',
     dict(nvidia_scenario='l40s', resources=INTEL + [RES_GPU],
          config_extra=yaml_config('none', extra=HEALTH + 'sharing:\n  mps:\n    resources:\n'
                                   '    - name: nvidia.com/gpu\n      replicas: 3\n')), l40s_mps),
]

if __name__ == '__main__':
    run_cases(CASES)
