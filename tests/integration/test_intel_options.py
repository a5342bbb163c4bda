#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_intel_options.py — the Intel plugin's id lists and monitoring mode, as flags of a
# real kgpu-brokerd on layout two-gpus (i915 DG2 0x56a0 with /dev/mei0, xe BMG 0xe20b with
# /dev/mei1, the chipset's /dev/mei2), through grpcd to the kubelet simulator:
#
# 1. -enable-monitoring alone (monitoring mode single, the Intel plugin's default): one
#    resource gpu.intel.com/monitoring, device "all", whose Allocate grants the DRM and
#    MEI nodes of both GPUs (not /dev/mei2), no mounts, no CDI; no *_monitoring resource.
# 2. -allow-ids='0x56a0 ,0x9876' (a space before the comma, accepted by the Intel plugin)
#    with -monitoring-mode=split: the broker starts, serves the i915 GPU only, and
#    i915_monitoring grants its nodes and /dev/mei0 only.
# 3. Refused at start (exit 1, the reason in the log): -allow-ids with -deny-ids, an
#    uppercase id, an id without 0x, an empty list item, -monitoring-mode=both.

import os
import subprocess

import harness
from harness import check, RES_I915, RES_XE

MON = 'gpu.intel.com/monitoring'


def broker_resources(node):
    r = node.busctl('call', harness.BROKER_BUS, harness.BROKER_PATH, 'io.kgpu.Broker1', 'ListResources')
    return [x[0] for x in r['data'][0]]


def devices(c):
    return sorted(x['host_path'] for x in c['devices'])


def single_mode(node):
    mon = node.kubelet.plugin(MON)
    _, d = mon.wait_update(lambda d: len(d) > 0, timeout=5)
    check([(x['id'], x['health']) for x in d] == [('all', 'Healthy')], 'monitoring devices %r' % d)
    c = mon.allocate(['all'])
    want = sorted(['/dev/dri/card0', '/dev/dri/renderD128', '/dev/mei0',
                   '/dev/dri/card1', '/dev/dri/renderD129', '/dev/mei1'])
    check(devices(c) == want, 'gpu.intel.com/monitoring grants %r, expected %r' % (devices(c), want))
    check(all(x['container_path'] == x['host_path'] and x['permissions'] == 'rw' for x in c['devices']), repr(c))
    check(not c['mounts'] and not c['cdi_devices'] and not c['envs'], 'monitoring extras %r' % c)
    # The GPU's own resource never gets the MEI node.
    c = node.kubelet.plugin(RES_I915).allocate([harness.GPU_I915])
    check('/dev/mei0' not in devices(c), 'i915 Allocate grants %r' % devices(c))
    seen = broker_resources(node)
    check(MON in seen and not [r for r in seen if r.endswith('_monitoring')],
          'per-driver monitoring in mode single: %r' % seen)
    print('single: %s "all" grants %s' % (MON, ' '.join(want)))


def allow_ids_spaced():
    with harness.Node(broker_args=['-allow-ids=0x56a0 ,0x9876', '-enable-monitoring', '-monitoring-mode=split'],
                      resources=[RES_I915, RES_I915 + '_monitoring']) as n:
        i915 = n.kubelet.plugin(RES_I915)
        _, d = i915.wait_update(lambda d: len(d) > 0, timeout=5)
        check([x['id'] for x in d] == [harness.GPU_I915], 'i915 devices %r' % d)
        seen = broker_resources(n)
        check(RES_XE not in seen and RES_XE + '_monitoring' not in seen, 'xe served without its id in -allow-ids: %r' % seen)
        c = n.kubelet.plugin(RES_I915 + '_monitoring').allocate(['all'])
        want = ['/dev/dri/card0', '/dev/dri/renderD128', '/dev/mei0']
        check(devices(c) == want, 'i915_monitoring grants %r, expected %r' % (devices(c), want))
        rcs = n.stop()
        check(rcs.get('broker') == 0, 'broker exit %r' % rcs)
    print("-allow-ids='0x56a0 ,0x9876': broker up, i915 only; split i915_monitoring grants %s" % ' '.join(want))


def refused_at_start(node):
    env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'KGPU_CONFIG': '', 'KGPU_LOG_TARGET': 'stderr',
           'DBUS_SYSTEM_BUS_ADDRESS': 'unix:path=/nonexistent/kgpu-test-bus'}
    for k in ('ASAN_OPTIONS', 'UBSAN_OPTIONS', 'LSAN_OPTIONS'):
        if k in os.environ:
            env[k] = os.environ[k]
    cases = [
        (['-allow-ids=0x56a0', '-deny-ids=0xe20b'],
         'intel.allowIDs (-allow-ids) and intel.denyIDs (-deny-ids) cannot be used together'),
        (['-allow-ids=0x56A0'], '--allow-ids: expected PCI device ids of 0x and four lowercase hex digits'),
        (['-deny-ids=56a0'], '--deny-ids: expected PCI device ids of 0x and four lowercase hex digits'),
        (['-allow-ids=0x56a0,'], '--allow-ids: empty PCI device id in the list'),
        (['-monitoring-mode=both'], '--monitoring-mode: expected single or split'),
    ]
    for args, want in cases:
        r = subprocess.run([node.bin('daemons', 'broker', 'kgpu-brokerd')] + args, env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        out = r.stdout.decode(errors='replace')
        check(r.returncode == 1 and want in out, '%s: exit %d, expected 1 and %r:\n%s' % (args, r.returncode, want, out))
        print('%s: exit 1, "%s"' % (' '.join(args), want))


def run(node):
    single_mode(node)
    allow_ids_spaced()
    refused_at_start(node)


if __name__ == '__main__':
    harness.run_test(run, broker_args=['-enable-monitoring'], resources=[RES_I915, RES_XE, MON])
