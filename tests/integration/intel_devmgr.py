#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# intel_devmgr.py — the kubelet device manager's part for the Intel integration tests:
# which ids are free, GetPreferredAllocation over them, Allocate, pods in PodResources.
#
# The kubelet simulator only speaks the protocols; this keeps the bookkeeping a real
# kubelet does (it never offers an id a live container holds, it frees the ids of a
# deleted pod), so that tests can drive pod sequences and count where they landed.

import os
import re

import harness

RES_I915 = harness.RES_I915
TESTBEDS = os.path.join(harness.SOURCE_ROOT, 'tests', 'data', 'testbeds')


def layout_subset(name, pci_addresses, path):
    """Writes the records of `name` whose sysfs path mentions one of pci_addresses
    (GPUs with their DRM nodes) to path, for a smaller layout with the same devices."""
    with open(os.path.join(TESTBEDS, name + '.umockdev')) as f:
        blocks = f.read().split('\n\n')
    keep = []
    for b in blocks:
        m = re.search(r'^P: (\S+)', b, re.M)
        if m and any(a in m.group(1) for a in pci_addresses):
            keep.append(b.strip('\n'))
    if not keep:
        raise RuntimeError('no records of %s in layout %s' % (pci_addresses, name))
    with open(path, 'w') as f:
        f.write('# subset of %s: %s\n\n' % (name, ' '.join(pci_addresses)))
        f.write('\n\n'.join(keep) + '\n')
    return path


def probe_gpus(node):
    """{Gpu1 Id: its io.kgpu.Gpu1 properties (name -> value)} from the probe."""
    objs = node.busctl('call', harness.PROBE_BUS, '/io/kgpu/Probe1',
                       'org.freedesktop.DBus.ObjectManager', 'GetManagedObjects')['data'][0]
    out = {}
    for _, ifaces in objs.items():
        g = ifaces.get('io.kgpu.Gpu1')
        if g:
            out[g['Id']['data']] = {k: v['data'] for k, v in g.items()}
    return out


def by_path_links(node, gpu):
    """The probe's ByPathNodes of a GPU, or None when the probe does not export them."""
    return probe_gpus(node).get(gpu, {}).get('ByPathNodes')


def gpu_of(device_id):
    """The GPU (PCI address) of a shared device id "<gpu>-<n>"."""
    head, _, tail = device_id.rpartition('-')
    return head if head and tail.isdigit() else device_id


class DeviceManager:
    def __init__(self, node, resource=RES_I915):
        self.node = node
        self.resource = resource
        self.cl = node.kubelet.plugin(resource)
        _, devs = self.cl.wait_update(lambda d: len(d) > 0, timeout=5)
        self.all_ids = [d['id'] for d in devs]
        self.free = sorted(self.all_ids)
        self.pods = {}          # name -> (ids, Allocate answer)

    def admit(self, name, size=1):
        """Schedules a pod with one container asking for size devices: preferred
        allocation over the free ids, then Allocate. Returns (ids, answer)."""
        if len(self.free) < size:
            raise RuntimeError('kubelet: not enough free %s for %s' % (self.resource, name))
        ids = self.cl.get_preferred_allocation(list(self.free), [], size)
        if len(ids) != size or not set(ids) <= set(self.free):
            raise AssertionError('%s: preferred %r is not %d free ids' % (name, ids, size))
        answer = self.cl.allocate(ids)
        for i in ids:
            self.free.remove(i)
        self.pods[name] = (ids, answer)
        self.publish()
        return ids, answer

    def delete(self, name):
        ids, _ = self.pods.pop(name)
        self.free = sorted(self.free + ids)
        self.publish()
        return ids

    def publish(self):
        """What PodResources List reports: every live pod and its ids."""
        self.node.kubelet.set_pods([
            (name, 'default', [('main', [(self.resource, ids)])])
            for name, (ids, _) in sorted(self.pods.items())])

    def holders(self):
        """{gpu: number of live pods holding one of its shares}."""
        out = {}
        for ids, answer in self.pods.values():
            for g in {gpu_of(i) for i in ids}:
                out[g] = out.get(g, 0) + 1
        return out

    def placements(self):
        """[(pod, sorted GPUs)] in admission order."""
        return [(n, sorted({gpu_of(i) for i in ids})) for n, (ids, _) in self.pods.items()]
