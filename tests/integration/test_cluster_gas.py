#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_cluster_gas.py — GPU Aware Scheduling's annotations from the API server to an
# Allocate answer: API server simulator → kgpu-clusterd (as kgpu-cluster) →
# Broker1.SetGasPods → the Intel resource manager (intel.resourceManager) → kubelet.
# Two i915 GPUs (layout eight-gpus: card0 0000:18:00.0, card1 0000:28:00.0), sharedDevNum 2.
#
# Asserts (root):
#  - before kgpu-clusterd runs, Allocate is refused with the reason naming it;
#  - the node's Pending pods with gas-ts reach the broker (Cluster1.GasPods counts them;
#    a Running pod, a pod without gas-ts and another node's pod are not sent), and two
#    pods whose annotations name different cards get exactly those cards and tile masks;
#  - a pod added later, while running, is served with its own card.

import os
import time

import grpc

import harness
import intel_devmgr
from harness import check, RES_I915
from apiserver_sim import ApiServerSim, make_pki, write_kubeconfig

NODE = 'node-gas'
CARD = {
    'card0': ('0000:18:00.0', '/dev/dri/card0', '/dev/dri/renderD128'),
    'card1': ('0000:28:00.0', '/dev/dri/card1', '/dev/dri/renderD129'),
}


def gas_pod(sim, name, ts, cards, tiles, node=NODE, phase='Pending', i915=1):
    ann = {'gas-ts': ts, 'gas-container-cards': cards}
    if tiles:
        ann['gas-container-tiles'] = tiles
    sim.add_pod('default', name, node_name=node, phase=phase, annotations=ann,
                containers=[{'name': 'main', 'limits': {RES_I915: str(i915), 'gpu.intel.com/millicores': '100'}}])


def expect_refused(dm, ids, words):
    try:
        dm.cl.allocate(ids)
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, '%r: %s %r' % (ids, e.code(), e.details()))
        for w in words:
            check(w in e.details(), '%r: %r lacks %r' % (ids, e.details(), w))
        return
    raise AssertionError('Allocate of %r was not refused' % ids)


def admit(dm, name, cards, mask):
    ids, answer = dm.admit(name, 1)
    check(sorted(intel_devmgr.gpu_of(i) for i in ids) == sorted(CARD[c][0] for c in cards),
          '%s: allocated %r, GAS chose %r' % (name, ids, cards))
    want = sorted((n, n, 'rw') for c in cards for n in CARD[c][1:])
    got = sorted((d['container_path'], d['host_path'], d['permissions']) for d in answer['devices'])
    check(got == want, '%s: devices %r, expected %r' % (name, got, want))
    check(answer.get('envs', {}).get('ZE_AFFINITY_MASK') == mask, '%s: envs %r' % (name, answer.get('envs')))


def run(node):
    dm = intel_devmgr.DeviceManager(node)
    expect_refused(dm, [dm.free[0]], ['kgpu-clusterd'])

    pki = make_pki(os.path.join(node.tmp, 'pki'))
    sim = ApiServerSim(pki, bookmark_interval=1.0)
    sim.start()
    try:
        sim.add_node(NODE)
        gas_pod(sim, 'a', '1700000000000000001', 'card1', 'card1:gt0+gt1')
        gas_pod(sim, 'b', '1700000000000000002', 'card0', 'card0:gt1')
        gas_pod(sim, 'done', '1700000000000000000', 'card0', '', phase='Running')
        gas_pod(sim, 'elsewhere', '1700000000000000000', 'card0', '', node='node-other')
        sim.add_pod('default', 'plain', node_name=NODE,
                    containers=[{'name': 'main', 'limits': {RES_I915: '1'}}])
        os.makedirs(os.path.join(node.tmp, 'kube'), mode=0o700)
        user = pki['users']['kgpu-cluster']
        kc = write_kubeconfig(os.path.join(node.tmp, 'kube', 'kubeconfig'), sim.url, ca=pki['ca'],
                              client_cert=user['cert'], client_key=user['key'])
        node.cluster_readable(os.path.join(node.tmp, 'kube'))
        node.start_clusterd(env={'KUBECONFIG': kc, 'NODE_NAME': NODE})
        node.wait_cluster(lambda p: p['PodsSynced'] and p['GasPods'] == 2, 20, 'two GAS pods')
        time.sleep(0.5)     # the defer before SetGasPods
        admit(dm, 'a', ['card1'], '0.0,0.1')
        admit(dm, 'b', ['card0'], '0.1')

        # Later, while running: a third pod, on card1 alone.
        gas_pod(sim, 'c', '1700000000000000003', 'card1', 'card1:gt1')
        node.wait_cluster(lambda p: p['GasPods'] == 3, 20, 'three GAS pods')
        deadline = time.monotonic() + 10
        while True:
            try:
                admit(dm, 'c', ['card1'], '0.1')
                break
            except (AssertionError, grpc.RpcError):
                # SetGasPods trails the property by the defer: no preference until then.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        check(not node.cluster_properties()['BrokerError'], 'BrokerError %r' % node.cluster_properties())
    finally:
        sim.stop()


def main():
    if not harness.is_root():
        print('SKIP %s: needs root (kgpu-clusterd drops to kgpu-cluster)' % os.path.basename(__file__))
        raise SystemExit(77)
    harness.ensure_users()      # before the bus reads the policy naming kgpu-cluster
    tmp = os.environ.get('TMPDIR', '/tmp')
    layout = intel_devmgr.layout_subset('eight-gpus', [g for g, _, _ in CARD.values()], os.path.join(
        tmp, 'kgpu-cluster-gas-%d.umockdev' % os.getpid()))
    try:
        harness.run_test(run, need_root=True, layout=layout, resources=[RES_I915],
                         extra_env={'KGPU_RECONCILE_INTERVAL_SEC': '1'},
                         config_extra='intel:\n  sharedDevNum: 2\n  resourceManager: true\n')
    finally:
        os.unlink(layout)


if __name__ == '__main__':
    main()
