#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_kgpuctl.py — kgpuctl status, labels, rescan and render-device on a running node.
#
# Asserts: `status` exits 0 with the probe and broker running at the build's version
# and kgpu-grpcd's two plugin sockets "serving" in the node's device-plugins directory
# (table and --json); `labels` prints a feature file named by KGPU_LABELS_FEATURE_FILE
# (comments skipped; --json gives exactly the name=value pairs), names file:line of a
# malformed line and says when the file is missing; `rescan` works for root and is an
# "access denied" line for nobody; `render-device` (no bus at all) picks render nodes
# by minor number from KGPU_DEV_ROOT/dri, N from 1, with clear errors for N out of
# range, a non-number and an empty directory; every command `kgpuctl --help` lists
# prints valid JSON with --json before or after it (-json too), --config works after
# the command, and arguments a command does not take, unknown and abbreviated options
# are errors; with the broker stopped, `resources` and `status` fail naming
# kgpu-brokerd as not running.

import json
import os
import re
import subprocess

import harness
from harness import check, TWO_GPUS


def project_version():
    """The version in meson.build: what the daemons of this build report."""
    with open(os.path.join(harness.SOURCE_ROOT, 'meson.build')) as f:
        return re.search(r"^\s*version\s*:\s*'([^']+)'", f.read(), re.M).group(1)


def ctl(node, *args, user=None, env=None):
    e = node._env(env or {})
    e['KGPU_DEVICE_PLUGIN_PATH'] = node.plugin_dir
    argv = [node.bin('tools', 'kgpuctl')] + list(args)
    if user:
        argv = ['setpriv', '--reuid=' + user, '--regid=nogroup', '--clear-groups'] + argv
    p = subprocess.run(argv, capture_output=True, text=True, env=e, timeout=20)
    return p


def test_status(node):
    node.kubelet.wait_connected(list(TWO_GPUS), timeout=10)
    p = ctl(node, 'status')
    check(p.returncode == 0, 'status failed: %r %r' % (p.stdout, p.stderr))
    for d in ('kgpu-probed', 'kgpu-brokerd'):
        line = [l for l in p.stdout.splitlines() if l.startswith(d + ' ')]
        check(line and 'running' in line[0] and project_version() in line[0], 'status: %s line %r' % (d, p.stdout))
    for res in TWO_GPUS:
        line = [l for l in p.stdout.splitlines() if l.strip().startswith(res + ' ')]
        check(line and line[0].split()[-1] == 'serving', 'status: %s socket %r' % (res, p.stdout))
    p = ctl(node, '--json', 'status')
    check(p.returncode == 0, 'status --json failed: %r' % p.stderr)
    js = json.loads(p.stdout)
    by = {d['daemon']: d for d in js}
    check(set(by) == {'kgpu-probed', 'kgpu-brokerd', 'kgpu-grpcd'}, 'status --json daemons %r' % js)
    check(by['kgpu-brokerd']['running'] and by['kgpu-brokerd']['version'] == project_version(), 'broker %r' % by)
    g = by['kgpu-grpcd']
    check(g['running'] and g['kubelet_socket'] is True, 'grpcd %r' % g)
    check(sorted((r['resource'], r['socket']) for r in g['resources']) ==
          sorted((r, 'serving') for r in TWO_GPUS), 'grpcd sockets %r' % g)


def test_labels(node):
    path = os.path.join(node.tmp, 'features-kgpuctl')
    with open(path, 'w') as f:
        f.write('# +expiry-time=2030-01-01T00:00:00Z\n'
                'gpu.intel.com/device-id.0300-56a0.present=true\n'
                'gpu.intel.com/cards=card0.card1\n')
    env = {'KGPU_LABELS_FEATURE_FILE': path}
    p = ctl(node, 'labels', env=env)
    check(p.returncode == 0 and 'gpu.intel.com/cards' in p.stdout and 'card0.card1' in p.stdout
          and 'expiry' not in p.stdout, 'labels: %r %r' % (p.stdout, p.stderr))
    p = ctl(node, '--json', 'labels', env=env)
    check(p.returncode == 0 and json.loads(p.stdout) == {
        'gpu.intel.com/device-id.0300-56a0.present': 'true', 'gpu.intel.com/cards': 'card0.card1'},
        'labels --json: %r' % p.stdout)
    with open(path, 'a') as f:
        f.write('no-equals-sign\n')
    for args in (('labels',), ('--json', 'labels')):
        p = ctl(node, *args, env=env)
        check(p.returncode != 0 and '%s:4:' % path in p.stderr and p.stdout == '',
              'malformed labels %r: %r %r' % (args, p.stdout, p.stderr))
    p = ctl(node, 'labels', env={'KGPU_LABELS_FEATURE_FILE': path + '.missing'})
    check(p.returncode != 0 and 'does not exist' in p.stderr, 'missing labels: %r' % p.stderr)


def test_rescan(node):
    p = ctl(node, 'rescan')
    check(p.returncode == 0, 'rescan as root: %r' % p.stderr)
    p = ctl(node, 'rescan', user='nobody')
    check(p.returncode != 0 and 'access denied' in p.stderr.lower(), 'rescan as nobody: %r' % p.stderr)


def test_render_device(node):
    root = os.path.join(node.tmp, 'devroot')
    dri = os.path.join(root, 'dri')
    os.makedirs(dri)
    # No bus for this command: it must work inside a container.
    env = {'KGPU_DEV_ROOT': root, 'DBUS_SYSTEM_BUS_ADDRESS': 'unix:path=/nonexistent'}
    p = ctl(node, 'render-device', env=env)
    check(p.returncode != 0 and 'No render device' in p.stderr, 'empty dri: %r' % p.stderr)
    # Names sort differently from minors: renderD130 (minor 100) comes first.
    for name, minor in (('renderD129', 129), ('renderD130', 100), ('renderD128', 128)):
        os.mknod(os.path.join(dri, name), 0o600 | 0o020000, os.makedev(226, minor))
    os.mknod(os.path.join(dri, 'card0'), 0o600 | 0o020000, os.makedev(226, 0))
    with open(os.path.join(dri, 'renderD1'), 'w'):
        pass  # a regular file is not a render node
    for args, want in (((), '/dev/dri/renderD130'), (('1',), '/dev/dri/renderD130'),
                       (('2',), '/dev/dri/renderD128'), (('3',), '/dev/dri/renderD129')):
        p = ctl(node, 'render-device', *args, env=env)
        check(p.returncode == 0 and p.stdout.strip() == want, 'render-device %r: %r %r' % (args, p.stdout, p.stderr))
    p = ctl(node, '--json', 'render-device', '2', env=env)
    check(p.returncode == 0 and json.loads(p.stdout) == {
        'device': '/dev/dri/renderD128', 'index': 2,
        'devices': ['/dev/dri/renderD130', '/dev/dri/renderD128', '/dev/dri/renderD129']}, 'json %r' % p.stdout)
    for bad, msg in (('4', 'only 3'), ('0', 'Invalid'), ('x', 'Invalid'), ('-1', 'Invalid')):
        p = ctl(node, 'render-device', bad, env=env)
        check(p.returncode != 0 and msg in p.stderr, 'render-device %s: %r' % (bad, p.stderr))


def commands(node):
    """The commands `kgpuctl --help` lists: every one, also those added later."""
    p = ctl(node, '--help')
    text = p.stdout.split('Commands:\n', 1)[1].split('\n\n', 1)[0]
    names = [l.split()[0] for l in text.splitlines() if l.strip()]
    check(len(names) >= 7 and 'render-device' in names, 'commands in --help: %r' % p.stdout)
    return names


def test_json_anywhere(node):
    # After test_render_device: KGPU_DEV_ROOT/dri holds three render nodes.
    labels = os.path.join(node.tmp, 'features-json')
    with open(labels, 'w') as f:
        f.write('gpu.intel.com/cards=card0\n')
    env = {'KGPU_LABELS_FEATURE_FILE': labels, 'KGPU_DEV_ROOT': os.path.join(node.tmp, 'devroot')}
    for cmd in commands(node):
        for args in (('--json', cmd), (cmd, '--json'), (cmd, '-json')):
            p = ctl(node, *args, env=env)
            check(p.returncode == 0, 'kgpuctl %s: %r %r' % (' '.join(args), p.stdout, p.stderr))
            try:
                json.loads(p.stdout)
            except ValueError:
                check(False, 'kgpuctl %s: not JSON: %r' % (' '.join(args), p.stdout))
    p = ctl(node, 'render-device', '2', '--json', env=env)
    check(p.returncode == 0 and json.loads(p.stdout)['index'] == 2, 'render-device 2 --json: %r' % p.stdout)
    # --config after the command too.
    cfg = os.path.join(node.tmp, 'kgpuctl-labels.yaml')
    with open(cfg, 'w') as f:
        f.write('labels:\n  featureFile: %s\n' % labels)
    p = ctl(node, 'labels', '--config', cfg, '--json')
    check(p.returncode == 0 and json.loads(p.stdout) == {'gpu.intel.com/cards': 'card0'},
          'labels --config FILE --json: %r %r' % (p.stdout, p.stderr))
    # Arguments a command does not take, unknown and abbreviated options: errors.
    for args, msg in ((('devices', 'extra'), 'takes no arguments'), (('devices', '--jso'), 'unknown option'),
                      (('--vers',), 'unknown option'), (('devices', '--json=yes'), 'takes no value')):
        p = ctl(node, *args)
        check(p.returncode != 0 and msg in p.stderr and p.stdout == '',
              'kgpuctl %s: %r %r' % (' '.join(args), p.stdout, p.stderr))


def test_daemon_down(node):
    node.daemons['broker'].stop()
    p = ctl(node, 'resources')
    check(p.returncode != 0 and 'kgpu-brokerd is not running' in p.stderr, 'resources, broker down: %r' % p.stderr)
    p = ctl(node, 'status')
    check(p.returncode != 0 and any(l.startswith('kgpu-brokerd') and 'down' in l for l in p.stdout.splitlines()),
          'status, broker down: %r' % p.stdout)


def run(node):
    test_status(node)
    test_labels(node)
    test_rescan(node)
    test_render_device(node)
    test_json_anywhere(node)
    test_daemon_down(node)


if __name__ == '__main__':
    harness.run_test(run, need_root=True)
