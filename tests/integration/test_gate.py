#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_gate.py — kgpu-grpcd as the last gate: a process owning io.kgpu.Broker1 (here
# fake_broker.py, as the broker's user) cannot hand a pod the node.
#
# The node has the two Intel GPUs of layout two-gpus and the NVIDIA L40S of scenario
# l40s, exported by the real root probe. The fake broker advertises the Intel GPUs (and
# later the NVIDIA one) and answers Allocate with what the test sets. Asserts: a
# well-formed answer reaches the kubelet unchanged; each of the incident's answers (host
# / read-write at /host, /dev/sda with rwm, LD_PRELOAD) and a node of the other GPU, a
# by-path link read-write, a foreign CDI name, an annotation outside the CDI prefix,
# NVIDIA_VISIBLE_DEVICES=all, a node the probe does not export: the kubelet gets
# PERMISSION_DENIED naming what was refused and nothing else, and grpcd logs the refusal
# at warning; PropertiesChanged signals the fake broker sends as if it were the probe
# (broadcast and to grpcd alone) widen nothing; with the probe stopped, the last inventory
# still passes the good answer and refuses the bad one; as root, the fake broker then
# takes io.kgpu.Probe1 itself (the test's bus policy allows it) with /dev/sda as the
# GPU's node, and grpcd does not believe that owner (uid not root): /dev/sda is refused.

import grpc

import harness
from harness import check, RES_I915, RES_XE, GPU_I915, GPU_XE, RES_NVIDIA
from intel_devmgr import probe_gpus

CARD0, RENDER0 = '/dev/dri/card0', '/dev/dri/renderD128'
GOOD_I915 = {'devices': [[CARD0, CARD0, 'rw'], [RENDER0, RENDER0, 'rw']]}
GOOD_XE = {'devices': [['/dev/dri/card1', '/dev/dri/card1', 'rw'], ['/dev/dri/renderD129', '/dev/dri/renderD129', 'rw']]}
BASE = {
    'resources': [[RES_I915, False, True], [RES_XE, False, True]],
    'devices': {RES_I915: [[GPU_I915, 'Healthy', [0]]], RES_XE: [[GPU_XE, 'Healthy', [0]]]},
    'answers': {RES_I915: GOOD_I915, RES_XE: GOOD_XE},
}


def with_answer(res, answer, **extra):
    st = dict(BASE, **extra)
    st['answers'] = dict(BASE['answers'], **{res: answer})
    return st


def expect_refused(node, res, ids, want, what):
    """Allocate must fail with PERMISSION_DENIED naming `want`; grpcd must log it."""
    cl = node.kubelet.plugin(res)
    try:
        got = cl.allocate(ids)
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.PERMISSION_DENIED,
              '%s: status %s %r, expected PERMISSION_DENIED' % (what, e.code(), e.details()))
        check(want in (e.details() or ''), '%s: the message %r does not name %r' % (what, e.details(), want))
        check('kgpu-grpcd refused' in e.details(), '%s: message %r' % (what, e.details()))
    else:
        raise AssertionError('%s: the kubelet got the answer %r' % (what, got))
    node.wait_for(lambda: check(any('Refused kgpu-brokerd' in line and want in line
                                    for line in node.daemons['grpc'].log_text().splitlines()),
                                '%s: grpcd did not log the refusal' % what), 5, what='the refusal in the log')


def run(node):
    grpcd = node.daemons['grpc']
    cl = node.kubelet.plugin(RES_I915)
    gpus = probe_gpus(node)
    nv_id = [i for i, g in gpus.items() if g['Vendor'] == 'nvidia'][0]
    nv = gpus[nv_id]
    i915_path = [p for p, g in node.busctl('call', harness.PROBE_BUS, '/io/kgpu/Probe1',
                                           'org.freedesktop.DBus.ObjectManager', 'GetManagedObjects')['data'][0].items()
                 if g.get('io.kgpu.Gpu1', {}).get('Id', {}).get('data') == GPU_I915][0]

    # A well-formed answer passes unchanged, for both resources.
    c = cl.allocate([GPU_I915])
    check(sorted((d['container_path'], d['host_path'], d['permissions']) for d in c['devices'])
          == sorted(map(tuple, GOOD_I915['devices'])), 'good i915 answer changed: %r' % c)
    check(not c['envs'] and not c['mounts'] and not c['annotations'] and not c['cdi_devices'], 'extras: %r' % c)
    c = node.kubelet.plugin(RES_XE).allocate([GPU_XE])
    check(len(c['devices']) == 2, 'good xe answer: %r' % c)

    # The incident and its relatives: refused, nothing forwarded.
    hostile = [
        ('host / read-write at /host', dict(GOOD_I915, mounts=[['/host', '/', False]]), "host path '/' at '/host'"),
        ('/dev/sda rwm', {'devices': GOOD_I915['devices'] + [['/dev/sda', '/dev/sda', 'rwm']]}, "'/dev/sda'"),
        ('LD_PRELOAD', dict(GOOD_I915, envs={'LD_PRELOAD': '/tmp/x.so'}), "'LD_PRELOAD'"),
        ('the xe GPU\'s node', {'devices': [['/dev/dri/card1', '/dev/dri/card1', 'rw']]}, "'/dev/dri/card1'"),
        ('mknod on its own node', {'devices': [[CARD0, CARD0, 'rwm']]}, "permissions 'rwm'"),
        ('by-path link read-write', dict(GOOD_I915, mounts=[['/dev/dri/by-path', '/dev/dri/by-path', False]]),
         'read-write mount'),
        ('foreign CDI name', dict(GOOD_I915, cdi=['gpu.intel.com/gpu=' + GPU_XE]), 'gpu.intel.com/gpu=' + GPU_XE),
        ('other vendor CDI', dict(GOOD_I915, cdi=['nvidia.com/gpu=all']), 'nvidia.com/gpu=all'),
        ('annotation outside the CDI prefix', dict(GOOD_I915, annotations={'io.kubernetes.cri-o.Devices': '/dev/sda'}),
         'io.kubernetes.cri-o.Devices'),
    ]
    for what, answer, want in hostile:
        node.set_fake_broker(with_answer(RES_I915, answer))
        expect_refused(node, RES_I915, [GPU_I915], want, what)
    text = grpcd.log_text()
    check(any('<warning>' in line and 'Refused kgpu-brokerd' in line for line in text.splitlines()),
          'no refusal logged at warning: %r' % text[-3000:])

    # The fake broker claims, as if it were the probe, that /dev/sda is the i915 GPU's.
    spoof = [{'path': i915_path, 'interface': 'io.kgpu.Gpu1', 'unicast': u,
              'properties': {'DeviceNodes': ['as', [CARD0, RENDER0, '/dev/sda']]}}
             for u in (False, True)]
    node.set_fake_broker(with_answer(RES_I915, {'devices': GOOD_I915['devices'] + [['/dev/sda', '/dev/sda', 'rw']]},
                                     spoof=spoof))
    expect_refused(node, RES_I915, [GPU_I915], "'/dev/sda'", 'spoofed probe signals')
    check('spoofed PropertiesChanged' in node.daemons['broker'].log_text(), 'the fake broker sent no spoof')
    node.set_fake_broker(BASE)
    check(len(cl.allocate([GPU_I915])['devices']) == 2, 'the spoof changed the inventory')

    # NVIDIA: the probe's L40S, advertised by the fake broker.
    nv_nodes = [[n, n, 'rw'] for n in nv['DeviceNodes']]
    good_nv = {'devices': nv_nodes, 'envs': {'NVIDIA_VISIBLE_DEVICES': nv_id}, 'cdi': ['nvidia.com/gpu=' + nv_id]}
    nv_state = dict(BASE, resources=BASE['resources'] + [[RES_NVIDIA, False, True]],
                    devices=dict(BASE['devices'], **{RES_NVIDIA: [[nv_id, 'Healthy', [0]]]}),
                    answers=dict(BASE['answers'], **{RES_NVIDIA: good_nv}))
    node.set_fake_broker(nv_state)
    ncl = node.kubelet.plugin(RES_NVIDIA, timeout=10)
    c = ncl.allocate([nv_id])
    check(c['envs'] == {'NVIDIA_VISIBLE_DEVICES': nv_id} and len(c['devices']) == len(nv_nodes),
          'good NVIDIA answer: %r' % c)
    for what, answer, want in (
            ('every GPU', dict(good_nv, envs={'NVIDIA_VISIBLE_DEVICES': 'all'}), "'all'"),
            ('driver capabilities', dict(good_nv, envs={'NVIDIA_DRIVER_CAPABILITIES': 'all'}), 'NVIDIA_DRIVER_CAPABILITIES'),
            ('a node not exported', {'devices': nv_nodes + [['/dev/nvidia7', '/dev/nvidia7', 'rw']]}, "'/dev/nvidia7'"),
            ('MPS pieces without MPS', dict(good_nv, mounts=[['/dev/shm', '/dev/shm', False]]), "'/dev/shm'")):
        st = dict(nv_state, answers=dict(nv_state['answers'], **{RES_NVIDIA: answer}))
        node.set_fake_broker(st)
        expect_refused(node, RES_NVIDIA, [nv_id], want, what)
    node.set_fake_broker(BASE)

    # The probe stops: its last inventory stays the reference.
    node.daemons['probe'].stop()
    node.wait_bus_name_gone(harness.PROBE_BUS)
    node.wait_for(lambda: check('checked against its last inventory' in grpcd.log_text(), 'no notice'), 5,
                  what='the notice of the probe leaving')
    check(len(cl.allocate([GPU_I915])['devices']) == 2, 'good answer refused with the probe away')
    node.set_fake_broker(with_answer(RES_I915, dict(GOOD_I915, mounts=[['/host', '/', False]])))
    expect_refused(node, RES_I915, [GPU_I915], "host path '/'", 'host mount with the probe away')

    # The broker's process takes io.kgpu.Probe1 itself (this test's bus policy lets it;
    # the installed one does not) and exports /dev/sda as the i915 GPU's node: grpcd does
    # not believe an owner that is not root, and keeps the last inventory.
    if node.root:
        node.set_fake_broker(with_answer(RES_I915, {'devices': [['/dev/sda', '/dev/sda', 'rw']]}, probe={
            i915_path: {'Id': ['s', GPU_I915], 'Vendor': ['s', 'intel'], 'Driver': ['s', 'i915'],
                        'DeviceNodes': ['as', ['/dev/sda']], 'Index': ['i', -1]}}))
        node.wait_bus_name(harness.PROBE_BUS)
        node.wait_for(lambda: check('owns io.kgpu.Probe1' in node.daemons['broker'].log_text(),
                                    'the fake broker does not serve its objects yet'), 5, what='the fake probe')
        # grpcd has judged the new owner: refused it, or (were it believed) read its objects.
        node.wait_for(lambda: check(any(t in grpcd.log_text() for t in ("neither root nor kgpu-grpcd's own",
                                                                         'GPU inventory of kgpu-probed read again')),
                                    'grpcd has not looked at the new owner'), 5, what='the new owner judged')
        expect_refused(node, RES_I915, [GPU_I915], "'/dev/sda'", 'a probe owned by the broker\'s user')
        check("neither root nor kgpu-grpcd's own" in grpcd.log_text(), 'grpcd did not say why it refused the owner')
        node.set_fake_broker(dict(BASE, probe=node.fake_broker['probe']))
        check(len(cl.allocate([GPU_I915])['devices']) == 2, 'the last inventory was lost')
    check(grpcd.alive(), 'grpcd died')


if __name__ == '__main__':
    harness.run_test(run, fake_broker=BASE, nvidia_scenario='l40s', resources=[RES_I915, RES_XE],
                     bus_policy='  <policy user="%s">\n    <allow own="io.kgpu.Probe1"/>\n  </policy>\n'
                     % harness.BROKER_USER)
