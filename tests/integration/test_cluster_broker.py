#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_cluster_broker.py — the node label reaches the kubelet through kgpu-clusterd and
# the broker: API server simulator → kgpu-clusterd (as kgpu-cluster, client certificate)
# → Broker1.SetNodeConfig → resources re-announced → kubelet simulator.
#
# Asserts (root: kgpu-clusterd drops to kgpu-cluster, the only non-root user the broker
# takes SetNodeConfig from), with named configs ts4 (time-slicing, 4 replicas) and mps
# (2 MPS slices) and nvidiaConfigs.default ts4:
#  - the label mps on the Node: the kubelet sees 2 replicas, without a restart;
#  - the label ts4: 4 replicas; an allocation made before stays recorded;
#  - the label removed: the default (4 replicas), NodeConfigRequested "";
#  - an unknown name: the config in force stays (4 replicas, NodeConfig ts4), the
#    broker's UnknownConfig shows in Cluster1.BrokerError and in kgpu-clusterd's log;
#  - the config file added afterwards is taken at the next retry (30 s), the label
#    unchanged;
#  - the label changed while the broker is stopped: the restarted broker gets it (a new
#    owner of io.kgpu.Broker1 is sent the label again) and the kubelet sees it;
#  - the API server down: the node keeps serving the config in force, and a label change
#    made once it is back arrives.

import os
import shutil
import tempfile
import time

import harness
from harness import check, BROKER_BUS, BROKER_PATH
from nvidia_sim import L40S, RES_GPU, yaml_config, wait_devices, run_cases
from apiserver_sim import ApiServerSim, make_pki, write_kubeconfig

NODE = 'node-gpu'
LABEL = 'nvidia.com/device-plugin.config'
CONFIGS = None

TS4 = yaml_config('none', extra='sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n'
                  '      replicas: 4\n')
MPS = yaml_config('none', extra='sharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n'
                  '      replicas: 2\n')


def replicas(n):
    return ['%s::%d' % (L40S, i) for i in range(n)]


def broker_props(node):
    return {p: node.busctl('get-property', BROKER_BUS, BROKER_PATH, BROKER_BUS, p)['data']
            for p in ('NodeConfig', 'NodeConfigRequested', 'NodeConfigError')}


def wait_broker(node, pred, what, timeout=20):
    node.wait_for(lambda: check(pred(broker_props(node)), '%s: %r' % (what, broker_props(node))),
                  timeout, what=what)


def wait_list(node, want, after, timeout=30):
    cl = node.kubelet.plugin(RES_GPU, timeout)
    pred = (lambda d: sorted(x['id'] for x in d) == sorted(want) and all(x['health'] == 'Healthy' for x in d))
    cl.wait_update(pred, after=after, timeout=timeout)


def run(node):
    pki = make_pki(os.path.join(node.tmp, 'pki'))
    sim = ApiServerSim(pki, bookmark_interval=1.0)
    sim.start()
    try:
        run_with(node, sim, pki)
    finally:
        sim.stop()


def run_with(node, sim, pki):
    # Nothing asked yet: kgpu.yaml's own settings (the whole GPU).
    wait_devices(node, RES_GPU, [L40S], timeout=15)
    sim.add_node(NODE, labels={LABEL: 'mps'})
    os.makedirs(os.path.join(node.tmp, 'kube'), mode=0o700)
    user = pki['users']['kgpu-cluster']
    kc = write_kubeconfig(os.path.join(node.tmp, 'kube', 'kubeconfig'), sim.url, ca=pki['ca'],
                          client_cert=user['cert'], client_key=user['key'], embed=True)
    node.cluster_readable(os.path.join(node.tmp, 'kube'))

    t = time.monotonic()
    node.start_clusterd(env={'KUBECONFIG': kc, 'NODE_NAME': NODE})
    node.check_dropped('cluster', harness.CLUSTER_USER)
    wait_list(node, replicas(2), t)
    wait_broker(node, lambda p: p['NodeConfig'] == 'mps' and p['NodeConfigRequested'] == 'mps', 'mps in force')

    t = time.monotonic()
    sim.set_node_label(NODE, LABEL, 'ts4')
    wait_list(node, replicas(4), t)
    stream = node.kubelet.plugin(RES_GPU)
    stream.allocate([L40S + '::3'])
    before = node.list_allocations()

    t = time.monotonic()
    sim.set_node_label(NODE, LABEL, 'mps')
    wait_list(node, replicas(2), t)
    t = time.monotonic()
    sim.remove_node_label(NODE, LABEL)
    wait_list(node, replicas(4), t)
    wait_broker(node, lambda p: p['NodeConfig'] == 'ts4' and p['NodeConfigRequested'] == '', 'label removed')
    after = node.list_allocations()
    check(any(a[0] == b[0] for a in after for b in before), 'allocation lost across switches: %r' % after)

    # Unknown: refused by the broker, kept in force, shown by clusterd.
    sim.set_node_label(NODE, LABEL, 'nope')
    p = node.wait_cluster(lambda p: 'UnknownConfig' in p['BrokerError'], 20, 'BrokerError UnknownConfig')
    check("nope" in p['BrokerError'], 'BrokerError %r' % p['BrokerError'])
    wait_broker(node, lambda p: p['NodeConfig'] == 'ts4' and p['NodeConfigRequested'] == 'nope', 'nope refused')
    check('refused SetNodeConfig' in node.daemons['cluster'].log_text(), 'refusal not logged')
    # The file added afterwards: taken at the next retry (30 s), the label unchanged.
    with open(os.path.join(CONFIGS, 'nope.yaml'), 'w') as f:
        f.write(TS4.replace('replicas: 4', 'replicas: 3'))
    os.chmod(os.path.join(CONFIGS, 'nope.yaml'), 0o644)
    t = time.monotonic()
    wait_list(node, replicas(3), t, timeout=45)
    wait_broker(node, lambda p: p['NodeConfig'] == 'nope', 'nope.yaml taken on the retry')
    node.wait_cluster(lambda p: p['BrokerError'] == '', 10, 'BrokerError cleared by the retry')
    sim.set_node_label(NODE, LABEL, 'ts4')
    node.wait_cluster(lambda p: p['BrokerError'] == '', 20, 'BrokerError cleared')

    # The broker restarted while the label changed: the new broker gets it.
    node.daemons['broker'].stop()
    sim.set_node_label(NODE, LABEL, 'mps')
    node.wait_cluster(lambda p: p['ConfigLabelValue'] == 'mps', 20, 'label seen with the broker down')
    t = time.monotonic()
    node.restart_broker()
    wait_broker(node, lambda p: p['NodeConfig'] == 'mps', 'the restarted broker told')
    wait_list(node, replicas(2), t)

    # The API server down: the config in force stays; back up, changes arrive.
    sim.down()
    node.wait_cluster(lambda p: not p['Connected'], 20, 'disconnected')
    time.sleep(2)
    check(broker_props(node)['NodeConfig'] == 'mps', 'config changed while the API server was down')
    sim.up()
    node.wait_cluster(lambda p: p['Connected'], 60, 'connected again')
    t = time.monotonic()
    sim.set_node_label(NODE, LABEL, 'ts4')
    wait_list(node, replicas(4), t)


def main():
    global CONFIGS
    if not harness.is_root():
        print('SKIP test_cluster_broker.py: needs root (kgpu-clusterd drops to kgpu-cluster)')
        raise SystemExit(77)
    harness.ensure_users()
    CONFIGS = tempfile.mkdtemp(prefix='kgpu-nvidia-configs.')
    os.chmod(CONFIGS, 0o755)
    try:
        for name, text in (('ts4.yaml', TS4), ('mps.yaml', MPS)):
            with open(os.path.join(CONFIGS, name), 'w') as f:
                f.write(text)
            os.chmod(os.path.join(CONFIGS, name), 0o644)
        extra = (yaml_config('none') + 'nvidiaConfigs:\n  directory: %s\n  default: ts4\n' % CONFIGS +
                 'cluster:\n  requestTimeoutSec: 3\n  minWatchTimeoutSec: 5\n')
        run_cases([('label', dict(nvidia_scenario='l40s', config_extra=extra), run)])
    finally:
        shutil.rmtree(CONFIGS, ignore_errors=True)


if __name__ == '__main__':
    main()
