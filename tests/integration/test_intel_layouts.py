#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_intel_layouts.py — ListAndWatch and Allocate answers for each Intel testbed layout
# (two-gpus, eight-gpus, sriov, integrated, many-vfs: two PFs with 16 VFs each), with intel.enableMonitoring and
# intel.cdiDevices on.
#
# Asserts per layout and resource, against the values written below: ListAndWatch lists
# exactly the expected ids (an SR-IOV PF with VFs is not one of them), all Healthy, with
# the expected NUMA node (none for the integrated GPU); Allocate of each id grants exactly
# its card and render node ("rw", container path = host path), its two by-path links as
# read-only mounts (when the probe exports Gpu1.ByPathNodes), the CDI device
# "gpu.intel.com/gpu=<id>", and no envs or annotations; the monitoring resource
# <resource>_monitoring (intel.monitoringMode split) lists one Healthy device "all" whose
# Allocate grants the nodes of every GPU of that resource, their MEI nodes (two-gpus:
# /dev/mei0 of the i915 GPU, /dev/mei1 of the xe one; never the chipset's /dev/mei2) and
# nothing else; an unknown id is refused naming it.
# The sriov and many-vfs layouts need the probe's SR-IOV support (Gpu1.PhysicalFunction); without it
# that layout is reported as skipped, the others still run.

import grpc

import harness
import intel_devmgr
from harness import check, RES_I915, RES_XE

MON = '_monitoring'


def gpus_eight():
    out = []
    for i, b in enumerate(('18', '28', '38', '48', '98', 'a8', 'b8', 'c8')):
        out.append(('0000:%s:00.0' % b, i, 128 + i, [0 if i < 4 else 1]))
    return out


def gpus_many_vfs():
    out = []
    for pf, card0, numa in (('4d', 0, 0), ('ca', 17, 1)):
        for k in range(1, 17):
            out.append(('0000:%s:%02x.%d' % (pf, k // 8, k % 8), card0 + k, 128 + card0 + k, [numa]))
    return out


# layout -> {resource: [(id, card number, render number, NUMA nodes)]}
LAYOUTS = {
    'two-gpus': {RES_I915: [('0000:03:00.0', 0, 128, [0])],
                 RES_XE: [('0000:04:00.0', 1, 129, [0])]},
    'eight-gpus': {RES_I915: gpus_eight()},
    'sriov': {RES_I915: [('0000:4d:00.%d' % f, f, 128 + f, [0]) for f in range(1, 5)]},
    'integrated': {RES_I915: [('0000:00:02.0', 0, 128, [])]},
    'many-vfs': {RES_I915: gpus_many_vfs()},
}


# The MEI nodes of the GPUs that have one (layout two-gpus).
MEI = {'0000:03:00.0': ['/dev/mei0'], '0000:04:00.0': ['/dev/mei1']}


def nodes(card, render):
    return ['/dev/dri/card%d' % card, '/dev/dri/renderD%d' % render]


def check_layout(node, layout, expected):
    probe = intel_devmgr.probe_gpus(node)
    for res, gpus in expected.items():
        cl = node.kubelet.plugin(res)
        want_ids = sorted(g[0] for g in gpus)
        _, devs = cl.wait_update(lambda d: sorted(x['id'] for x in d) == want_ids, timeout=5)
        for gid, card, render, numa in gpus:
            d = [x for x in devs if x['id'] == gid][0]
            check(d['health'] == 'Healthy' and d['numa'] == numa, '%s %s: %r, NUMA %r expected' % (layout, res, d, numa))
            c = cl.allocate([gid])
            got = sorted((x['container_path'], x['host_path'], x['permissions']) for x in c['devices'])
            check(got == sorted((p, p, 'rw') for p in nodes(card, render)), '%s %s: devices %r' % (layout, gid, got))
            links = ['/dev/dri/by-path/pci-%s-card' % gid, '/dev/dri/by-path/pci-%s-render' % gid]
            # Layout two-gpus has no udev DEVLINKS; the others have card and render links.
            if layout == 'two-gpus' or probe.get(gid, {}).get('ByPathNodes') is None:
                links = []
            mounts = sorted((m['container_path'], m['host_path'], m['read_only']) for m in c['mounts'])
            check(mounts == sorted((p, p, True) for p in links), '%s %s: mounts %r' % (layout, gid, mounts))
            check(c['cdi_devices'] == ['gpu.intel.com/gpu=' + gid], '%s %s: CDI %r' % (layout, gid, c['cdi_devices']))
            check(not c['envs'] and not c['annotations'], '%s %s: extras %r' % (layout, gid, c))

        mon = node.kubelet.plugin(res + MON)
        _, mdevs = mon.wait_update(lambda d: len(d) > 0, timeout=5)
        check([(x['id'], x['health']) for x in mdevs] == [('all', 'Healthy')], '%s %s: %r' % (layout, res + MON, mdevs))
        c = mon.allocate(['all'])
        got = sorted(x['host_path'] for x in c['devices'])
        want = sorted(p for gid, card, render, _ in gpus for p in nodes(card, render) + MEI.get(gid, []))
        check(got == want, '%s %s: monitoring devices %r, expected %r' % (layout, res, got, want))
        check(not c['mounts'] and not c['cdi_devices'], '%s monitoring extras %r' % (layout, c))

        try:
            cl.allocate(['0000:ee:00.0'])
            raise AssertionError('%s: unknown id allocated' % layout)
        except grpc.RpcError as e:
            check('0000:ee:00.0' in (e.details() or ''), '%s: %s %r' % (layout, e.code(), e.details()))
    print('%s: %s' % (layout, ', '.join('%s %d' % (r, len(g)) for r, g in expected.items())))


def run(node):
    check_layout(node, 'two-gpus', LAYOUTS['two-gpus'])
    skipped = []
    for layout in ('eight-gpus', 'sriov', 'integrated', 'many-vfs'):
        expected = LAYOUTS[layout]
        res = list(expected) + [r + MON for r in expected]
        with harness.Node(layout=layout, resources=res, config_extra=CONFIG) as n:
            if layout in ('sriov', 'many-vfs') and not any('PhysicalFunction' in g for g in intel_devmgr.probe_gpus(n).values()):
                skipped.append(layout)
                continue
            check_layout(n, layout, expected)
    if skipped:
        print('layouts skipped (probe without SR-IOV support): %s' % ', '.join(skipped))


CONFIG = 'intel:\n  enableMonitoring: true\n  monitoringMode: split\n  cdiDevices: true\n'

if __name__ == '__main__':
    harness.run_test(run, config_extra=CONFIG,
                     resources=[RES_I915, RES_XE, RES_I915 + MON, RES_XE + MON])
