#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_nvidia_named_config.py — per-node NVIDIA config selection by name, end to end: the
# real broker, probe and grpcd on a private bus, the fake NVIDIA tools (scenario l40s, one
# 46068 MiB GPU) and the python3-grpcio kubelet simulator. The test stands in for
# kgpu-clusterd: it calls Broker1.SetNodeConfig through the bus as the kgpu-cluster user
# (setpriv, dbus_call_as.py), with the value the node label nvidia.com/device-plugin.config
# would have, as the NVIDIA device plugin's config manager reads it.
#
# kgpu.yaml has no sharing and names the directory of named configs and the default
# ("ts4"); the directory holds ts4.yaml (time-slicing, 4 replicas), mps.yaml (MPS, 2
# slices) and bad.yaml (a kgpu key, refused).
#
# Asserts:
# - before any call, NodeConfig/NodeConfigRequested/NodeConfigError are "" and the GPU is
#   one plain nvidia.com/gpu;
# - "ts4": the kubelet sees 4 replicas without any restart (same plugin stream), the
#   probe's labels say time-slicing with 4 replicas; an Allocate of ::3 is recorded;
# - "mps": the kubelet sees the 2 MPS slices, Healthy once the probe runs the control
#   daemon (the probe follows NodeConfig for its MPS policy and accepted SetMps), the
#   labels say mps; the allocation made under ts4 is still listed;
# - "": the default (ts4) again, the control daemon got "quit"; NodeConfig "ts4",
#   NodeConfigRequested "";
# - "nope": io.kgpu.Error.UnknownConfig naming it, nothing changes, NodeConfigError says
#   why, and so does `kgpuctl status` (text and --json); "bad": io.kgpu.Error.InvalidConfig naming bad.yaml:LINE: logLevel; a name with a
#   '/' : io.kgpu.Error.InvalidArgs, one of 300 bytes too and not even recorded; the
#   devices stay those of ts4;
# - SIGHUP re-reads the named file in force (ts4.yaml edited to 3 replicas);
# - a sender that is neither root nor kgpu-cluster is refused: kgpu (the bus policy lets
#   it send to the broker) by the broker itself (io.kgpu.Error.AccessDenied), nobody by the
#   bus policy;
# - a broker restart keeps "ts4" in force (the state file) and the kubelet sees its
#   replicas; a state file with hostile content is ignored with kgpu.yaml's own settings
#   and the reason in NodeConfigError, the broker serving on;
# - a default that names no file: "" is refused with io.kgpu.Error.UnknownConfig naming
#   nvidiaConfigs.default, the config in force stays.

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

import harness
from harness import check, BROKER_BUS, BROKER_PATH
from nvidia_sim import L40S, RES_GPU, yaml_config, wait_devices, run_cases

CLUSTER_USER = 'kgpu-cluster'
NODE_LABEL_CONFIGS = None  # the directory, made before the node starts

TS4 = yaml_config('none', extra='''sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
''')
TS3 = TS4.replace('replicas: 4', 'replicas: 3')
MPS = yaml_config('none', extra='''sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
''')
BAD = 'logLevel: debug\nversion: v1\n'


def replicas(n):
    return ['%s::%d' % (L40S, i) for i in range(n)]


def ensure_cluster_user():
    try:
        pwd.getpwnam(CLUSTER_USER)
    except KeyError:
        subprocess.run(['useradd', '--system', '--no-create-home', '--shell', '/usr/sbin/nologin',
                        CLUSTER_USER], check=True)


def write(path, text):
    with open(path + '.new', 'w') as f:
        f.write(text)
    os.chmod(path + '.new', 0o644)
    os.replace(path + '.new', path)


def props(node):
    out = {}
    for p in ('NodeConfig', 'NodeConfigRequested', 'NodeConfigError'):
        out[p] = node.busctl('get-property', BROKER_BUS, BROKER_PATH, BROKER_BUS, p)['data']
    return out


def set_config(node, name, user=CLUSTER_USER):
    return node.call_as(user, BROKER_BUS, BROKER_PATH, BROKER_BUS, 'SetNodeConfig', 's', [name])


def wait_list(node, want, after, healthy=True, timeout=20):
    """The first ListAndWatch update after `after` that lists exactly `want`."""
    cl = node.kubelet.plugin(RES_GPU, timeout)
    pred = (lambda d: sorted(x['id'] for x in d) == sorted(want) and
            (not healthy or all(x['health'] == 'Healthy' for x in d)))
    _, devs = cl.wait_update(pred, after=after, timeout=timeout)
    return devs


def kgpuctl(node, *args):
    e = node._env({'KGPU_DEVICE_PLUGIN_PATH': node.plugin_dir})
    return subprocess.run([node.bin('tools', 'kgpuctl')] + list(args), capture_output=True, text=True,
                          env=e, timeout=20)


def read_labels(node):
    try:
        with open(node.feature_file) as f:
            return dict(line.split('=', 1) for line in f.read().splitlines() if '=' in line)
    except FileNotFoundError:
        return {}


def wait_labels(node, want):
    node.wait_for(lambda: check(all(read_labels(node).get(k) == v for k, v in want.items()),
                                'labels %r, expected %r' % (read_labels(node), want)), 15, what='labels')


def mps_running(node):
    return any(d.get('running') for d in node.nvidia_state().get('mps', {}).values())


def switch(node):
    check(props(node) == {'NodeConfig': '', 'NodeConfigRequested': '', 'NodeConfigError': ''},
          'properties before any call: %r' % props(node))
    wait_devices(node, RES_GPU, [L40S], timeout=15)
    stream = node.kubelet.plugin(RES_GPU)
    grpc_pid = node.daemons['grpc'].pid
    broker_pid = node.daemons['broker'].pid

    # The label names ts4: 4 replicas, live.
    t = time.monotonic()
    r = set_config(node, 'ts4')
    check(r[0] == 'ok', 'SetNodeConfig(ts4): %r' % (r,))
    wait_list(node, replicas(4), t)
    check(props(node) == {'NodeConfig': 'ts4', 'NodeConfigRequested': 'ts4', 'NodeConfigError': ''},
          'properties after ts4: %r' % props(node))
    wait_labels(node, {'nvidia.com/gpu.replicas': '4', 'nvidia.com/gpu.sharing-strategy': 'time-slicing'})
    a = stream.allocate([L40S + '::3'])
    check(dict(a['envs']).get('NVIDIA_VISIBLE_DEVICES') == L40S, 'Allocate answer %r' % a)
    before = node.list_allocations()
    check(any(ids == [L40S + '::3'] for _, _, ids, _ in before), 'allocation not recorded: %r' % before)

    # The label names mps: 2 slices, Healthy once the probe runs the control daemon.
    t = time.monotonic()
    r = set_config(node, 'mps')
    check(r[0] == 'ok', 'SetNodeConfig(mps): %r' % (r,))
    wait_list(node, replicas(2), t, timeout=30)
    check(mps_running(node), 'no MPS control daemon: %r' % node.nvidia_state())
    check(props(node)['NodeConfig'] == 'mps', 'properties after mps: %r' % props(node))
    wait_labels(node, {'nvidia.com/gpu.replicas': '2', 'nvidia.com/gpu.sharing-strategy': 'mps'})
    after = node.list_allocations()
    check(any(x[0] == y[0] and x[2] == [L40S + '::3'] for x in after for y in before),
          'the allocation made under ts4 is gone: %r' % after)
    check('io.kgpu.Error.Refused' not in node.daemons['broker'].log_text(),
          'the probe refused SetMps: it did not follow the named config')

    # The label removed: the default, ts4; MPS stopped.
    t = time.monotonic()
    r = set_config(node, '')
    check(r[0] == 'ok', 'SetNodeConfig(""): %r' % (r,))
    wait_list(node, replicas(4), t)
    check(props(node) == {'NodeConfig': 'ts4', 'NodeConfigRequested': '', 'NodeConfigError': ''},
          'properties after "": %r' % props(node))
    node.wait_for(lambda: check(not mps_running(node), 'MPS still running: %r' % node.nvidia_state()), 15,
                  what='MPS stopped')
    check(any(c == 'nvidia-cuda-mps-control < quit' for c in node.nvidia_commands()), 'no quit sent')

    # An unknown name: refused, ts4 stays, the reason recorded.
    r = set_config(node, 'nope')
    check(r[0] == 'error' and r[1] == 'io.kgpu.Error.UnknownConfig' and "'nope'" in r[2],
          'SetNodeConfig(nope): %r' % (r,))
    p = props(node)
    check(p['NodeConfig'] == 'ts4' and p['NodeConfigRequested'] == 'nope' and "'nope'" in p['NodeConfigError'],
          'properties after nope: %r' % p)
    # kgpuctl status says the same, in text and JSON.
    st = kgpuctl(node, 'status')
    check('NVIDIA node config in force: ts4' in st.stdout and 'Requested (node label): nope' in st.stdout and
          "Not in force because: no config named 'nope'" in st.stdout, 'kgpuctl status: %r' % st.stdout)
    st = kgpuctl(node, 'status', '--json')
    broker = [d for d in json.loads(st.stdout) if d.get('daemon') == 'kgpu-brokerd'][0]
    nc = broker.get('node_config', {})
    check(nc.get('in_force') == 'ts4' and nc.get('requested') == 'nope' and "'nope'" in nc.get('error', ''),
          'kgpuctl status --json: %r' % broker)
    # An invalid file: refused with file:line:key.
    r = set_config(node, 'bad')
    check(r[0] == 'error' and r[1] == 'io.kgpu.Error.InvalidConfig' and 'bad.yaml:1: logLevel' in r[2],
          'SetNodeConfig(bad): %r' % (r,))
    check(props(node)['NodeConfig'] == 'ts4', 'properties after bad: %r' % props(node))
    r = set_config(node, '../etc/passwd')
    check(r[0] == 'error' and r[1] == 'io.kgpu.Error.InvalidArgs', 'SetNodeConfig(../etc/passwd): %r' % (r,))
    r = set_config(node, 'x' * 300)
    check(r[0] == 'error' and r[1] == 'io.kgpu.Error.InvalidArgs' and props(node)['NodeConfigRequested'] == '../etc/passwd',
          'SetNodeConfig(300 bytes): %r %r' % (r, props(node)))
    check(sorted(d['id'] for d in stream.devices()) == replicas(4), 'devices changed: %r' % stream.devices())

    # Senders other than root and kgpu-cluster.
    r = set_config(node, 'mps', user=harness.GRPC_USER)
    check(r[0] == 'error' and r[1] == 'io.kgpu.Error.AccessDenied', 'SetNodeConfig as kgpu: %r' % (r,))
    r = set_config(node, 'mps', user='nobody')
    check(r[0] == 'error' and r[1] == 'org.freedesktop.DBus.Error.AccessDenied', 'SetNodeConfig as nobody: %r' % (r,))
    check(props(node)['NodeConfig'] == 'ts4', 'a refused sender changed the config: %r' % props(node))
    # Root may (kgpu-clusterd's stand-in when run by hand): asking the one in force changes nothing.
    r = set_config(node, 'ts4', user='root')
    check(r[0] == 'ok' and props(node)['NodeConfigError'] == '', 'SetNodeConfig(ts4) as root: %r %r' % (r, props(node)))

    # SIGHUP re-reads the named file in force.
    write(os.path.join(NODE_LABEL_CONFIGS, 'ts4.yaml'), TS3)
    t = time.monotonic()
    node.daemons['broker'].send_signal(signal.SIGHUP)
    wait_list(node, replicas(3), t)
    check(props(node)['NodeConfig'] == 'ts4', 'properties after SIGHUP: %r' % props(node))
    check(node.daemons['grpc'].pid == grpc_pid and node.daemons['broker'].pid == broker_pid,
          'a daemon was restarted')

    # A broker restart keeps the name in force.
    write(os.path.join(NODE_LABEL_CONFIGS, 'ts4.yaml'), TS4)
    t = time.monotonic()
    node.restart_broker()
    node.wait_for(lambda: check(props(node)['NodeConfig'] == 'ts4', 'after a restart: %r' % props(node)), 10,
                  what='NodeConfig after a restart')
    wait_list(node, replicas(4), t)
    with open(os.path.join(node.state_dir, 'nvidia-config')) as f:
        check(f.read() == 'ts4\n', 'state file content')

    # Hostile state file: ignored, kgpu.yaml's own settings, the reason said.
    node.daemons['broker'].stop()
    for content in ('../../etc/shadow\n', 'x' * 5000, '\x00\xff\n'):
        path = os.path.join(node.state_dir, 'nvidia-config')
        with open(path, 'w') as f:
            f.write(content)
        t = time.monotonic()
        node.restart_broker()
        node.wait_for(lambda: check(props(node)['NodeConfigError'] != '', 'no error: %r' % props(node)), 10,
                      what='NodeConfigError after a hostile state file')
        check(props(node)['NodeConfig'] == '', 'hostile state file put %r in force' % props(node))
        devs = node.busctl('call', BROKER_BUS, BROKER_PATH, BROKER_BUS, 'GetDevices', 's', RES_GPU)['data'][0]
        check([d[0] for d in devs] == [L40S], 'devices after a hostile state file: %r' % devs)
        if content.startswith('..'):
            wait_list(node, [L40S], t)  # the kubelet too (the first time: ts4 before)
        with open(path) as f:
            check(f.read() == '\n', 'the state file does not follow NodeConfig ""')
        node.daemons['broker'].stop()
    node.restart_broker()

    # A default that names no file: refused like an unknown name (no fallback, as upstream).
    node.write_config_extra(yaml_config('none') + 'nvidiaConfigs:\n  directory: %s\n  default: missing\n'
                            % NODE_LABEL_CONFIGS)
    r = set_config(node, '')
    check(r[0] == 'error' and r[1] == 'io.kgpu.Error.UnknownConfig' and 'nvidiaConfigs.default' in r[2] and
          "'missing'" in r[2], 'SetNodeConfig("") with a missing default: %r' % (r,))
    p = props(node)
    check(p['NodeConfig'] == '' and 'nvidiaConfigs.default' in p['NodeConfigError'], 'properties: %r' % p)


def main():
    global NODE_LABEL_CONFIGS
    if not harness.is_root():
        print('SKIP test_nvidia_named_config.py: needs root (setpriv to the kgpu-cluster user)')
        raise SystemExit(77)
    ensure_cluster_user()
    NODE_LABEL_CONFIGS = tempfile.mkdtemp(prefix='kgpu-nvidia-configs.')
    os.chmod(NODE_LABEL_CONFIGS, 0o755)
    try:
        for name, text in (('ts4.yaml', TS4), ('mps.yaml', MPS), ('bad.yaml', BAD)):
            write(os.path.join(NODE_LABEL_CONFIGS, name), text)
        extra = yaml_config('none') + 'nvidiaConfigs:\n  directory: %s\n  default: ts4\n' % NODE_LABEL_CONFIGS
        run_cases([
            ('switch', dict(nvidia_scenario='l40s', config_extra=extra), switch),
        ])
    finally:
        shutil.rmtree(NODE_LABEL_CONFIGS, ignore_errors=True)


if __name__ == '__main__':
    main()
