#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_intel_probe.py — kgpu-probed alone (no broker) on each Intel testbed layout: its
# io.kgpu.Gpu1 objects, the NFD feature file and the CDI spec it writes, against the
# values written below; then, on "sriov", a VF removed by uevent turns Unhealthy and
# leaves the labels and the CDI spec (NFD's counts stay 5: the PF and its 4 VFs are PCI
# functions still), and comes back with an add uevent; on "integrated",
# GPU_MEMORY_OVERRIDE from the intel: section of the config file; on "two-gpus" the GPUs'
# MeiNodes; on "bochs" (a VM's bochs-drm card, no Intel GPU) no GPU, no label, and one
# line at info naming the card, said once even when the card is removed and added again.

import json
import os
import time

import harness
from harness import check

GIB = 1 << 30

MAX1550 = [('0000:%s:00.0' % b, i, 0 if i < 4 else 1) for i, b in
           enumerate(('18', '28', '38', '48', '98', 'a8', 'b8', 'c8'))]

# layout -> (GPUs as (id, card number, NUMA node, PhysicalFunction, MemoryBytes, Tiles, PciClass),
#            expected feature file lines)
LAYOUTS = {
    'eight-gpus': (
        [(g, c, n, '', 128 * GIB, 2, 0x038000) for g, c, n in MAX1550],
        ['gpu.intel.com/cards=card0.card1.card2.card3.card4.card5.card6.card7',
         'gpu.intel.com/device-id.0380-0bd5.count=8',
         'gpu.intel.com/device-id.0380-0bd5.present=true',
         'gpu.intel.com/device.count=8',
         'gpu.intel.com/family=Max_Series',
         'gpu.intel.com/gpu-numbers=0.1.2.3.4.5.6.7',
         'gpu.intel.com/memory.max=1099511627776',
         'gpu.intel.com/millicores=8000',
         'gpu.intel.com/numa-gpu-map=0-0.1.2.3_1-4.5.6.7',
         'gpu.intel.com/product=Max_1550',
         'gpu.intel.com/tiles=16']),
    'sriov': (
        [('0000:4d:00.%d' % f, f, 0, '0000:4d:00.0', 4 * GIB, 1, 0x038000) for f in range(1, 5)],
        ['gpu.intel.com/cards=card1.card2.card3.card4',
         'gpu.intel.com/device-id.0380-56c0.count=5',
         'gpu.intel.com/device-id.0380-56c0.present=true',
         'gpu.intel.com/device.count=5',
         'gpu.intel.com/family=Flex_Series',
         'gpu.intel.com/gpu-numbers=1.2.3.4',
         'gpu.intel.com/memory.max=17179869184',
         'gpu.intel.com/millicores=4000',
         'gpu.intel.com/numa-gpu-map=0-1.2.3.4',
         'gpu.intel.com/product=Flex_170',
         'gpu.intel.com/tiles=4']),
    'many-vfs': (
        [('0000:%s:%02x.%d' % (bus, k // 8, k % 8), card0 + k, numa, '0000:%s:00.0' % bus, 4 * GIB, 1, 0x038000)
         for bus, card0, numa in (('4d', 0, 0), ('ca', 17, 1)) for k in range(1, 17)],
        ['gpu.intel.com/cards=card1.card10.card11.card12.card13.card14.card15.card16.card18.c',
         'gpu.intel.com/device-id.0380-56c0.count=34',
         'gpu.intel.com/device-id.0380-56c0.present=true',
         'gpu.intel.com/device.count=34',
         'gpu.intel.com/family=Flex_Series',
         'gpu.intel.com/gpu-numbers2=Z.30.31.32.33.4.5.6.7.8.9',
         'gpu.intel.com/gpu-numbers=1.10.11.12.13.14.15.16.18.19.2.20.21.22.23.24.25.26.27.28.29.3',
         'gpu.intel.com/memory.max=137438953472',
         'gpu.intel.com/millicores=32000',
         'gpu.intel.com/numa-gpu-map2=Z.25.26.27.28.29.30.31.32.33',
         'gpu.intel.com/numa-gpu-map=0-1.10.11.12.13.14.15.16.2.3.4.5.6.7.8.9_1-18.19.20.21.22.23.24',
         'gpu.intel.com/product=Flex_170',
         'gpu.intel.com/tiles=32']),
    'two-gpus': (
        [('0000:03:00.0', 0, 0, '', 16 * GIB, 1, 0x030000),
         ('0000:04:00.0', 1, 0, '', 12 * GIB, 1, 0x030000)],
        ['gpu.intel.com/cards=card0.card1',
         'gpu.intel.com/device-id.0300-56a0.count=2',
         'gpu.intel.com/device-id.0300-56a0.present=true',
         'gpu.intel.com/device-id.0300-e20b.present=true',
         'gpu.intel.com/family=A_Series',
         'gpu.intel.com/gpu-numbers=0.1',
         'gpu.intel.com/memory.max=30064771072',
         'gpu.intel.com/millicores=2000',
         'gpu.intel.com/numa-gpu-map=0-0.1',
         'gpu.intel.com/tiles=2']),
    'integrated': (
        [('0000:00:02.0', 0, -1, '', 4000000000, 1, 0x030000)],
        ['gpu.intel.com/cards=card0',
         'gpu.intel.com/device-id.0300-46a6.count=1',
         'gpu.intel.com/device-id.0300-46a6.present=true',
         'gpu.intel.com/gpu-numbers=0',
         'gpu.intel.com/memory.max=4000000000',
         'gpu.intel.com/millicores=1000',
         'gpu.intel.com/tiles=1']),
}

# MEI nodes (/dev/mei<N> below <pci>/<driver>.mei-*/mei/): two-gpus only; its chipset MEI
# (/dev/mei2) is no GPU's.
MEI = {'two-gpus': {'0000:03:00.0': ['/dev/mei0'], '0000:04:00.0': ['/dev/mei1']}}

# The integrated GPU has no lmem_total_bytes: GPU_MEMORY_OVERRIDE from the config file.
CONFIG = {'integrated': 'intel:\n  memoryOverride: "4000000000"\n'}


def probe_gpus(node):
    objs = node.busctl('call', harness.PROBE_BUS, '/io/kgpu/Probe1',
                       'org.freedesktop.DBus.ObjectManager', 'GetManagedObjects')['data'][0]
    out = {}
    for _, ifaces in objs.items():
        g = ifaces.get('io.kgpu.Gpu1')
        if g:
            out[g['Id']['data']] = {k: v['data'] for k, v in g.items()}
    return out


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def cdi_devices(node):
    text = read(os.path.join(node.cdi_dir, 'kgpu-intel-gpu.json'))
    if text is None:
        return None
    spec = json.loads(text)
    check(spec['cdiVersion'] == '0.5.0' and spec['kind'] == 'gpu.intel.com/gpu', 'CDI header %r' % spec)
    return {d['name']: [n['path'] for n in d['containerEdits']['deviceNodes']] for d in spec['devices']}


def wait(fn, what, timeout=5):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError('timed out waiting for ' + what)
        time.sleep(0.02)


def render_of(card):
    return 128 + card


def check_layout(node, layout):
    gpus, labels = LAYOUTS[layout]
    objs = probe_gpus(node)
    check(sorted(objs) == sorted(g[0] for g in gpus), '%s: probe ids %r' % (layout, sorted(objs)))
    for gid, card, numa, pf, mem, tiles, cls in gpus:
        o = objs[gid]
        got = (o['CardNode'], o['NumaNode'], o['PhysicalFunction'], o['MemoryBytes'], o['Tiles'], o['PciClass'],
               o['Health'])
        want = ('/dev/dri/card%d' % card, numa, pf, mem, tiles, cls, 'Healthy')
        check(got == want, '%s %s: %r, expected %r' % (layout, gid, got, want))
        links = [] if layout == 'two-gpus' else ['/dev/dri/by-path/pci-%s-card' % gid,
                                                 '/dev/dri/by-path/pci-%s-render' % gid]
        check(o['ByPathNodes'] == links, '%s %s: ByPathNodes %r' % (layout, gid, o['ByPathNodes']))
        mei = MEI.get(layout, {}).get(gid, [])
        check(o['MeiNodes'] == mei, '%s %s: MeiNodes %r, expected %r' % (layout, gid, o['MeiNodes'], mei))
    text = wait(lambda: read(node.feature_file), 'the feature file')
    check(text.splitlines() == labels, '%s: labels\n%s\nexpected\n%s' % (layout, text, '\n'.join(labels)))
    cdi = wait(lambda: cdi_devices(node), 'the CDI spec')
    want = {gid: ['/dev/dri/card%d' % card, '/dev/dri/renderD%d' % render_of(card)] for gid, card, *_ in gpus}
    check(cdi == want, '%s: CDI %r' % (layout, cdi))
    print('%s: %d GPUs, %d labels, CDI ok' % (layout, len(gpus), len(labels)))


def vf_hotplug(node):
    vf = '0000:4d:00.2'
    node.testbed_cmd('remove ' + vf)
    wait(lambda: probe_gpus(node)[vf]['Health'] == 'Unhealthy', vf + ' Unhealthy')
    check(probe_gpus(node)[vf]['HealthReason'] == 'removed', 'reason')
    wait(lambda: 'gpu.intel.com/gpu-numbers=1.3.4\n' in (read(node.feature_file) or ''), 'labels without the VF')
    text = read(node.feature_file)
    check('gpu.intel.com/millicores=3000\n' in text and 'gpu.intel.com/tiles=3\n' in text, text)
    # NFD counts PCI functions: the VF's DRM nodes going away changes no count.
    check('gpu.intel.com/device-id.0380-56c0.count=5\n' in text and 'gpu.intel.com/device.count=5\n' in text, text)
    check(sorted(cdi_devices(node)) == ['0000:4d:00.1', '0000:4d:00.3', '0000:4d:00.4'], 'CDI after removal')
    node.testbed_cmd('add ' + vf)
    wait(lambda: probe_gpus(node)[vf]['Health'] == 'Healthy', vf + ' Healthy again')
    wait(lambda: (read(node.feature_file) or '').splitlines() == LAYOUTS['sriov'][1], 'labels restored')
    check(vf in cdi_devices(node), 'CDI restored')
    print('sriov: VF remove/add ok')


BOCHS_LINE = ('card0 (0000:00:02.0, vendor 0x1234, driver bochs-drm): not an Intel GPU driven by i915 or xe, '
              'skipped.')


def bochs():
    with harness.Node(layout='bochs', broker=False, kubelet=False) as n:
        n.daemons['probe'].wait_notify('READY', '1', timeout=20)
        check(probe_gpus(n) == {}, 'GPUs on a node with only a bochs-drm card: %r' % probe_gpus(n))
        wait(lambda: BOCHS_LINE in n.daemons['probe'].log_text(), 'the skipped card line')
        # The card goes and comes back (remove and add uevents): nothing more is said.
        n.testbed_cmd('remove 0000:00:02.0')
        n.testbed_cmd('add 0000:00:02.0')
        time.sleep(1.0)
        log = n.daemons['probe'].log_text()
        said = [l for l in log.splitlines() if BOCHS_LINE in l]
        check(len(said) == 1, 'the skipped card said %d times:\n%s' % (len(said), log))
        check('<' not in said[0].split(']: ', 1)[1][:1], 'not at info: %r' % said[0])
        check(read(n.feature_file) is None, 'labels without an Intel GPU: %r' % read(n.feature_file))
        print('bochs: 0 GPUs, "%s" once at info' % BOCHS_LINE)


def run(node):
    check_layout(node, 'sriov')
    vf_hotplug(node)
    bochs()
    for layout in ('eight-gpus', 'many-vfs', 'two-gpus', 'integrated'):
        with harness.Node(layout=layout, broker=False, kubelet=False, config_extra=CONFIG.get(layout, '')) as n:
            check_layout(n, layout)


if __name__ == '__main__':
    harness.run_test(run, layout='sriov', broker=False, kubelet=False)
