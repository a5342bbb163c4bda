#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# cluster_sim.py — shared pieces of the end-to-end cluster tests (test_cluster_*.py): a
# harness node plus the API server simulator (apiserver_sim.py: HTTPS with the test
# PKI, list/watch as kube-apiserver answers) and kgpu-clusterd from the build tree,
# started as the harness starts the other daemons (as root it drops to kgpu-cluster
# itself; its kubeconfig and key are made readable by that user only).
#
# Contract: run_cluster_cases(cases) runs each (title, node kwargs, cluster kwargs, fn)
# on a fresh node: the simulator (with this node's Node object, labels from cluster
# kwargs 'labels'), named NVIDIA configs written into a directory of the node's own
# (cluster kwargs 'configs': {name: YAML text}, 'default': name), kgpu.yaml's cluster.*
# and nvidiaConfigs.* keys, then kgpu-clusterd (harness Node.start_clusterd); fn(ctx)
# gets a ClusterCtx (node, sim, clusterd Daemon, helpers). Every process is stopped by
# pid; clusterd must exit 0 on SIGTERM like the others. Exits the process 0 (all passed), 1 (one failed, logs
# dumped) or 77 (skipped: clusterd or the simulator's python3-h2 missing).

import atexit
import os
import pwd
import shutil
import subprocess
import sys
import time
import traceback

import harness
from harness import check

CLUSTER_USER = harness.CLUSTER_USER
NODE_NAME = 'kgpu-node-1'
LABEL = 'nvidia.com/device-plugin.config'


class ClusterCtx:
    def __init__(self, node, sim, pki, kubeconfig, configs_dir):
        self.node = node
        self.sim = sim
        self.pki = pki
        self.kubeconfig = kubeconfig
        self.configs_dir = configs_dir
        self.clusterd = None

    # --- kgpu-clusterd -------------------------------------------------------------
    def start_clusterd(self, wait_name=True, extra_env=None):
        self.clusterd = self.node.start_clusterd(env=extra_env, wait=wait_name, timeout=15)
        return self.clusterd

    def clusterd_log(self):
        return self.clusterd.log_text() if self.clusterd else ''

    # --- the broker's view ---------------------------------------------------------
    def broker_prop(self, name):
        return self.node.busctl('get-property', harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS,
                                name)['data']

    def node_config(self):
        return {k: self.broker_prop(k) for k in ('NodeConfig', 'NodeConfigRequested', 'NodeConfigError')}

    def wait_node_config(self, pred, timeout=15, what='node config'):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            for n, d in self.node.daemons.items():
                check(d.alive(), '%s exited (rc %s) while waiting for %s' % (
                    n, d.proc.returncode if d.proc else '?', what))
            last = self.node_config()
            if pred(last):
                return last
            time.sleep(0.1)
        raise AssertionError('timed out waiting for %s; broker says %r; clusterd log tail:\n%s' % (
            what, last, self.clusterd_log()[-3000:]))

    def kgpuctl_status(self):
        p = subprocess.run([self.node.bin('tools', 'kgpuctl'), 'status'], capture_output=True, text=True,
                           env=self.node._env({}), timeout=20)
        return p.returncode, p.stdout + p.stderr

    # --- the API server's view -------------------------------------------------------
    def watches(self, resource='nodes'):
        return self.sim.watches(resource)

    def wait_watch(self, resource='nodes', timeout=60):
        check(self.sim.wait_watches(1, resource=resource, timeout=timeout),
              'kgpu-clusterd opened no %s watch within %ss; requests %r; log:\n%s' % (
                  resource, timeout, self.sim.requests()[-10:], self.clusterd_log()[-2000:]))


def write_configs(directory, configs):
    os.makedirs(directory, exist_ok=True)
    os.chmod(directory, 0o755)
    for name, text in configs.items():
        p = os.path.join(directory, name + '.yaml')
        with open(p, 'w') as f:
            f.write(text)
        os.chmod(p, 0o644)


def cluster_yaml(kubeconfig, configs_dir, default=None):
    out = 'cluster:\n  kubeconfig: %s\n  nodeName: %s\n' % (kubeconfig, NODE_NAME)
    out += 'nvidiaConfigs:\n  directory: %s\n' % configs_dir
    if default:
        out += '  default: %s\n' % default
    return out


def _import_sim():
    try:
        import apiserver_sim  # noqa: F401
    except ImportError as e:
        raise harness.Skip('the API server simulator cannot be imported (%s)' % e)
    return apiserver_sim


def run_cluster_cases(cases):
    name = os.path.basename(sys.argv[0])
    harness.exit_on_sigterm()
    skipped = 0
    for title, node_kwargs, cl_kwargs, fn in cases:
        node = sim = ctx = None
        work = None
        try:
            sim_mod = _import_sim()
            import tempfile
            work = tempfile.mkdtemp(prefix='kgpu-cl-')
            atexit.register(shutil.rmtree, work, True)
            os.chmod(work, 0o755)
            pki = sim_mod.make_pki(os.path.join(work, 'pki'))
            sim = sim_mod.ApiServerSim(pki, **cl_kwargs.get('sim', {}))
            sim.start()
            sim.add_node(NODE_NAME, labels=dict(cl_kwargs.get('labels', {})))
            # Another node whose label must never matter.
            sim.add_node('other-node', labels={LABEL: 'other'})
            kubeconfig = os.path.join(work, 'kubeconfig')
            user = pki['users'][CLUSTER_USER]
            sim_mod.write_kubeconfig(kubeconfig, sim.url, ca=pki['ca'], client_cert=user['cert'],
                                     client_key=user['key'], embed=True)
            configs_dir = os.path.join(work, 'nvidia-configs.d')
            write_configs(configs_dir, cl_kwargs.get('configs', {}))
            if harness.is_root():
                harness.ensure_users()
                cu = pwd.getpwnam(CLUSTER_USER)
                os.chown(kubeconfig, cu.pw_uid, cu.pw_gid)
            kw = dict(node_kwargs)
            kw['config_extra'] = kw.get('config_extra', '') + cluster_yaml(kubeconfig, configs_dir,
                                                                          cl_kwargs.get('default'))
            node = harness.Node(**kw)
            node.start()
            ctx = ClusterCtx(node, sim, pki, kubeconfig, configs_dir)
            if cl_kwargs.get('start', True):
                ctx.start_clusterd()
            fn(ctx)
        except harness.Skip as e:
            print('SKIP %s [%s]: %s' % (name, title, e))
            skipped += 1
            if node:
                node.stop()
            if sim:
                sim.stop()
            continue
        except BaseException:
            traceback.print_exc()
            if node:
                node.dump_logs()
                node.stop()
            if sim:
                try:
                    print('--- API server simulator requests (last 30):')
                    for r in sim.requests()[-30:]:
                        print(r)
                except Exception:
                    pass
                sim.stop()
            print('FAIL %s [%s]' % (name, title))
            sys.exit(1)
        rcs = node.stop(dump_on_unclean=True)
        sim.stop()
        shutil.rmtree(work, ignore_errors=True)
        bad = {k: v for k, v in rcs.items() if v not in (0, None)}
        if bad:
            print('FAIL %s [%s]: daemons did not exit cleanly on SIGTERM: %r' % (name, title, bad))
            sys.exit(1)
        print('ok %s [%s]' % (name, title))
    if skipped == len(cases):
        sys.exit(77)
    print('PASS %s' % name)
    sys.exit(0)
