#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# in_container_cluster.py — the install test's kgpu-clusterd section, run by
# in-container.py inside the booted container (its helpers passed in as `t`).
#
# Contract: check_no_credentials(t) right after `systemctl start kgpu.target`: with no
# cluster.kubeconfig (and no in-cluster files) kgpu-clusterd.service was started by the
# target and stopped by itself, cleanly (inactive, result success, no restart), saying
# why in its journal. check_cluster(t): the API server simulator (payload
# apiserver_sim.py, python3-h2, its PKI made with openssl) serves HTTPS on 127.0.0.1
# with this node's Node object; the operator's steps of docs/CLUSTER.md are done as
# written: the CA, client certificate and key under /etc/kgpu/cluster (root:kgpu-cluster
# 0640), /etc/kgpu/kubeconfig naming them, cluster.kubeconfig and cluster.nodeName in
# kgpu.yaml, `systemctl set-property kgpu-clusterd.service IPAddressAllow=` for the
# server's address (the unit's properties show it beside IPAddressDeny), `systemctl
# start kgpu-clusterd.service`. Checked: the unit is active, its
# process runs as kgpu-cluster with no capabilities, owns io.kgpu.Cluster1, the
# simulator saw its requests as user kgpu-cluster (the client certificate's CN: the
# simulator knows no other way to name it) over TLS, a watch of this node opened, and a
# node label set in the simulator reaches the broker (Broker1.NodeConfigRequested). The
# simulator is stopped and clusterd stopped again at the end.

import json
import os
import pwd
import shutil
import subprocess
import sys

CLUSTER_UNIT = 'kgpu-clusterd.service'
NODE = 'pkgtest-node'
LABEL = 'nvidia.com/device-plugin.config'
SIM_DIR = '/run/kgpu-apisim'
CLUSTER_ETC = '/etc/kgpu/cluster'
KUBECONFIG = '/etc/kgpu/kubeconfig'


def check_no_credentials(t):
    # The target pulled it in; it found no credentials and exited 0 after READY=1.
    t.wait(lambda: t.unit_prop(CLUSTER_UNIT, 'ActiveState') in ('inactive', 'failed'), 10, 'clusterd stopped')
    state = (t.unit_prop(CLUSTER_UNIT, 'ActiveState'), t.unit_prop(CLUSTER_UNIT, 'Result'),
             t.unit_prop(CLUSTER_UNIT, 'NRestarts'))
    log = t.sh('journalctl', '--no-pager', '-o', 'cat', '-u', CLUSTER_UNIT, check_rc=False).stdout
    t.check(state == ('inactive', 'success', '0'),
            '%s without credentials: stopped by itself, cleanly, not restarted (%s)' % (CLUSTER_UNIT, '/'.join(state)),
            log[-800:])
    t.check('kubeconfig' in log.lower() or 'credential' in log.lower(),
            '%s says why it stopped' % CLUSTER_UNIT, log[-800:])


def check_cluster(t):
    sys.path.insert(0, t.PAYLOAD)
    import apiserver_sim as sim_mod
    with open('/etc/kgpu/kgpu.yaml') as f:
        config = f.read()
    os.makedirs(SIM_DIR, exist_ok=True)
    state = os.path.join(SIM_DIR, 'state.json')
    with open(state, 'w') as f:
        json.dump({'nodes': [{'name': NODE, 'labels': {}}]}, f)
    control = os.path.join(SIM_DIR, 'control.sock')
    sim = subprocess.Popen(['python3', os.path.join(t.PAYLOAD, 'apiserver_sim.py'), '--port', '0',
                            '--pki', os.path.join(SIM_DIR, 'pki'), '--state', state, '--control', control,
                            '--host', '127.0.0.1'],
                           stdout=subprocess.PIPE, stderr=open(os.path.join(SIM_DIR, 'sim.log'), 'w'), text=True)
    try:
        line = sim.stdout.readline().strip()
        if not t.check(line.startswith('READY '), 'the API server simulator runs in the container (%s)' % line,
                       open(os.path.join(SIM_DIR, 'sim.log')).read()[-800:]):
            return
        port = int(line.split()[1])
        client = sim_mod.SimClient(control)
        _configure(t, sim_mod, port)
        # docs/CLUSTER.md's command for the API server's address (loopback here, which the
        # unit allows anyway: this checks the command and where it leaves the setting).
        p = t.sh('systemctl', 'set-property', CLUSTER_UNIT, 'IPAddressAllow=127.0.0.1', check_rc=False)
        allow = t.unit_prop(CLUSTER_UNIT, 'IPAddressAllow')
        t.check(p.returncode == 0 and '127.0.0.1' in allow and t.unit_prop(CLUSTER_UNIT, 'IPAddressDeny') != '',
                'systemctl set-property %s IPAddressAllow= adds to the allow-list (%s), the deny-all stays'
                % (CLUSTER_UNIT, allow), p.stderr)
        reachable = _firewall_control(t, port)
        p = t.sh('systemctl', 'start', CLUSTER_UNIT, check_rc=False, timeout=60)
        up = t.wait(lambda: t.unit_prop(CLUSTER_UNIT, 'ActiveState') == 'active', 15, 'clusterd active')
        log = lambda: t.sh('journalctl', '--no-pager', '-o', 'cat', '-u', CLUSTER_UNIT, check_rc=False).stdout[-1500:]
        if not t.check(p.returncode == 0 and up, 'systemctl start %s with a kubeconfig' % CLUSTER_UNIT,
                       p.stderr + log()):
            return
        pid = t.unit_prop(CLUSTER_UNIT, 'MainPID')
        st = t.proc_status(pid)
        t.check(int(st['Uid'].split()[0]) == pwd.getpwnam('kgpu-cluster').pw_uid, '%s runs as kgpu-cluster' % CLUSTER_UNIT,
                'Uid: %s' % st['Uid'])
        t.check(int(st['CapEff'], 16) == 0 and int(st['CapPrm'], 16) == 0 and int(st['CapBnd'], 16) == 0,
                '%s holds no capabilities' % CLUSTER_UNIT, 'CapEff %s CapBnd %s' % (st['CapEff'], st['CapBnd']))
        p = t.sh('busctl', 'status', 'io.kgpu.Cluster1', check_rc=False)
        t.check(p.returncode == 0, 'kgpu-clusterd owns io.kgpu.Cluster1', p.stderr)
        if not reachable:
            return
        watching = t.wait(lambda: any(w.get('resource') == 'nodes' for w in client.watches()), 20, 'node watch')
        reqs = client.requests()
        users = {r.get('user') for r in reqs}
        t.check(watching and users == {'kgpu-cluster'},
                'kgpu-clusterd watches its node over TLS as kgpu-cluster (client certificate)',
                'users %r, requests %r; %s' % (users, reqs[-5:], log()))
        client.set_node_label(NODE, LABEL, 'pkgtest-config')
        got = t.wait(lambda: _broker_prop('NodeConfigRequested') == 'pkgtest-config', 20, 'label at the broker')
        t.check(got, 'the node label set in the API server reaches the broker (Broker1.NodeConfigRequested)',
                '%r; %s' % (_broker_prop('NodeConfigRequested'), log()))
    finally:
        t.sh('systemctl', 'stop', CLUSTER_UNIT, check_rc=False, timeout=60)
        with open('/etc/kgpu/kgpu.yaml', 'w') as f:
            f.write(config)
        sim.terminate()
        try:
            sim.wait(10)
        except subprocess.TimeoutExpired:
            sim.kill()
            sim.wait()


def _connects(port, *props):
    """Whether a transient service with these properties, as kgpu-cluster, connects to the
    simulator's port on 127.0.0.1."""
    argv = ['systemd-run', '--quiet', '--wait', '--pipe', '--collect', '-p', 'User=kgpu-cluster']
    for prop in props:
        argv += ['-p', prop]
    argv += ['python3', '-c', 'import socket; socket.create_connection(("127.0.0.1", %d), 5).close()' % port]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    lines = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()]
    return p.returncode == 0, (lines[-1] if lines else 'exit status %d' % p.returncode)


def _firewall_control(t, port):
    """Whether this container lets a service reach the simulator over loopback at all.
    The unit's IP allow-list is enforced by the service manager's cgroup/BPF firewall, and
    some nestings of container managers (a booted nspawn container inside another
    container) cut a service off from a listener of the test on 127.0.0.1 even with no IP
    setting at all. Returns False there, after saying so: the network half of the cluster
    checks is then skipped with that reason (integ-cluster-e2e and integ-cluster-broker
    check the same path against the same simulator outside a container)."""
    plain, why_plain = _connects(port)
    if not plain:
        t.log('SKIP: a plain transient service (User=kgpu-cluster, no IP setting) cannot '
              'reach the simulator on 127.0.0.1:%d in this container (%s): an environment '
              'limit, not kgpu\'s; the TLS watch and the label reaching the broker are not '
              'checked here' % (port, why_plain))
        return False
    fenced, why_fenced = _connects(port, 'IPAddressDeny=any', 'IPAddressAllow=localhost')
    if fenced:
        t.check(True, 'a service with IPAddressDeny=any and IPAddressAllow=localhost reaches loopback here')
        return True
    t.log('NOTE: this container\'s service manager drops loopback for a service with '
          'IPAddressDeny=any IPAddressAllow=localhost (%s); %s runs with IPAddressDeny= lifted '
          'for the rest of these checks' % (why_fenced, CLUSTER_UNIT))
    t.sh('systemctl', 'set-property', '--runtime', CLUSTER_UNIT, 'IPAddressDeny=', check_rc=False)
    return True


def _broker_prop(name):
    p = subprocess.run(['busctl', 'get-property', '--json=short', 'io.kgpu.Broker1', '/io/kgpu/Broker1',
                        'io.kgpu.Broker1', name], capture_output=True, text=True, timeout=10)
    return json.loads(p.stdout)['data'] if p.returncode == 0 else None


def _configure(t, sim_mod, port):
    """docs/CLUSTER.md's steps: credentials readable by kgpu-cluster only, a kubeconfig
    naming them, the two keys in kgpu.yaml."""
    pki = sim_mod.make_pki(os.path.join(SIM_DIR, 'pki'))
    os.makedirs(CLUSTER_ETC, exist_ok=True)
    os.chmod(CLUSTER_ETC, 0o750)
    gid = pwd.getpwnam('kgpu-cluster').pw_gid
    os.chown(CLUSTER_ETC, 0, gid)
    user = pki['users']['kgpu-cluster']
    for src, dst in ((pki['ca'], 'ca.crt'), (user['cert'], 'client.crt'), (user['key'], 'client.key')):
        shutil.copyfile(src, os.path.join(CLUSTER_ETC, dst))
        os.chown(os.path.join(CLUSTER_ETC, dst), 0, gid)
        os.chmod(os.path.join(CLUSTER_ETC, dst), 0o640)
    sim_mod.write_kubeconfig(KUBECONFIG, 'https://127.0.0.1:%d' % port, ca=os.path.join(CLUSTER_ETC, 'ca.crt'),
                             client_cert=os.path.join(CLUSTER_ETC, 'client.crt'),
                             client_key=os.path.join(CLUSTER_ETC, 'client.key'), embed=False)
    os.chown(KUBECONFIG, 0, gid)
    os.chmod(KUBECONFIG, 0o640)
    with open('/etc/kgpu/kgpu.yaml', 'a') as f:
        f.write('\ncluster:\n  kubeconfig: %s\n  nodeName: %s\n' % (KUBECONFIG, NODE))
