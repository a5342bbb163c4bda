#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_cluster_watch.py — kgpu-clusterd against the API server simulator over real TLS.
#
# Asserts, with a client certificate (kubeconfig with embedded data) over HTTP/2 and
# then with a bearer token file over HTTP/1.1 only:
#  - it lists and watches this node's Node (fieldSelector metadata.name) and its pods
#    (spec.nodeName), with allowWatchBookmarks and timeoutSeconds, and io.kgpu.Cluster1
#    shows the label value and the count of Pending pods carrying gas-ts (a running
#    pod, a pod without gas-ts and another node's pod are not counted);
#  - everyone may read io.kgpu.Cluster1, nobody else may own it;
#  - over HTTP/2 both watches share one connection;
#  - label set, changed, removed, and pod added, turned Running, deleted reach the
#    properties live, with the watch's resourceVersion moving on;
#  - each fault sets LastError (and its time) and the link recovers (Connected again,
#    and a change made afterwards arrives): HTTP 401 and 403 on a watch, HTTP 410 on a
#    watch (a new List follows), an ERROR event with a 410 Status after compaction (a new
#    List follows), a stream cut in the middle of an event, a garbage event line (a new
#    List follows), an event over the size bound (a new List follows), a list that hangs
#    (cluster.requestTimeoutSec), the server down and up again, an ERROR event 500, a
#    server that accepts TCP and never answers TLS;
#  - a server answering every watch with 410 gets backed-off lists, not a loop;
#  - a 429 with Retry-After: the next watch comes no sooner than it says;
#  - a rotated token file is read again: a wrong token gives 401, the right one back
#    recovers without a restart;
#  - kgpu-clusterd runs as kgpu-cluster (root only) and exits 0 on SIGTERM.

import os
import shutil
import time

import harness
from harness import check
from apiserver_sim import ApiServerSim, make_pki, write_kubeconfig

NODE = 'node-a'
LABEL = 'nvidia.com/device-plugin.config'
GPU = 'gpu.intel.com/i915'


def gas_pod(sim, name, node=NODE, phase='Pending', ts='1700000000'):
    return sim.add_pod('default', name, node_name=node, phase=phase,
                       annotations={'gas-ts': ts, 'gas-container-cards': 'card0'},
                       containers=[{'name': 'main', 'limits': {GPU: '1', 'gpu.intel.com/millicores': '500'}}])


def fault_recovers(node, sim, what, want, trigger, relist=False, timeout=30):
    """Runs trigger(); waits until LastError is newer and contains `want`, then until the
    link is back (Connected) and a label change made afterwards arrives. relist: a new
    List request must have been made after the trigger."""
    before = node.cluster_properties()
    t0 = time.time()
    sim.clear_requests()
    trigger()
    p = node.wait_cluster(lambda p: p['LastErrorTime'] > before['LastErrorTime'] and want in p['LastError'],
                          timeout, '%s: LastError with %r' % (what, want))
    node.log('%s: LastError %r' % (what, p['LastError']))
    node.wait_cluster(lambda p: p['Connected'], timeout, '%s: connected again' % what)
    value = 'after-%d' % int(t0 * 1000 % 100000)
    sim.set_node_label(NODE, LABEL, value)
    node.wait_cluster(lambda p: p['ConfigLabelValue'] == value, timeout, '%s: a change after recovery' % what)
    if relist:
        lists = [r for r in sim.requests() if r['verb'] == 'list']
        check(lists, '%s: no new List after the fault' % what)


def tcp_connections(pid, port):
    """Established TCP connections of process pid to the given remote port."""
    inodes = set()
    for fd in os.listdir('/proc/%d/fd' % pid):
        try:
            link = os.readlink('/proc/%d/fd/%s' % (pid, fd))
        except OSError:
            continue
        if link.startswith('socket:['):
            inodes.add(link[8:-1])
    n = 0
    for table in ('/proc/%d/net/tcp' % pid, '/proc/%d/net/tcp6' % pid):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == '01' and int(cols[2].split(':')[1], 16) == port and cols[9] in inodes:
                    n += 1
    return n


def expired_watch(sim):
    """Changes something the watches do not see, compacts, cuts the watches: the
    re-watch from our resourceVersion is answered with an ERROR event 410."""
    sim.add_node('node-other')
    sim.add_pod('default', 'elsewhere-%d' % time.monotonic_ns(), node_name='node-other')
    sim.compact()
    sim.cut_watches('end')


def run(node):
    tmp = node.tmp
    pki = make_pki(os.path.join(tmp, 'pki'))
    sim = ApiServerSim(pki, bookmark_interval=1.0)
    sim.start()
    try:
        run_with(node, sim, pki)
    finally:
        sim.stop()


def run_with(node, sim, pki):
    tmp = node.tmp
    sim.add_node(NODE, labels={LABEL: 'ts4', 'other': 'x'})
    gas_pod(sim, 'gas-1')
    gas_pod(sim, 'gas-running', phase='Running')
    sim.add_pod('default', 'plain', node_name=NODE)
    gas_pod(sim, 'gas-elsewhere', node='node-b')

    user = pki['users']['kgpu-cluster']
    os.makedirs(os.path.join(tmp, 'kube'), mode=0o700)
    kc = write_kubeconfig(os.path.join(tmp, 'kube', 'cert.kubeconfig'), sim.url, ca=pki['ca'],
                          client_cert=user['cert'], client_key=user['key'], embed=True)
    node.cluster_readable(os.path.join(tmp, 'kube'))
    node.write_config_extra('cluster:\n  requestTimeoutSec: 3\n  minWatchTimeoutSec: 4\n')
    node.start_clusterd(env={'KUBECONFIG': kc, 'NODE_NAME': NODE})
    if node.root:
        node.check_dropped('cluster', harness.CLUSTER_USER)

    p = node.wait_cluster(lambda p: p['Connected'] and p['ConfigLabelValue'] == 'ts4' and p['GasPods'] == 1,
                          20, 'the first list and watch')
    check(p['NodeName'] == NODE and p['Server'] == sim.url, 'node/server: %r' % p)
    check(p['NodeSynced'] and p['PodsSynced'] and p['NodeFound'], 'synced: %r' % p)
    reqs = sim.requests()
    watches = [r for r in reqs if r['verb'] == 'watch']
    check(any(r['resource'] == 'nodes' and 'metadata.name=' + NODE in r['query'].get('fieldSelector', '')
              for r in watches), 'no Node watch by name: %r' % watches)
    check(any(r['resource'] == 'pods' and 'spec.nodeName=' + NODE in r['query'].get('fieldSelector', '')
              for r in watches), 'no Pod watch by spec.nodeName: %r' % watches)
    for r in watches:
        q = r['query']
        check(q.get('allowWatchBookmarks') == 'true' and q.get('resourceVersion', '') != '' and
              4 <= int(q['timeoutSeconds']) < 8, 'watch query %r' % q)
    check(all(r['user'] == 'kgpu-cluster' for r in reqs), 'users %r' % {r['user'] for r in reqs})
    check(any(r['proto'] == 'h2' for r in reqs), 'no HTTP/2: %r' % {r['proto'] for r in reqs})

    # The bus policy (dbus/io.kgpu.Cluster1.conf): everyone reads; only kgpu-cluster and
    # root may own the name.
    if node.root:
        r = node.busctl('get-property', harness.CLUSTER_BUS, harness.CLUSTER_PATH, harness.CLUSTER_BUS,
                        'ConfigLabelValue', user='nobody')
        check(r['data'] == 'ts4', 'nobody reads %r' % r)
        r = node.busctl('call', 'org.freedesktop.DBus', '/org/freedesktop/DBus', 'org.freedesktop.DBus',
                        'RequestName', 'su', harness.CLUSTER_BUS, '0', user='nobody', check=False, json_out=False)
        out = r.stdout + r.stderr
        check(r.returncode != 0 and b'denied' in out.lower(), 'nobody may own io.kgpu.Cluster1: %r' % out)

    # HTTP/2 multiplexing: both watches on one TCP connection to the server.
    conns = tcp_connections(node.daemons['cluster'].pid, sim.port)
    check(conns == 1, 'kgpu-clusterd holds %d connections to the API server, expected 1 (h2)' % conns)

    # Live changes.
    rv0 = p['NodeResourceVersion']
    sim.set_node_label(NODE, LABEL, 'mps')
    p = node.wait_cluster(lambda p: p['ConfigLabelValue'] == 'mps', 10, 'label change')
    check(int(p['NodeResourceVersion']) > int(rv0), 'resourceVersion did not move: %r' % p)
    sim.remove_node_label(NODE, LABEL)
    node.wait_cluster(lambda p: p['ConfigLabelValue'] == '' and p['NodeFound'], 10, 'label removed')
    gas_pod(sim, 'gas-2')
    node.wait_cluster(lambda p: p['GasPods'] == 2, 10, 'pod added')
    sim.update_pod('default', 'gas-1', phase='Running')
    node.wait_cluster(lambda p: p['GasPods'] == 1, 10, 'pod running')
    sim.delete_pod('default', 'gas-2')
    node.wait_cluster(lambda p: p['GasPods'] == 0, 10, 'pod deleted')
    gas_pod(sim, 'gas-3')
    node.wait_cluster(lambda p: p['GasPods'] == 1, 10, 'pod added again')

    # Bookmarks move the resourceVersion on (the simulator sends one a second).
    before = node.cluster_properties()['NodeResourceVersion']
    sim.add_pod('default', 'unrelated', node_name='node-b')
    node.wait_cluster(lambda p: int(p['NodeResourceVersion']) > int(before), 10, 'a bookmark')

    # Faults.
    fault_recovers(node, sim, '401', '401',
                   lambda: (sim.add_fault('status', resource='nodes', verb='watch', code=401, count=2),
                            sim.cut_watches('close', 'nodes')))
    fault_recovers(node, sim, '403', '403',
                   lambda: (sim.add_fault('status', resource='pods', verb='watch', code=403, count=1),
                            sim.cut_watches('close', 'pods')))
    # HTTP 410 is no failure (logged): the List after it fails once with a 500.
    fault_recovers(node, sim, 'HTTP 410', 'list failed: HTTP 500',
                   lambda: (sim.add_fault('status', resource='nodes', verb='watch', code=410, count=1),
                            sim.add_fault('status', resource='nodes', verb='list', code=500, count=1),
                            sim.cut_watches('end', 'nodes')), relist=True)
    # An ERROR event 410 is logged (not an error): look for the List that follows.
    sim.clear_requests()
    expired_watch(sim)
    check(sim.wait_requests(lambda r: r['verb'] == 'list', timeout=15), 'no List after an expired watch')
    node.wait_cluster(lambda p: p['Connected'], 20, 'connected after the expired watch')
    # 429 with Retry-After (the priority-and-fairness filter's plain-text answer): the next
    # watch waits at least that long, whatever the backoff says.
    fault_recovers(node, sim, '429', 'HTTP 429 (Too many requests',
                   lambda: (sim.add_fault('status', resource='pods', verb='watch', code=429, retry_after=3, count=1),
                            sim.cut_watches('end', 'pods')))
    pw = [r for r in sim.requests() if r['verb'] == 'watch' and r['resource'] == 'pods']
    refused = [r for r in pw if r['status'] == 429]
    check(refused, 'no 429 seen: %r' % pw)
    later = [r for r in pw if r['time'] > refused[0]['time']]
    check(later and later[0]['time'] - refused[0]['time'] >= 2.9,
          'Retry-After 3 not honoured: %r' % [(r['status'], r['time']) for r in pw])
    # A server that expires every watch at once (HTTP 200, ERROR event 410): lists are
    # backed off, not a loop.
    fid = sim.add_fault('error_event', resource='nodes', verb='watch', code=410)
    sim.clear_requests()
    sim.cut_watches('end', 'nodes')
    time.sleep(4)
    n = len([r for r in sim.requests() if r['verb'] == 'list' and r['resource'] == 'nodes'])
    sim.remove_fault(fid)
    check(1 <= n <= 6, '%d Node lists in 4 s against a server always answering 410' % n)
    node.wait_cluster(lambda p: p['Connected'], 60, 'connected after the 410 storm')
    fault_recovers(node, sim, 'cut mid-event', 'watch failed',
                   lambda: sim.cut_watches('mid-event'))
    fault_recovers(node, sim, 'garbage event', 'not JSON',
                   lambda: (sim.add_fault('garbage', resource='nodes', verb='watch', count=1),
                            sim.cut_watches('end', 'nodes'),
                            time.sleep(0.5), sim.set_node_label(NODE, 'poke', 'garbage')), relist=True)
    fault_recovers(node, sim, 'oversized event', 'larger than',
                   lambda: (sim.add_fault('oversized', resource='nodes', verb='watch', count=1,
                                          size=5 * 1024 * 1024),
                            sim.cut_watches('end', 'nodes'),
                            time.sleep(0.5), sim.set_node_label(NODE, 'poke', 'big')), relist=True)
    fault_recovers(node, sim, 'hanging list', 'list failed',
                   lambda: (sim.add_fault('hang', resource='pods', verb='list', count=1),
                            sim.add_fault('status', resource='pods', verb='watch', code=410, count=1),
                            sim.cut_watches('end', 'pods')), relist=True)
    fault_recovers(node, sim, 'server down', 'failed',
                   lambda: (sim.down(), time.sleep(1.5), sim.up()))
    # An ERROR event 500 ends the watch: LastError, then a watch again after a backoff.
    fault_recovers(node, sim, 'ERROR event 500', 'ERROR event: 500',
                   lambda: (sim.add_fault('error_event', resource='pods', verb='watch', code=500, count=1),
                            sim.cut_watches('end', 'pods')))
    # A hung server (TCP accepted, no TLS answer): the connect limit (requestTimeoutSec 3).
    fault_recovers(node, sim, 'blackhole', 'timeout',
                   lambda: (sim.blackhole(), time.sleep(5), sim.up()))
    # What it knew survived every fault.
    p = node.cluster_properties()
    check(p['GasPods'] == 1, 'pods after the faults: %r' % p)

    # A bearer token file over HTTP/1.1, rotated while running.
    d = node.daemons['cluster']
    check(d.stop() == 0, 'kgpu-clusterd did not exit 0 on SIGTERM')
    sim.stop()
    sim2 = ApiServerSim(pki, http1_only=True, bookmark_interval=1.0)
    sim2.start()
    try:
        sim2.add_node(NODE, labels={LABEL: 'tok'})
        token_file = os.path.join(tmp, 'kube', 'token')
        with open(token_file, 'w') as f:
            f.write(pki['token_values']['kgpu-cluster'] + '\n')
        ca = os.path.join(tmp, 'kube', 'ca.crt')
        shutil.copyfile(pki['ca'], ca)
        # Paths, not data: the CA and the token file are read by kgpu-clusterd itself.
        kc2 = write_kubeconfig(os.path.join(tmp, 'kube', 'token.kubeconfig'), sim2.url, ca=ca,
                               token_file=token_file, embed=False)
        node.cluster_readable(os.path.join(tmp, 'kube'))
        node.start_clusterd(env={'KUBECONFIG': kc2, 'NODE_NAME': NODE})
        node.wait_cluster(lambda p: p['Connected'] and p['ConfigLabelValue'] == 'tok', 20, 'token: first list')
        reqs = sim2.requests()
        check(all(r['user'] == 'kgpu-cluster' and r['proto'] == 'http/1.1' for r in reqs),
              'token requests %r' % [(r['user'], r['proto']) for r in reqs])

        def rotate_wrong():
            with open(token_file + '.new', 'w') as f:
                f.write('wrong-token-0000\n')
            node.cluster_readable(token_file + '.new')
            os.replace(token_file + '.new', token_file)
            sim2.cut_watches('close')

        before = node.cluster_properties()
        rotate_wrong()
        node.wait_cluster(lambda p: p['LastErrorTime'] > before['LastErrorTime'] and '401' in p['LastError'],
                          20, 'a rotated wrong token refused')
        with open(token_file + '.new', 'w') as f:
            f.write(pki['token_values']['kgpu-cluster'] + '\n')
        node.cluster_readable(token_file + '.new')
        os.replace(token_file + '.new', token_file)
        node.wait_cluster(lambda p: p['Connected'], 40, 'the right token read again')
        sim2.set_node_label(NODE, LABEL, 'tok2')
        node.wait_cluster(lambda p: p['ConfigLabelValue'] == 'tok2', 10, 'token: change after rotation')
    finally:
        sim2.stop()


if __name__ == '__main__':
    harness.run_test(run, broker=False, grpcd=False, kubelet=False)
