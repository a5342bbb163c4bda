#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_nvidia_reload.py — a changed MIG layout is picked up on `kgpuctl rescan` (and on
# the probe's SIGHUP, what `systemctl reload` sends) and re-advertised without restarting
# anything; a broker reload changing the MIG strategy re-advertises likewise.
#
# The fake nvidia-smi reads a scenario from a data directory of the test's own
# (symlinks to tests/data/nvidia plus a scenarios/ directory), so the scenario can be
# swapped under the running probe: first the GPU GPU-b4895dbf-... with 3g.40gb,
# 2g.20gb, 2x 1g.10gb (h100-mig-mixed, L-H100-MIG-3.txt), then the same GPU with 7x
# 1g.10gb (h100-mig-7x1g, L-H100-MIG-2.txt). migStrategy mixed.
#
# Asserts: before: mig-3g.40gb, mig-2g.20gb (one device each) and mig-1g.10gb (two);
# after `kgpuctl rescan`: mig-1g.10gb lists the seven MIG UUIDs, the other two
# resources no device; back with SIGHUP to the probe; a Broker1.Reload to migStrategy
# single turns the 7x 1g.10gb into nvidia.com/gpu devices; the pids of probe, broker and
# grpcd never change and grpcd did not re-register the resources that stayed.

import os
import shutil
import signal
import subprocess
import tempfile

import harness
from harness import check, RES_I915, RES_XE
from nvidia_sim import H100B_MIXED, H100B_7X1G, MIG, RES_GPU, yaml_config, wait_devices, run_cases

INTEL = [RES_I915, RES_XE]
DATA = os.path.join(harness.SOURCE_ROOT, 'tests', 'data', 'nvidia')
LIVE = 'h100-live'


def make_data_dir():
    d = tempfile.mkdtemp(prefix='kgpu-nv-data-')
    os.chmod(d, 0o755)
    for f in os.listdir(DATA):
        if f.endswith('.txt'):
            os.symlink(os.path.join(DATA, f), os.path.join(d, f))
    os.mkdir(os.path.join(d, 'scenarios'))
    return d


def use_scenario(data, name):
    tmp = os.path.join(data, 'scenarios', LIVE + '.json.tmp')
    shutil.copyfile(os.path.join(DATA, 'scenarios', name + '.json'), tmp)
    os.chmod(tmp, 0o644)
    os.rename(tmp, os.path.join(data, 'scenarios', LIVE + '.json'))


def rescan(node):
    e = node._env({})
    p = subprocess.run([node.bin('tools', 'kgpuctl'), 'rescan'], capture_output=True, text=True, env=e, timeout=20)
    check(p.returncode == 0, 'kgpuctl rescan: %r %r' % (p.stdout, p.stderr))


def pids(node):
    return {n: d.pid for n, d in node.daemons.items()}


def check_mixed_before(node):
    for profile, want in H100B_MIXED.items():
        wait_devices(node, MIG + profile, want, timeout=15)


def check_7x1g(node):
    wait_devices(node, MIG + '1g.10gb', H100B_7X1G, timeout=15)
    for profile in ('3g.40gb', '2g.20gb'):
        cl = node.kubelet.plugin(MIG + profile)
        cl.wait_update(lambda d: d == [], timeout=15)


def run(node, data):
    before = pids(node)
    check_mixed_before(node)
    n_regs = len(node.kubelet.registrations)

    use_scenario(data, 'h100-mig-7x1g')
    rescan(node)
    check_7x1g(node)

    use_scenario(data, 'h100-mig-mixed')
    node.daemons['probe'].send_signal(signal.SIGHUP)
    check_mixed_before(node)

    use_scenario(data, 'h100-mig-7x1g')
    rescan(node)
    check_7x1g(node)
    check(pids(node) == before and all(d.alive() for d in node.daemons.values()),
          'a daemon was restarted: %r -> %r' % (before, pids(node)))
    again = [r.resource_name for r in node.kubelet.registrations[n_regs:]]
    check(not any(r.startswith(MIG) for r in again), 'MIG resources registered again: %r' % again)

    # The broker's side: migStrategy single, reloaded; the seven MIG devices become nvidia.com/gpu.
    node.write_config_extra(yaml_config('single'))
    r = node.busctl('call', harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS, 'Reload', check=False,
                    json_out=False)
    check(r.returncode == 0, 'Reload: %r' % r.stderr)
    wait_devices(node, RES_GPU, H100B_7X1G, timeout=15)
    check(pids(node) == before, 'a daemon was restarted by the reload')


def main():
    data = make_data_dir()
    try:
        cases = [('MIG layout change, rescan, SIGHUP, reload',
                  dict(nvidia_scenario=LIVE, resources=INTEL + [MIG + '1g.10gb'], extra_env={'KGPU_FAKE_NVIDIA_DATA': data},
                       config_extra=yaml_config('mixed')), lambda node: run(node, data))]
        use_scenario(data, 'h100-mig-mixed')
        run_cases(cases)
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == '__main__':
    main()
