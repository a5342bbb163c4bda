#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_nvidia_tools_trust.py — kgpu-probed runs nvidia-smi and nvidia-cuda-mps-control as
# root, so it refuses a tool, or a driver root, that someone other than root could
# change. Each case plants a working copy of the fake tools (tests/fake-nvidia) in a
# directory of its own and makes one thing untrusted:
#  - nvidia-smi (nvidia.smiPath) owned by uid 65534: the probe does not start, the error
#    names the key, the path and its owner, it never reaches the bus, the tool never runs;
#  - nvidia-cuda-mps-control (nvidia.mpsControlPath) of root but mode 0775: the same,
#    naming the mode;
#  - nvidia-smi of root in a directory owned by uid 65534 (who could replace it);
#  - flags.nvidiaDriverRoot owned by uid 65534 with a root-owned usr/bin/nvidia-smi;
#  - flags.nvidiaDevRoot owned by uid 65534 (its nodes go into containers);
#  - the same copies, trusted (root's, 0755): the probe starts and serves the L40S, so
#    the refusals above are about ownership and mode, nothing else;
#  - on reload (SIGHUP) a driver root owned by uid 65534 is refused with the same error,
#    the probe keeps running with its configuration and its GPUs.
# Needs root (chown).

import os
import shutil
import signal
import subprocess
import tempfile
import time

import harness
from harness import check

NOBODY = 65534
L40S = 'GPU-00000000-0000-0000-0000-000000000000'


def plant(d):
    """A working copy of the fake tools in d (root's, 0755); returns (smi, mps-control)."""
    os.makedirs(d, mode=0o755, exist_ok=True)
    for name in ('nvidia-smi', 'nvidia-cuda-mps-control', 'fake_nvidia.py'):
        shutil.copy(os.path.join(harness.FAKE_NVIDIA_DIR, name), os.path.join(d, name))
        os.chmod(os.path.join(d, name), 0o755)
    return os.path.join(d, 'nvidia-smi'), os.path.join(d, 'nvidia-cuda-mps-control')


def run_probe(tmp, smi, mps_control=None, config=''):
    """Starts kgpu-probed with the fake tools' environment and no reachable bus; returns
    (exit status, output, the commands the fake tools logged)."""
    cfg = os.path.join(tmp, 'kgpu.yaml')
    with open(cfg, 'w') as f:
        f.write('nvidia:\n  healthIntervalMs: 0\n' + config)
    log = os.path.join(tmp, 'fake-nvidia.log')
    env = dict(os.environ, KGPU_LOG_TARGET='stderr', KGPU_CONFIG=cfg, KGPU_FAKE_NVIDIA_SCENARIO='l40s',
               KGPU_FAKE_NVIDIA_LOG=log, KGPU_FAKE_NVIDIA_DATA=os.path.join(harness.SOURCE_ROOT, 'tests', 'data',
                                                                             'nvidia'),
               DBUS_SYSTEM_BUS_ADDRESS='unix:path=/nonexistent/kgpu-test-bus',
               KGPU_RUNTIME_DIRECTORY=os.path.join(tmp, 'run'))
    env.pop('KGPU_FAKE_NVIDIA_STATE', None)
    for k, v in (('KGPU_NVIDIA_SMI', smi), ('KGPU_NVIDIA_MPS_CONTROL', mps_control)):
        if v:
            env[k] = v
        else:
            env.pop(k, None)
    probe = os.path.join(harness.find_build_root(), 'daemons', 'probe', 'kgpu-probed')
    r = subprocess.run([probe], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    try:
        with open(log) as f:
            ran = f.read().splitlines()
        os.unlink(log)
    except FileNotFoundError:
        ran = []
    return r.returncode, r.stdout.decode(errors='replace'), ran


def expect_refused(what, tmp, want, **kw):
    rc, out, ran = run_probe(tmp, **kw)
    check(rc != 0, '%s: the probe started (exit %d): %s' % (what, rc, out[-2000:]))
    check(all(w in out for w in want), '%s: %r not all in the error: %s' % (what, want, out[-2000:]))
    check('system bus' not in out, '%s: the probe got as far as the bus: %s' % (what, out[-2000:]))
    check(ran == [], '%s: a tool ran: %r' % (what, ran))
    line = [l for l in out.splitlines() if 'Invalid configuration' in l]
    print('%s: refused at start: %s' % (what, line[-1] if line else out.splitlines()[-1]))


def check_start(tmp):
    smi, mps_control = plant(os.path.join(tmp, 'tools'))
    os.chown(smi, NOBODY, NOBODY)
    expect_refused('nvidia-smi owned by uid 65534', tmp,
                   ['Invalid configuration: nvidia.smiPath: refusing to run nvidia-smi as root',
                    '%s is owned by uid 65534, not root' % smi], smi=smi)
    os.chown(smi, 0, 0)

    os.chmod(mps_control, 0o775)
    expect_refused('nvidia-cuda-mps-control of mode 0775', tmp,
                   ['nvidia.mpsControlPath: refusing to run nvidia-cuda-mps-control as root',
                    '%s is writable by group or others (mode 0775)' % mps_control], smi=smi, mps_control=mps_control)
    os.chmod(mps_control, 0o755)

    os.chown(os.path.dirname(smi), NOBODY, NOBODY)
    expect_refused('root\'s nvidia-smi in a directory of uid 65534', tmp,
                   ['nvidia.smiPath', '%s is owned by uid 65534' % os.path.dirname(smi)], smi=smi)
    os.chown(os.path.dirname(smi), 0, 0)

    # A driver root: <root>/usr/bin/nvidia-smi, root's; the root itself uid 65534's.
    droot = os.path.join(tmp, 'driver')
    plant(os.path.join(droot, 'usr', 'bin'))
    os.chown(droot, NOBODY, NOBODY)
    expect_refused('a driver root of uid 65534', tmp,
                   ['flags.nvidiaDriverRoot', '%s is owned by uid 65534' % droot],
                   smi=None, config='flags:\n  nvidiaDriverRoot: %s\n' % droot)
    os.chown(droot, 0, 0)

    # A device root of uid 65534: the CDI spec would hand its nodes to containers.
    devroot = os.path.join(tmp, 'devroot')
    os.makedirs(devroot, mode=0o755)
    os.chown(devroot, NOBODY, NOBODY)
    expect_refused('a device root of uid 65534', tmp,
                   ['Invalid configuration: flags.nvidiaDevRoot: refusing to hand out device nodes from there',
                    '%s is owned by uid 65534' % devroot], smi=smi, config='flags:\n  nvidiaDevRoot: %s\n' % devroot)
    os.chown(devroot, 0, 0)

    # The same copies, trusted: the probe gets past its configuration and runs nvidia-smi
    # (it stops later, at the bus this test does not provide).
    rc, out, ran = run_probe(tmp, smi=None, mps_control=mps_control, config='flags:\n  nvidiaDriverRoot: %s\n' % droot)
    check('Invalid configuration' not in out and any(c.startswith('nvidia-smi ') for c in ran),
          'the trusted copies were not used: exit %d, %r: %s' % (rc, ran, out[-2000:]))
    print('the same copies owned by root, mode 0755: taken (nvidia-smi ran %d time(s))' % len(ran))


def check_reload(tmp):
    droot = os.path.join(tmp, 'reload-root')
    plant(os.path.join(droot, 'usr', 'bin'))
    os.chown(droot, NOBODY, NOBODY)
    with harness.Node(broker=False, kubelet=False, nvidia_scenario='l40s', resources=[],
                      config_extra='nvidia:\n  healthIntervalMs: 0\n') as n:
        probe = n.daemons['probe']
        pid = probe.proc.pid
        n.write_config_extra('nvidia:\n  healthIntervalMs: 0\nflags:\n  nvidiaDriverRoot: %s\n' % droot)
        probe.send_signal(signal.SIGHUP)
        want = 'Invalid configuration: flags.nvidiaDriverRoot: refusing to look for the NVIDIA tools there: ' \
               '%s is owned by uid 65534, not root' % droot
        end = time.monotonic() + 10
        while not ('Refusing to reload' in probe.log_text() and want in probe.log_text()):
            check(time.monotonic() < end, 'no refusal in the log: %s' % probe.log_text()[-2000:])
            time.sleep(0.05)
        check(probe.alive() and probe.proc.pid == pid, 'the probe did not survive the refused reload')
        # Still serving, with its tools: a Rescan reads the L40S again.
        n.busctl('call', harness.PROBE_BUS, '/io/kgpu/Probe1', 'io.kgpu.Probe1', 'Rescan', json_out=False)
        r = n.busctl('call', harness.PROBE_BUS, '/io/kgpu/Probe1', 'org.freedesktop.DBus.ObjectManager',
                     'GetManagedObjects')
        check(any(path.endswith(L40S.replace('-', '_2d')) for path in r['data'][0]),
              'the L40S is gone after the refused reload: %r' % list(r['data'][0]))
    print('reload with a driver root of uid 65534: refused with the same error, the probe serves on')


def main():
    if not harness.is_root():
        print('SKIP %s: needs root (chown)' % os.path.basename(__file__))
        raise SystemExit(77)
    tmp = tempfile.mkdtemp(prefix='kgpu-trust-')
    os.chmod(tmp, 0o755)
    try:
        check_start(tmp)
        check_reload(tmp)
    except BaseException:
        import traceback
        traceback.print_exc()
        print('FAIL test_nvidia_tools_trust.py')
        raise SystemExit(1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print('PASS test_nvidia_tools_trust.py')


if __name__ == '__main__':
    main()
