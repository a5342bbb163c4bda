#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# nvidia_sim.py — shared pieces of the NVIDIA end-to-end tests (test_nvidia_*.py): nodes
# with the fake NVIDIA tools (harness nvidia_scenario), the GPU and MIG ids of the
# recorded scenarios, and checks of Allocate answers written as the NVIDIA device
# plugin's documentation describes them.
#
# Contract: run_cases() runs each (title, node kwargs, fn) on a fresh node, stops it,
# requires clean daemon exits, and exits the process 0 (all passed), 1 (one failed,
# logs dumped) or 77 (skipped). The expected values here come from the recordings in
# tests/data/nvidia (L-*.txt, q-*.txt) and the upstream plugin's docs, never from kgpu.

import os
import re
import sys
import traceback

import harness
from harness import check

RES_GPU = 'nvidia.com/gpu'
MIG = 'nvidia.com/mig-'
VOLUME_ROOT = '/var/run/nvidia-container-devices'
CDI_ANNOTATION = re.compile(r'^cdi\.k8s\.io/nvidia-device-plugin_[A-Za-z0-9_.-]+$')

# h100-mig: L-H100-MIG-1.txt and q-H100-MIG-1.txt (GPU index 0, minor 0).
H100 = 'GPU-00000000-0000-0000-0000-000000000000'
H100_MIG = {  # MIG device index -> (UUID, profile, GPU instance, compute instance)
    0: ('MIG-00000000-0000-0000-0000-000000000000', '3g.40gb', 2, 0),
    1: ('MIG-00000001-0000-0000-0000-000000000001', '2g.20gb', 3, 0),
    2: ('MIG-00000002-0000-0000-0000-000000000002', '1g.10gb', 9, 0),
    3: ('MIG-00000003-0000-0000-0000-000000000003', '1g.10gb', 10, 0),
}
# h100-mig-7x1g: L-H100-MIG-2.txt (7x 1g.10gb); h100-mig-mixed: L-H100-MIG-3.txt.
H100B = 'GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4'
H100B_7X1G = ['MIG-3f6f389f-b0cc-5e5c-8e32-eaa8fd067902', 'MIG-35f93699-4b53-5a19-8289-80b8418eec60',
              'MIG-9d14fb21-4ae1-546f-a636-011582899c39', 'MIG-0f709664-740c-52b0-ae79-3e4c9ede6d3b',
              'MIG-5d23f73a-d378-50ac-a6f5-3bf5184773bb', 'MIG-6cea15c7-8a56-578c-b965-0e73cb6dfc10',
              'MIG-981c86e9-3607-57d7-9426-295347e4b925']
H100B_MIXED = {  # profile -> MIG UUIDs
    '3g.40gb': ['MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde'],
    '2g.20gb': ['MIG-56c30729-347f-5dd6-8da0-c3cc59e969e0'],
    '1g.10gb': ['MIG-9d14fb21-4ae1-546f-a636-011582899c39', 'MIG-0f709664-740c-52b0-ae79-3e4c9ede6d3b'],
}
# l40s: L-L40S-1.txt; 8xh100-nvlink: the scenario's composed UUIDs.
L40S = 'GPU-00000000-0000-0000-0000-000000000000'
H100X8 = ['GPU-0000000%d-0000-0000-0000-00000000000%d' % (i, i) for i in range(8)]
COMMON_NODES = ['/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools']


def yaml_config(mig='none', id_strategy=None, list_strategy=None, pass_specs=None, extra=''):
    """A `version: v1` file as the NVIDIA plugin documents it (flags.*), plus extra."""
    out = 'version: v1\nflags:\n  migStrategy: %s\n' % mig
    plugin = []
    if id_strategy:
        plugin.append('    deviceIDStrategy: %s\n' % id_strategy)
    if list_strategy:
        if isinstance(list_strategy, (list, tuple)):
            plugin.append('    deviceListStrategy: [%s]\n' % ', '.join(list_strategy))
        else:
            plugin.append('    deviceListStrategy: %s\n' % list_strategy)
    if pass_specs is not None:
        plugin.append('    passDeviceSpecs: %s\n' % ('true' if pass_specs else 'false'))
    if plugin:
        out += '  plugin:\n' + ''.join(plugin)
    return out + extra


def ids(devs):
    return sorted(d['id'] for d in devs)


def wait_devices(node, resource, want, healthy=True, timeout=10):
    """Waits for the ListAndWatch list of resource to be exactly the ids `want` (all
    Healthy when healthy); returns the device dicts."""
    cl = node.kubelet.plugin(resource, timeout)
    pred = (lambda d: ids(d) == sorted(want) and
            (not healthy or all(x['health'] == 'Healthy' for x in d)))
    _, devs = cl.wait_update(pred, timeout=timeout)
    return devs


def check_answer(a, env=None, mounts=(), devices=(), annotation_ids=None, cdi=(), extra_envs=None, what=''):
    """One container's Allocate answer against what the NVIDIA plugin returns.
    env: NVIDIA_VISIBLE_DEVICES value or None (absent); mounts: [(container, host)];
    devices: host paths (container path equal, "rw"); annotation_ids: runtime ids of
    the CDI annotation or None; cdi: CDI device names; extra_envs: other envs required
    exactly (others than NVIDIA_VISIBLE_DEVICES must then be absent)."""
    envs = dict(a['envs'])
    got = envs.pop('NVIDIA_VISIBLE_DEVICES', None)
    check(got == env, '%s: NVIDIA_VISIBLE_DEVICES=%r, expected %r (answer %r)' % (what, got, env, a))
    check(envs == (extra_envs or {}), '%s: other envs %r, expected %r' % (what, envs, extra_envs or {}))
    got_mounts = sorted((m['container_path'], m['host_path']) for m in a['mounts']
                        if m['container_path'].startswith(VOLUME_ROOT))
    check(got_mounts == sorted(mounts), '%s: volume-mounts %r, expected %r' % (what, got_mounts, sorted(mounts)))
    got_dev = sorted((d['container_path'], d['host_path'], d['permissions']) for d in a['devices'])
    want_dev = sorted((p, p, 'rw') for p in devices)
    check(got_dev == want_dev, '%s: device specs %r, expected %r' % (what, got_dev, want_dev))
    if annotation_ids is None:
        check(not a['annotations'], '%s: unexpected annotations %r' % (what, a['annotations']))
    else:
        check(len(a['annotations']) == 1, '%s: annotations %r' % (what, a['annotations']))
        k, v = next(iter(a['annotations'].items()))
        check(CDI_ANNOTATION.match(k), '%s: annotation key %r' % (what, k))
        want = ','.join('nvidia.com/gpu=%s' % i for i in annotation_ids)
        check(v == want, '%s: annotation value %r, expected %r' % (what, v, want))
    check(sorted(a['cdi_devices']) == sorted(cdi), '%s: CDI devices %r, expected %r' % (what, a['cdi_devices'], list(cdi)))


def mig_nodes(gpu_index, gi, ci):
    """The capability nodes of a MIG device (mig-minors as the harness writes it)."""
    return ['/dev/nvidia-caps/nvidia-cap%d' % harness.mig_cap_minor(gpu_index, gi),
            '/dev/nvidia-caps/nvidia-cap%d' % harness.mig_cap_minor(gpu_index, gi, ci)]


def run_cases(cases):
    name = os.path.basename(sys.argv[0])
    harness.exit_on_sigterm()
    skipped = 0
    for title, kwargs, fn in cases:
        node = None
        try:
            node = harness.Node(**kwargs)
            node.start()
            fn(node)
        except harness.Skip as e:
            print('SKIP %s [%s]: %s' % (name, title, e))
            skipped += 1
            if node:
                node.stop()
            continue
        except BaseException:
            traceback.print_exc()
            if node:
                node.dump_logs()
                node.stop()
            print('FAIL %s [%s]' % (name, title))
            sys.exit(1)
        rcs = node.stop(dump_on_unclean=True)
        bad = {k: v for k, v in rcs.items() if v not in (0, None)}
        if bad:
            print('FAIL %s [%s]: daemons did not exit cleanly on SIGTERM: %r' % (name, title, bad))
            sys.exit(1)
        print('ok %s [%s]' % (name, title), flush=True)
    if skipped == len(cases):
        sys.exit(77)
    print('PASS %s' % name)
    sys.exit(0)
