#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_node_outputs.py — the node labels (NFD feature file) and CDI specs follow kgpu's
# life, on a real probe against a private bus.
#
# 1. Intel GPUs (layout two-gpus) and an nvidia-smi that sees no GPU (scenario no-devices,
#    failOnInitError false): the probe that owns io.kgpu.Probe1 writes the Intel labels and
#    the Intel CDI spec, and no nvidia.com/ label and no NVIDIA spec.
# 2. A second probe on the same node, with its own output paths, that cannot serve: once
#    with no bus at all ("Failed to connect to the system bus"), once with the name
#    already owned ("Failed to acquire bus name"; it reads the NVIDIA GPUs first, so the
#    event loop runs before the bus). Each exits non-zero without READY=1 and leaves no
#    file and no directory behind; the serving probe's files are untouched.
# 3. The files survive a probe stop and a restart (same content), and
#    `kgpu-probed --remove-outputs` with the node's configuration removes kgpu's files and
#    only those (another CDI spec in the directory stays).
# 4. An NVIDIA-only node (layout nvidia-only: an L40S with nvidia-drm nodes, no Intel GPU;
#    scenario l40s): NVIDIA labels and spec, no gpu.intel.com/ label at all (no tiles=0)
#    and no Intel CDI spec.

import os
import subprocess
import time

import harness
from harness import check

INTEL_SPEC = 'kgpu-intel-gpu.json'
NVIDIA_SPEC = 'kgpu-nvidia.yaml'
NO_FAIL = 'flags:\n  failOnInitError: false\n'


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def wait(fn, what, timeout=10):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError('timed out waiting for ' + what)
        time.sleep(0.05)


def labels(node):
    text = wait(lambda: read(node.feature_file), 'the feature file')
    return text.splitlines()


def probe_env(node, out_dir, extra=None):
    """The environment harness.Node.start_probe() gives the probe, with this probe's own
    output paths under out_dir (which does not exist yet)."""
    asan = os.environ.get('ASAN_OPTIONS', '')
    env = dict(node.nvidia_env(), **{
        'ASAN_OPTIONS': (asan + ':' if asan else '') + 'verify_asan_link_order=0',
        'LD_PRELOAD': 'libumockdev-preload.so.0',
        'UMOCKDEV_DIR': node.umockdev_dir,
        'KGPU_RUNTIME_DIRECTORY': os.path.join(node.tmp, 'run', 'probe'),
        'KGPU_LABELS_FEATURE_FILE': os.path.join(out_dir, 'features.d', 'kgpu'),
        'KGPU_CDI_SPEC_DIRECTORY': os.path.join(out_dir, 'cdi'),
    })
    env.update(extra or {})
    return node._env(env)


def failing_probe(node, name, extra_env, want_log):
    """Runs a second probe that cannot serve; checks it leaves nothing behind."""
    out_dir = os.path.join(node.tmp, name)
    d = harness.Daemon(node, name, [node.bin('daemons', 'probe', 'kgpu-probed')],
                       probe_env(node, out_dir, extra_env)).start()
    try:
        d.proc.wait(20)
    except subprocess.TimeoutExpired:
        raise AssertionError('%s did not exit' % name)
    rc = d.stop()
    log = d.log_text()
    check(rc not in (0, None), '%s: exit status %r, expected a failure' % (name, rc))
    check(want_log in log, '%s: %r not in its log:\n%s' % (name, want_log, log))
    check('READY=1' not in ''.join(m for _, m in d.notify), '%s sent READY=1' % name)
    check(not os.path.exists(out_dir),
          '%s left %r behind' % (name, sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else out_dir))
    print('%s: exit %d, "%s", nothing written' % (name, rc, want_log))


def intel_node(node):
    # 1. The serving probe's files: Intel only.
    lines = labels(node)
    check('gpu.intel.com/tiles=2' in lines and 'gpu.intel.com/cards=card0.card1' in lines, 'labels %r' % lines)
    check(not [l for l in lines if l.startswith('nvidia.com/')], 'NVIDIA labels without an NVIDIA GPU: %r' % lines)
    check(all(l.startswith('gpu.intel.com/') for l in lines), 'labels %r' % lines)
    spec = wait(lambda: read(os.path.join(node.cdi_dir, INTEL_SPEC)), 'the Intel CDI spec')
    check(not os.path.exists(os.path.join(node.cdi_dir, NVIDIA_SPEC)), 'an NVIDIA CDI spec without an NVIDIA GPU')
    before = (read(node.feature_file), spec)
    print('Intel node, no NVIDIA GPU: %d Intel labels, no nvidia.com/ label, Intel spec only' % len(lines))

    # 2. Probes that never get the name write nothing.
    failing_probe(node, 'probe-nobus',
                  {'DBUS_SYSTEM_BUS_ADDRESS': 'unix:path=' + os.path.join(node.tmp, 'no-such-bus')},
                  'Failed to connect to the system bus')
    failing_probe(node, 'probe-nameowned', {}, 'Failed to acquire bus name io.kgpu.Probe1')
    check((read(node.feature_file), read(os.path.join(node.cdi_dir, INTEL_SPEC))) == before,
          'the serving probe\'s files changed')

    # 3. A stop and a restart keep the files.
    probe = node.daemons['probe']
    check(probe.stop() == 0, 'probe exit status on SIGTERM')
    check((read(node.feature_file), read(os.path.join(node.cdi_dir, INTEL_SPEC))) == before,
          'files changed or gone after the probe stopped')
    node.start_probe()
    node.wait_bus_name(harness.PROBE_BUS, 20, node.daemons['probe'])
    node.daemons['probe'].wait_notify('READY', '1', timeout=20)
    check((read(node.feature_file), read(os.path.join(node.cdi_dir, INTEL_SPEC))) == before,
          'files differ after the restart')
    print('files kept across a probe stop and restart')

    # ... and the package's removal step takes kgpu's files, and only those.
    check(node.daemons['probe'].stop() == 0, 'probe exit status on SIGTERM')
    other = os.path.join(node.cdi_dir, 'vendor.yaml')
    with open(other, 'w') as f:
        f.write('cdiVersion: "0.5.0"\n')
    env = node._env({'KGPU_LABELS_FEATURE_FILE': node.feature_file, 'KGPU_CDI_SPEC_DIRECTORY': node.cdi_dir})
    r = subprocess.run([node.bin('daemons', 'probe', 'kgpu-probed'), '--remove-outputs'], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
    out = r.stdout.decode(errors='replace')
    check(r.returncode == 0, '--remove-outputs failed (%d): %s' % (r.returncode, out))
    check(read(node.feature_file) is None, 'feature file still there after --remove-outputs: %s' % out)
    check(read(os.path.join(node.cdi_dir, INTEL_SPEC)) is None, 'Intel spec still there: %s' % out)
    check(read(other) is not None, '--remove-outputs removed another vendor\'s CDI spec')
    print('--remove-outputs: kgpu\'s files removed, %s kept' % os.path.basename(other))


def nvidia_only_node():
    with harness.Node(layout='nvidia-only', broker=False, kubelet=False, nvidia_scenario='l40s',
                      resources=[]) as node:
        node.daemons['probe'].wait_notify('READY', '1', timeout=20)
        lines = labels(node)
        check('nvidia.com/gpu.count=1' in lines, 'NVIDIA labels %r' % lines)
        intel = [l for l in lines if l.startswith('gpu.intel.com/')]
        check(not intel, 'gpu.intel.com/ labels on a node without an Intel GPU: %r' % intel)
        check(os.path.exists(os.path.join(node.cdi_dir, NVIDIA_SPEC)), 'NVIDIA CDI spec missing')
        check(not os.path.exists(os.path.join(node.cdi_dir, INTEL_SPEC)),
              'an Intel CDI spec on a node without an Intel GPU')
        rcs = node.stop()
        check(rcs.get('probe') == 0, 'probe exit status %r' % rcs)
        print('NVIDIA-only node: %d labels, none under gpu.intel.com/, NVIDIA spec only' % len(lines))


def run(node):
    node.daemons['probe'].wait_notify('READY', '1', timeout=20)
    intel_node(node)
    nvidia_only_node()


if __name__ == '__main__':
    harness.run_test(run, layout='two-gpus', broker=False, kubelet=False, nvidia_scenario='no-devices',
                     config_extra=NO_FAIL, resources=[])
