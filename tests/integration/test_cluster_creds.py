#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_cluster_creds.py — where kgpu-clusterd gets its credentials from, and what it
# does without usable ones.
#
# Asserts:
#  - no kubeconfig and not in a pod: one clear line, READY=1 with a STATUS saying so, exit
#    status 0 (the unit's Restart=on-failure leaves it stopped), no bus name taken;
#  - a kubeconfig whose user runs an exec plugin, and one with
#    insecure-skip-tls-verify: exit status 1 with the file and key named;
#  - the in-cluster service account files (KUBERNETES_SERVICE_HOST/_PORT, the token and
#    ca.crt in KGPU_SERVICEACCOUNT_DIR): it lists and watches as the token's user;
#  - a kubeconfig rewritten while it runs is loaded again before the next request: a
#    client certificate of a user RBAC does not allow gives 403 in LastError, the right
#    one back recovers, without a restart;
#  - SIGHUP reads kgpu.yaml again: another cluster.nodeName is followed without a
#    restart; an invalid one is refused and the node watched stays;
#  - an API server certificate from another CA is refused (LastError names the TLS
#    failure), never talked to.

import os
import shutil
import signal
import time

import harness
from harness import check
from apiserver_sim import ApiServerSim, make_pki, write_kubeconfig

NODE = 'node-c'
LABEL = 'nvidia.com/device-plugin.config'


def exits(node, env, rc, words):
    d = node.start_clusterd(env=env, wait=False)
    try:
        d.proc.wait(15)
    except Exception:
        raise AssertionError('kgpu-clusterd did not exit: %s' % d.log_text())
    deadline = time.monotonic() + 3     # the log pipe may lag the exit a little
    while not all(w in d.log_text() for w in words) and time.monotonic() < deadline:
        time.sleep(0.05)
    log = d.log_text()
    check(d.proc.returncode == rc, 'exit status %r, expected %d: %s' % (d.proc.returncode, rc, log))
    for w in words:
        check(w in log, '%r not in the log: %s' % (w, log))
    check(not node.name_has_owner(harness.CLUSTER_BUS), 'io.kgpu.Cluster1 taken')
    return d


def run(node):
    tmp = node.tmp
    kube = os.path.join(tmp, 'kube')
    os.makedirs(kube, mode=0o700)
    pki = make_pki(os.path.join(tmp, 'pki'))

    # Nothing configured: exit 0, said once.
    d = exits(node, {}, 0, ['No cluster.kubeconfig configured and not running in a pod'])
    check(any('Not configured' in s for s in d.notified('STATUS')), 'STATUS: %r' % d.notify)
    check(d.notified('READY') == ['1'], 'READY: %r' % d.notify)

    # Refused kubeconfigs: exit 1, file and key named.
    kc = os.path.join(kube, 'exec.kubeconfig')
    with open(kc, 'w') as f:
        f.write('apiVersion: v1\nkind: Config\ncurrent-context: c\n'
                'contexts:\n- name: c\n  context: {cluster: k, user: u}\n'
                'clusters:\n- name: k\n  cluster: {server: "https://127.0.0.1:1"}\n'
                'users:\n- name: u\n  user:\n    exec:\n      command: /bin/true\n      apiVersion: '
                'client.authentication.k8s.io/v1\n')
    node.cluster_readable(kube)
    exits(node, {'KUBECONFIG': kc}, 1, [kc, 'users[u].exec: not supported'])
    kc = write_kubeconfig(os.path.join(kube, 'insecure.kubeconfig'), 'https://127.0.0.1:1', token='t',
                          insecure=True)
    node.cluster_readable(kube)
    exits(node, {'KUBECONFIG': kc}, 1, ['insecure-skip-tls-verify: refused'])

    sim = ApiServerSim(pki, bookmark_interval=1.0)
    sim.start()
    try:
        sim.add_node(NODE, labels={LABEL: 'in-cluster'})
        # In a pod: the service account files.
        sa = os.path.join(kube, 'serviceaccount')
        os.makedirs(sa)
        shutil.copyfile(pki['ca'], os.path.join(sa, 'ca.crt'))
        shutil.copyfile(pki['token_files']['kgpu-cluster'], os.path.join(sa, 'token'))
        node.cluster_readable(kube)
        node.start_clusterd(env={'KUBERNETES_SERVICE_HOST': '127.0.0.1', 'KUBERNETES_SERVICE_PORT': str(sim.port),
                                 'KGPU_SERVICEACCOUNT_DIR': sa, 'NODE_NAME': NODE})
        p = node.wait_cluster(lambda p: p['Connected'] and p['ConfigLabelValue'] == 'in-cluster', 20, 'in-cluster')
        check(p['Server'] == 'https://127.0.0.1:%d' % sim.port, 'server %r' % p['Server'])
        check({r['user'] for r in sim.requests()} == {'kgpu-cluster'}, 'users %r' % sim.requests())
        node.daemons['cluster'].stop()

        # A kubeconfig that changes under it.
        good, bad = pki['users']['kgpu-cluster'], pki['users']['intruder']
        kc = os.path.join(kube, 'live.kubeconfig')
        write_kubeconfig(kc, sim.url, ca=pki['ca'], client_cert=good['cert'], client_key=good['key'])
        node.cluster_readable(kube)
        node.start_clusterd(env={'KUBECONFIG': kc, 'NODE_NAME': NODE})
        node.wait_cluster(lambda p: p['Connected'] and p['ConfigLabelValue'] == 'in-cluster', 20, 'kubeconfig')
        before = node.cluster_properties()
        write_kubeconfig(kc, sim.url, ca=pki['ca'], client_cert=bad['cert'], client_key=bad['key'])
        node.cluster_readable(kube)
        sim.cut_watches('end')
        node.wait_cluster(lambda p: p['LastErrorTime'] > before['LastErrorTime'] and '403' in p['LastError'],
                          20, 'the rewritten kubeconfig used (403 for intruder)')
        check(any(r['user'] == 'intruder' for r in sim.requests()), 'intruder never seen')
        write_kubeconfig(kc, sim.url, ca=pki['ca'], client_cert=good['cert'], client_key=good['key'])
        node.cluster_readable(kube)
        node.wait_cluster(lambda p: p['Connected'], 60, 'the good kubeconfig back')
        sim.set_node_label(NODE, LABEL, 'again')
        node.wait_cluster(lambda p: p['ConfigLabelValue'] == 'again', 20, 'a change after the kubeconfig came back')
        check('kubeconfig %s changed' % kc in node.daemons['cluster'].log_text(), 'reload not logged')

        # SIGHUP with another cluster.nodeName in kgpu.yaml (the environment names none):
        # that node's label, no restart.
        node.daemons['cluster'].stop()
        sim.add_node('node-d', labels={LABEL: 'other-node'})
        node.write_config_extra('cluster:\n  kubeconfig: %s\n  nodeName: %s\n' % (kc, NODE))
        d = node.start_clusterd(env={})
        node.wait_cluster(lambda p: p['ConfigLabelValue'] == 'again', 20, 'node-c from kgpu.yaml')
        node.write_config_extra('cluster:\n  kubeconfig: %s\n  nodeName: node-d\n' % kc)
        pid = d.pid
        d.send_signal(signal.SIGHUP)
        p = node.wait_cluster(lambda p: p['NodeName'] == 'node-d' and p['ConfigLabelValue'] == 'other-node', 20,
                              'node-d after SIGHUP')
        check(d.pid == pid and d.alive(), 'restarted instead of reloaded')
        node.write_config_extra('cluster:\n  nodeName: Not_A_Node\n')
        d.send_signal(signal.SIGHUP)
        node.wait_for(lambda: check('invalid node' in d.log_text(), 'refusal not logged'), 10)
        check(node.cluster_properties()['NodeName'] == 'node-d', 'a refused reload changed the node')
        node.write_config_extra('')
        node.daemons['cluster'].stop()

        # A server certificate of another CA: refused.
        kc = write_kubeconfig(os.path.join(kube, 'rogue.kubeconfig'), sim.url, ca=pki['rogue_ca'],
                              client_cert=good['cert'], client_key=good['key'])
        node.cluster_readable(kube)
        sim.clear_requests()
        node.start_clusterd(env={'KUBECONFIG': kc, 'NODE_NAME': NODE})
        p = node.wait_cluster(lambda p: p['LastError'] != '', 20, 'a TLS failure')
        check('certificate' in p['LastError'].lower() or 'ssl' in p['LastError'].lower(), 'LastError %r' % p['LastError'])
        check(not p['NodeSynced'] and not sim.requests(), 'talked to a server it cannot verify: %r' % sim.requests())
    finally:
        sim.stop()


if __name__ == '__main__':
    harness.run_test(run, broker=False, grpcd=False, kubelet=False)
