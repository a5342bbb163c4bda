#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_nvidia_probe.py — kgpu-probed alone (no broker) with the fake nvidia-smi
# (tests/fake-nvidia) next to the Intel testbed "two-gpus":
# - the io.kgpu.Gpu1 objects of the NVIDIA GPUs as busctl shows them (values written
#   below), the Intel GPUs' "unknown" NVIDIA values, kgpu-nvidia.yaml;
# - health: a GPU lost in nvidia-smi's answer (fake_nvidia.set_lost) is Unhealthy
#   "gpu-lost" within one poll interval, Healthy again after healthRecoverPolls good polls;
# - Rescan after a MIG layout change (the scenario the fake reads is a symlink we
#   retarget): MigDevices changes through PropertiesChanged, same process, same object;
# - failOnInitError: a failing nvidia-smi at start stops the probe with a clear error
#   (true) or leaves it serving no NVIDIA GPU until a Rescan finds them (false).

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import harness
from harness import check

GPU1 = 'io.kgpu.Gpu1'
INTERVAL_MS = 300
RECOVER_POLLS = 3
DATA = os.path.join(harness.SOURCE_ROOT, 'tests', 'data', 'nvidia')
FAKE_SMI = os.path.join(harness.SOURCE_ROOT, 'tests', 'fake-nvidia', 'nvidia-smi')
H100_MIXED = 'GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4'


def scenario_farm(initial):
    """A copy of tests/data/nvidia made of symlinks, whose scenario "current" is itself a
    symlink to `initial` (retarget() switches it atomically)."""
    d = tempfile.mkdtemp(prefix='kgpu-nv-')
    os.chmod(d, 0o755)
    os.mkdir(os.path.join(d, 'scenarios'))
    for f in os.listdir(DATA):
        if f.endswith('.txt'):
            os.symlink(os.path.join(DATA, f), os.path.join(d, f))
    for f in os.listdir(os.path.join(DATA, 'scenarios')):
        os.symlink(os.path.join(DATA, 'scenarios', f), os.path.join(d, 'scenarios', f))
    retarget(d, initial)
    return d


def retarget(d, name):
    tmp = os.path.join(d, 'scenarios', '.current.json')
    os.symlink(name + '.json', tmp)
    os.replace(tmp, os.path.join(d, 'scenarios', 'current.json'))


def probe_gpus(node):
    objs = node.busctl('call', harness.PROBE_BUS, '/io/kgpu/Probe1',
                       'org.freedesktop.DBus.ObjectManager', 'GetManagedObjects')['data'][0]
    out = {}
    for _, ifaces in objs.items():
        g = ifaces.get(GPU1)
        if g:
            out[g['Id']['data']] = {k: v['data'] for k, v in g.items()}
    return out


def nvidia_gpus(node):
    return {k: v for k, v in probe_gpus(node).items() if v['Vendor'] == 'nvidia'}


def wait(fn, what, timeout=10, step=0.01):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError('timed out waiting for ' + what)
        time.sleep(step)


def cdi_names(node):
    try:
        with open(os.path.join(node.cdi_dir, 'kgpu-nvidia.yaml')) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    check('kind: "nvidia.com/gpu"\n' in text, 'CDI kind: %s' % text[:300])
    return re.findall(r'^- name: "([^"]*)"$', text, re.M)


def cap(gi, ci=None):
    return '/dev/nvidia-caps/nvidia-cap%d' % harness.mig_cap_minor(0, gi, ci)


def node_for(scenario, farm=None, fail_on_init=True, extra=''):
    env = {'KGPU_FAKE_NVIDIA_DATA': farm} if farm else {}
    cfg = ('flags:\n  failOnInitError: %s\n'
           'nvidia:\n  healthIntervalMs: %d\n  healthRecoverPolls: %d\n%s'
           % ('true' if fail_on_init else 'false', INTERVAL_MS, RECOVER_POLLS, extra))
    return harness.Node(broker=False, kubelet=False, nvidia_scenario=scenario, extra_env=env,
                        config_extra=cfg, resources=[])


def check_h100_mig(node):
    """The recorded H100 with MIG (scenario h100-mig), every property."""
    gpus = probe_gpus(node)
    g = gpus['GPU-00000000-0000-0000-0000-000000000000']
    want = {
        'Id': 'GPU-00000000-0000-0000-0000-000000000000',
        'Vendor': 'nvidia', 'Driver': 'nvidia', 'PciAddress': '0000:00:09.0',
        'VendorId': 0x10de, 'DeviceId': 0x2330, 'Product': 'NVIDIA H100 80GB HBM3',
        'MemoryBytes': 81559 << 20, 'Tiles': 1, 'NumaNode': 0,
        'CardNode': '', 'RenderNode': '',
        'DeviceNodes': ['/dev/nvidia0', '/dev/nvidiactl', '/dev/nvidia-uvm', '/dev/nvidia-uvm-tools'],
        'Uuid': 'GPU-00000000-0000-0000-0000-000000000000',
        'Health': 'Healthy', 'HealthReason': '', 'PciClass': 0x030200,
        'ByPathNodes': [], 'MeiNodes': [], 'PhysicalFunction': '',
        'Index': 0, 'ComputeMode': 'Default', 'MigMode': 'Enabled',
        'MigDevices': [
            [0, 'MIG-00000000-0000-0000-0000-000000000000', '3g.40gb', 2, 0, [cap(2), cap(2, 0)], 40448 << 20],
            [1, 'MIG-00000001-0000-0000-0000-000000000001', '2g.20gb', 3, 0, [cap(3), cap(3, 0)], 20096 << 20],
            [2, 'MIG-00000002-0000-0000-0000-000000000002', '1g.10gb', 9, 0, [cap(9), cap(9, 0)], 9984 << 20],
            [3, 'MIG-00000003-0000-0000-0000-000000000003', '1g.10gb', 10, 0, [cap(10), cap(10, 0)], 9984 << 20],
        ],
        'ComputeCapability': '9.0', 'DriverVersion': '590.48.01', 'CudaVersion': '13.1',
        'Links': [], 'MpsState': '', 'MpsPipeDirectory': '',
    }
    for k, v in want.items():
        check(g.get(k) == v, '%s: %r, want %r' % (k, g.get(k), v))
    check(sorted(g) == sorted(want), 'properties %s' % sorted(g))
    # The Intel GPUs carry the unknown NVIDIA values.
    for gid in (harness.GPU_I915, harness.GPU_XE):
        i = gpus[gid]
        got = {k: i[k] for k in ('Index', 'ComputeMode', 'MigMode', 'MigDevices', 'ComputeCapability',
                                 'DriverVersion', 'CudaVersion', 'Links', 'MpsState', 'MpsPipeDirectory')}
        check(got == {'Index': -1, 'ComputeMode': '', 'MigMode': '', 'MigDevices': [], 'ComputeCapability': '',
                      'DriverVersion': '', 'CudaVersion': '', 'Links': [], 'MpsState': '',
                      'MpsPipeDirectory': ''}, '%s: %r' % (gid, got))
    names = cdi_names(node)
    check(names == ['0', 'GPU-00000000-0000-0000-0000-000000000000',
                    '0:0', 'MIG-00000000-0000-0000-0000-000000000000',
                    '0:1', 'MIG-00000001-0000-0000-0000-000000000001',
                    '0:2', 'MIG-00000002-0000-0000-0000-000000000002',
                    '0:3', 'MIG-00000003-0000-0000-0000-000000000003'], 'CDI devices %r' % names)
    # The Intel CDI spec keeps only the Intel GPUs.
    with open(os.path.join(node.cdi_dir, 'kgpu-intel-gpu.json')) as f:
        check('GPU-0000' not in f.read(), 'NVIDIA GPU in the Intel CDI spec')
    print('h100-mig: Gpu1 properties, Intel unknowns and CDI ok')


def check_health(node):
    """8xh100-nvlink: links, then GPU 2 lost and back."""
    gpus = nvidia_gpus(node)
    check(len(gpus) == 8, 'GPUs %r' % sorted(gpus))
    g0 = gpus['GPU-00000000-0000-0000-0000-000000000000']
    check(g0['Links'] == [['GPU-0000000%d-0000-0000-0000-00000000000%d' % (i, i), 'NV', 18] for i in range(1, 8)],
          'Links %r' % g0['Links'])
    check([gpus['GPU-0000000%d-0000-0000-0000-00000000000%d' % (i, i)]['NumaNode'] for i in range(8)] ==
          [0, 0, 0, 0, 1, 1, 1, 1], 'NUMA nodes')
    lost = 'GPU-00000002-0000-0000-0000-000000000002'

    t = time.monotonic()
    node.nvidia_set_lost([2])
    g = wait(lambda: (lambda x: x if x['Health'] == 'Unhealthy' else None)(nvidia_gpus(node)[lost]), 'GPU 2 lost')
    dt = time.monotonic() - t
    check(g['HealthReason'] == 'gpu-lost', 'reason %r' % g['HealthReason'])
    others = [v['Health'] for k, v in nvidia_gpus(node).items() if k != lost]
    check(others == ['Healthy'] * 7, 'others %r' % others)
    # One interval, plus the poll's own run time (a python fake) and busctl's polling.
    check(dt < INTERVAL_MS / 1000 + 1.0, 'lost GPU seen after %.3f s (interval %d ms)' % (dt, INTERVAL_MS))
    print('lost GPU Unhealthy after %.0f ms (interval %d ms)' % (dt * 1000, INTERVAL_MS))

    t = time.monotonic()
    node.nvidia_set_lost([])
    wait(lambda: nvidia_gpus(node)[lost]['Health'] == 'Healthy', 'GPU 2 healthy again')
    dt = time.monotonic() - t
    check(nvidia_gpus(node)[lost]['HealthReason'] == '', 'reason cleared')
    # RECOVER_POLLS good polls: at least RECOVER_POLLS - 1 whole intervals after the first.
    check(dt >= (RECOVER_POLLS - 1) * INTERVAL_MS / 1000 * 0.9,
          'healthy again after %.3f s, before %d polls' % (dt, RECOVER_POLLS))
    print('recovered after %.0f ms (%d good polls, interval %d ms)' % (dt * 1000, RECOVER_POLLS, INTERVAL_MS))


def check_mig_rescan(node, farm):
    pid = node.daemons['probe'].proc.pid
    g = nvidia_gpus(node)[H100_MIXED]
    check([d[2] for d in g['MigDevices']] == ['3g.40gb', '2g.20gb', '1g.10gb', '1g.10gb'], 'before %r' % g['MigDevices'])
    path = '/io/kgpu/Probe1/gpu/' + ''.join(c if c.isalnum() else '_%02x' % ord(c) for c in H100_MIXED)
    mon = subprocess.Popen(['busctl', '--address=' + node.bus_address, 'monitor', '--json=short',
                            '--match=type=signal,interface=org.freedesktop.DBus.Properties,'
                            'member=PropertiesChanged,path=' + path],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)  # the monitor is attached
        retarget(farm, 'h100-mig-7x1g')
        # Rescan answers once the NVIDIA GPUs were read again.
        node.busctl('call', harness.PROBE_BUS, '/io/kgpu/Probe1', 'io.kgpu.Probe1', 'Rescan', json_out=False)
        g = nvidia_gpus(node)[H100_MIXED]
        check([d[2] for d in g['MigDevices']] == ['1g.10gb'] * 7, 'after %r' % g['MigDevices'])
        check(g['MigDevices'][6][1] == 'MIG-981c86e9-3607-57d7-9426-295347e4b925', 'MIG UUID %r' % g['MigDevices'][6])
        time.sleep(0.5)
    finally:
        mon.terminate()
        out = mon.communicate(timeout=5)[0].decode(errors='replace')
    check('"MigDevices"' in out, 'no PropertiesChanged with MigDevices: %r' % out[:2000])
    check(node.daemons['probe'].proc.pid == pid and node.daemons['probe'].alive(), 'probe restarted')
    names = cdi_names(node)
    check('0:6' in names and '0:7' not in names, 'CDI after rescan %r' % names)
    print('MIG layout change picked up by Rescan (PropertiesChanged MigDevices)')
    # systemctl reload (SIGHUP) reads them again too.
    retarget(farm, 'h100-mig-mixed')
    os.kill(pid, signal.SIGHUP)
    wait(lambda: [d[2] for d in nvidia_gpus(node)[H100_MIXED]['MigDevices']] ==
         ['3g.40gb', '2g.20gb', '1g.10gb', '1g.10gb'], 'MIG layout after reload')
    wait(lambda: cdi_names(node) is not None and '0:4' not in cdi_names(node), 'CDI after reload')
    check(node.daemons['probe'].proc.pid == pid and node.daemons['probe'].alive(), 'probe restarted')
    print('MIG layout change picked up by reload (SIGHUP)')


def check_fail_on_init_true():
    """A probe whose nvidia-smi fails at start exits non-zero with the reason."""
    with tempfile.NamedTemporaryFile('w', suffix='.yaml') as cfg:
        cfg.write('flags:\n  failOnInitError: true\n')
        cfg.flush()
        env = dict(os.environ, KGPU_NVIDIA_SMI=FAKE_SMI, KGPU_FAKE_NVIDIA_SCENARIO='no-driver',
                   KGPU_LOG_TARGET='stderr', KGPU_CONFIG=cfg.name,
                   DBUS_SYSTEM_BUS_ADDRESS='unix:path=/nonexistent/kgpu-test-bus')
        env.pop('KGPU_FAKE_NVIDIA_STATE', None)
        probe = os.path.join(harness.find_build_root(), 'daemons', 'probe', 'kgpu-probed')
        r = subprocess.run([probe], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    out = r.stdout.decode(errors='replace')
    check(r.returncode != 0, 'probe exited %d: %s' % (r.returncode, out))
    check('NVIDIA initialization failed' in out and "couldn't communicate with the NVIDIA driver" in out
          and 'failOnInitError' in out, 'error message: %s' % out)
    check('system bus' not in out, 'the probe got as far as the bus: %s' % out)
    print('failOnInitError=true: exit %d with %r' % (r.returncode, [l for l in out.splitlines() if 'NVIDIA' in l][-1]))


def check_fail_on_init_false():
    farm = scenario_farm('no-driver')
    try:
        with node_for('current', farm, fail_on_init=False) as node:
            check(nvidia_gpus(node) == {}, 'NVIDIA GPUs without a driver')
            check(sorted(probe_gpus(node)) == [harness.GPU_I915, harness.GPU_XE], 'Intel GPUs served')
            check(cdi_names(node) is None, 'no NVIDIA CDI spec')
            retarget(farm, 'l40s')
            node.busctl('call', harness.PROBE_BUS, '/io/kgpu/Probe1', 'io.kgpu.Probe1', 'Rescan', json_out=False)
            g = nvidia_gpus(node)
            check(list(g) == ['GPU-00000000-0000-0000-0000-000000000000'], 'after Rescan %r' % list(g))
            check(g['GPU-00000000-0000-0000-0000-000000000000']['Product'] == 'NVIDIA L40S', 'product')
            check(cdi_names(node) == ['0', 'GPU-00000000-0000-0000-0000-000000000000'], 'CDI %r' % cdi_names(node))
            # The driver goes away again: Rescan fails with nvidia-smi's words, the GPU stays
            # (unhealthy), nothing restarts.
            retarget(farm, 'no-driver')
            r = node.busctl('call', harness.PROBE_BUS, '/io/kgpu/Probe1', 'io.kgpu.Probe1', 'Rescan',
                            json_out=False, check=False)
            err = r.stderr.decode(errors='replace')
            check(r.returncode != 0 and 'NVIDIA driver' in err, 'Rescan answer %d %r' % (r.returncode, err))
            g = nvidia_gpus(node)['GPU-00000000-0000-0000-0000-000000000000']
            check(g['Health'] == 'Unhealthy' and g['HealthReason'].startswith('nvidia-smi-failed: '),
                  'health %r %r' % (g['Health'], g['HealthReason']))
            # Driver back, but no GPU any more: the object leaves (InterfacesRemoved), the
            # NVIDIA CDI spec goes, the Intel GPUs stay.
            mon = subprocess.Popen(['busctl', '--address=' + node.bus_address, 'monitor', '--json=short',
                                    '--match=type=signal,interface=org.freedesktop.DBus.ObjectManager,'
                                    'member=InterfacesRemoved'],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            try:
                time.sleep(0.5)
                retarget(farm, 'no-devices')
                node.busctl('call', harness.PROBE_BUS, '/io/kgpu/Probe1', 'io.kgpu.Probe1', 'Rescan', json_out=False)
                check(nvidia_gpus(node) == {}, 'NVIDIA GPUs left %r' % list(nvidia_gpus(node)))
                check(sorted(probe_gpus(node)) == [harness.GPU_I915, harness.GPU_XE], 'Intel GPUs kept')
                wait(lambda: cdi_names(node) is None, 'kgpu-nvidia.yaml removed')
                time.sleep(0.3)
            finally:
                mon.terminate()
                out = mon.communicate(timeout=5)[0].decode(errors='replace')
            check('GPU_2d00000000_2d0000' in out and 'io.kgpu.Gpu1' in out, 'no InterfacesRemoved: %r' % out[:2000])
        print('failOnInitError=false: no NVIDIA GPU, then found by Rescan, removed when gone')
    finally:
        shutil.rmtree(farm, ignore_errors=True)


def run(node):
    check_h100_mig(node)
    with node_for('8xh100-nvlink') as n:
        check_health(n)
    farm = scenario_farm('h100-mig-mixed')
    try:
        with node_for('current', farm) as n:
            check_mig_rescan(n, farm)
    finally:
        shutil.rmtree(farm, ignore_errors=True)
    check_fail_on_init_true()
    check_fail_on_init_false()


if __name__ == '__main__':
    harness.run_test(run, broker=False, kubelet=False, nvidia_scenario='h100-mig', resources=[],
                     config_extra='nvidia:\n  healthIntervalMs: 0\n')
