#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_nvidia_mps_probe.py — Probe1.SetMps over the real bus, kgpu-probed alone (no
# broker, so nothing else calls it) with the fake nvidia-smi / nvidia-cuda-mps-control
# (scenario l40s, one GPU, index 0).
#
# Asserts:
#  - uid nobody is refused SetMps by the bus policy (org.freedesktop.DBus.Error.AccessDenied)
#    and no tool runs; uid daemon on a bus that allows everything is refused by the probe
#    itself (io.kgpu.Error.AccessDenied);
#  - the probe's own policy (the config puts GPU 0 under sharing.mps): as the broker's
#    user, enabling MPS on a GPU the configuration does not name is io.kgpu.Error.Refused
#    and runs nothing, at start and after reloads (also time-slicing only, no MPS at
#    all); a reload that names it allows it; disabling is always allowed; a pinned limit
#    beyond the GPU's MemoryBytes (17592186044415M, MemoryBytes + 1) is InvalidArgs;
#  - root enables MPS: PropertiesChanged carries MpsState "starting" then "running";
#    Gpu1.MpsState "running", MpsPipeDirectory <runtime dir>/mps/<uuid>/pipe (0755);
#    the compute mode GPU 0 had before (Prohibited, set behind the probe's back) is read
#    and recorded in <runtime dir>/mps/<uuid>/compute-mode; the fake's state file shows
#    compute mode Exclusive_Process for GPU 0 and a daemon for that pipe directory with
#    CUDA_VISIBLE_DEVICES=<uuid> and the limits (2048M on device 0, 50 %), commands in
#    the documented order;
#  - the broker's user changes the limits of the running daemon (only the two set_default
#    lines run);
#  - errors: an unknown GPU (io.kgpu.Error.UnknownDevice), percentage 0 or 101 and less than
#    1 MiB (io.kgpu.Error.InvalidArgs), a MIG-enabled GPU (scenario h100-mig: InvalidArgs);
#  - health: a daemon that dies is restarted within one health interval with its limits;
#    dying again turns MpsState "failed" and the GPU Unhealthy "mps-failed"; SetMps brings
#    it back (running, Healthy);
#  - probe restart: the daemon process keeps running (same pid) and the new probe adopts
#    it (MpsState "running" with no SetMps, no second daemon, no compute mode change),
#    with the limits the earlier probe sent: a SetMps with them runs nothing;
#  - nvidia.mpsLauncher systemd on a bus without systemd: SetMps fails with MpsFailed
#    saying so, and nothing is started;
#  - a pod in the pipe directory: uid 65534 can create nothing there; what a root pod
#    with a read-write mount could leave (subdirectories, a file, another user's
#    directory, symlinks out, a FIFO) does not make the disable fail nor the GPU
#    Unhealthy, and nothing outside is touched;
#  - disable (after the probe restart): MpsState "" and MpsPipeDirectory "", compute mode
#    Prohibited again (`nvidia-smi -i 0 -c PROHIBITED`), daemon quit, directories
#    removed; the NVIDIA labels are in the feature file.
# Needs root (other uids on the bus).

import json
import os
import signal
import stat
import subprocess
import time

import dbus

import harness
from harness import check

GPU1 = 'io.kgpu.Gpu1'
L40S = 'GPU-00000000-0000-0000-0000-000000000000'
PROBE = (harness.PROBE_BUS, '/io/kgpu/Probe1', harness.PROBE_BUS)
GIB = 1 << 30
INTERVAL_MS = 300
BUS_DENIED = 'org.freedesktop.DBus.Error.AccessDenied'
KGPU_DENIED = 'io.kgpu.Error.AccessDenied'
ALLOW_ALL = ('  <policy context="mandatory">\n'
             '    <allow send_destination="*"/>\n'
             '  </policy>\n')
# The configuration that puts GPU <devices> under MPS: the probe enables MPS nowhere else.
MPS_SECTION = ('sharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n'
               '      devices: ["%s"]\n')
CONFIG = 'nvidia:\n  healthIntervalMs: %d\n  healthRecoverPolls: 1\n' % INTERVAL_MS + MPS_SECTION % '0'
NO_CHECKS = 'nvidia:\n  healthIntervalMs: 0\n'
REFUSED = 'io.kgpu.Error.Refused'
# The compute mode GPU 0 has before MPS (an operator's choice): restored after it.
MODE_BEFORE = 'Prohibited'


def call(address, method, sig='', args=(), timeout=20):
    """One Probe1 call; returns ('ok', reply) or ('error', name, message)."""
    bus = dbus.bus.BusConnection(address)
    try:
        r = bus.call_blocking(PROBE[0], PROBE[1], PROBE[2], method, sig, list(args), timeout=timeout)
        return ('ok', [] if r is None else [str(x) for x in r])
    except dbus.exceptions.DBusException as e:
        return ('error', e.get_dbus_name(), e.get_dbus_message() or '')
    finally:
        bus.close()


def call_as(node, user, method, sig='', args=()):
    """The same call from another uid (harness.Node.call_as: setpriv + dbus_call_as.py)."""
    if user is None:
        return call(node.bus_address, method, sig, args)
    return node.call_as(user, PROBE[0], PROBE[1], PROBE[2], method, sig, args)


def set_mps(node, enabled, pinned, pct, user=None, gpu=L40S):
    return call_as(node, user, 'SetMps', 'sbtu', [gpu, enabled, pinned, pct])


def expect_error(res, name, what, text=None):
    check(res[0] == 'error', '%s: expected %s, got a reply %r' % (what, name, res[1:][:1]))
    check(res[1] == name, '%s: expected %s, got %s: %s' % (what, name, res[1], res[2][:300]))
    if text is not None:
        check(text in res[2], '%s: message %r lacks %r' % (what, res[2][:300], text))


def gpu(node, gid=L40S):
    path = '/io/kgpu/Probe1/gpu/' + ''.join(c if c.isalnum() else '_%02x' % ord(c) for c in gid)
    r = node.busctl('call', harness.PROBE_BUS, path, 'org.freedesktop.DBus.Properties', 'GetAll', 's', GPU1)
    return {k: v['data'] for k, v in r['data'][0].items()}


def wait(fn, what, timeout=10, step=0.02):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError('timed out waiting for ' + what)
        time.sleep(step)


def pipe_dir(node):
    return os.path.join(node.tmp, 'run', 'probe', 'mps', L40S, 'pipe')


def daemon(node):
    return node.nvidia_state().get('mps', {}).get(pipe_dir(node), {})


def mps_commands(node, since):
    return [c for c in node.nvidia_commands()[since:]
            if c.startswith('nvidia-cuda-mps-control') or ' -c ' in c or ' --query-gpu=compute_mode ' in c]


def without_checks(cmds):
    """cmds without the health checks (a control tool run whose only line is get_server_list).
    The fake logs a run's environment when it starts and its stdin lines once it has read
    them, so a last entry with no stdin line yet is a run still in flight: a health check
    the probe's timer started while the caller was reading the log (a SetMps has finished
    its runs, stdin included, before it answers)."""
    out = []
    for c in cmds:
        if c == 'nvidia-cuda-mps-control < get_server_list' and out and out[-1].startswith('nvidia-cuda-mps-control ['):
            out.pop()
            continue
        out.append(c)
    if out and out[-1].startswith('nvidia-cuda-mps-control [') and out[-1].endswith(']'):
        out.pop()
    return out


def kill_daemon(node):
    """The fake daemon dies behind the probe's back (as a crash would); not logged."""
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipe_dir(node), **node.nvidia_env())
    env.pop('KGPU_FAKE_NVIDIA_LOG', None)
    tool = os.path.join(harness.FAKE_NVIDIA_DIR, 'nvidia-cuda-mps-control')
    subprocess.run([tool], input=b'quit\n', env=env, check=True, stdout=subprocess.DEVNULL, timeout=30)
    check(not daemon(node).get('running'), 'fake daemon still running after quit')


def monitor(node):
    path = '/io/kgpu/Probe1/gpu/' + ''.join(c if c.isalnum() else '_%02x' % ord(c) for c in L40S)
    mon = subprocess.Popen(['busctl', '--address=' + node.bus_address, 'monitor', '--json=short',
                            '--match=type=signal,interface=org.freedesktop.DBus.Properties,'
                            'member=PropertiesChanged,path=' + path],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # attached
    return mon


def mps_states_seen(mon):
    time.sleep(0.3)
    mon.terminate()
    out = mon.communicate(timeout=5)[0].decode(errors='replace')
    seen = []
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        payload = msg.get('payload', {}).get('data', [])
        if len(payload) >= 2 and 'MpsState' in payload[1]:
            seen.append(payload[1]['MpsState']['data'])
    return seen


def check_policy(node):
    n0 = len(node.nvidia_commands())
    expect_error(set_mps(node, True, 2 * GIB, 50, user='nobody'), BUS_DENIED, 'SetMps as nobody (policy)')
    check(mps_commands(node, n0) == [], 'a refused SetMps ran tools: %r' % mps_commands(node, n0))
    check(gpu(node)['MpsState'] == '', 'MpsState after a refused call')
    print('SetMps as nobody refused by the bus policy, nothing run')


def check_enable(node):
    n0 = len(node.nvidia_commands())
    mon = monitor(node)
    t0 = time.monotonic()
    r = set_mps(node, True, 2 * GIB, 50)
    t_enable = time.monotonic() - t0
    check(r[0] == 'ok', 'SetMps as root: %r' % (r,))
    seen = mps_states_seen(mon)
    check(seen == ['starting', 'running'], 'PropertiesChanged MpsState: %r' % seen)
    g = gpu(node)
    check(g['MpsState'] == 'running', 'MpsState %r' % g['MpsState'])
    check(g['MpsPipeDirectory'] == pipe_dir(node), 'MpsPipeDirectory %r' % g['MpsPipeDirectory'])
    for d in (pipe_dir(node), os.path.dirname(pipe_dir(node)) + '/log'):
        mode = stat.S_IMODE(os.stat(d).st_mode)
        check(mode == 0o755, '%s mode %o' % (d, mode))
    st = node.nvidia_state()
    check(st.get('compute_mode', {}).get('0') == 'Exclusive_Process', 'compute mode %r' % st.get('compute_mode'))
    record = os.path.join(os.path.dirname(pipe_dir(node)), 'compute-mode')
    with open(record) as f:
        check(f.read() == MODE_BEFORE.upper() + '\n', 'the mode before MPS is not recorded in %s' % record)
    check(stat.S_IMODE(os.stat(record).st_mode) == 0o644 and os.stat(record).st_uid == 0, '%s mode' % record)
    dm = daemon(node)
    check(dm.get('running') is True and dm.get('visible') == L40S, 'daemon %r' % dm)
    check(dm.get('pinned_mem_limit') == {'0': '2048M'} and dm.get('active_thread_percentage') == '50.0',
          'limits %r' % dm)
    ctl = '[CUDA_MPS_PIPE_DIRECTORY=%s CUDA_VISIBLE_DEVICES=%s]' % (pipe_dir(node), L40S)
    want = ['nvidia-smi -i 0 --query-gpu=compute_mode --format=csv,noheader',
            'nvidia-smi -i 0 -c EXCLUSIVE_PROCESS',
            'nvidia-cuda-mps-control ' + ctl,
            'nvidia-cuda-mps-control < get_server_list',
            'nvidia-cuda-mps-control -d ' + ctl,
            'nvidia-cuda-mps-control ' + ctl,
            'nvidia-cuda-mps-control < set_default_device_pinned_mem_limit 0 2048M',
            'nvidia-cuda-mps-control < set_default_active_thread_percentage 50']
    got = mps_commands(node, n0)
    # The health checks that may have run since are left out after the start's own.
    got = got[:len(want)] + without_checks(got[len(want):])
    check(got == want, 'commands:\n%s\nwanted:\n%s' % ('\n'.join(got), '\n'.join(want)))
    t0 = time.monotonic()
    check(set_mps(node, True, 2 * GIB, 50)[0] == 'ok', 'SetMps with the same limits')
    t_same = time.monotonic() - t0
    print('SetMps(true) as root: the mode before (%s) recorded, EXCLUSIVE_PROCESS, daemon with its limits, '
          'starting -> running (%.0f ms with the fake tools: 6 tool runs; same limits again: %.1f ms, nothing run)'
          % (MODE_BEFORE, t_enable * 1000, t_same * 1000))

    # The broker's user changes the limits: sent to the running daemon only.
    n0 = len(node.nvidia_commands())
    r = set_mps(node, True, 4 * GIB, 25, user=harness.BROKER_USER)
    check(r[0] == 'ok', 'SetMps as %s: %r' % (harness.BROKER_USER, r))
    got = without_checks(mps_commands(node, n0))
    check(got == ['nvidia-cuda-mps-control ' + ctl,
                  'nvidia-cuda-mps-control < set_default_device_pinned_mem_limit 0 4096M',
                  'nvidia-cuda-mps-control < set_default_active_thread_percentage 25'], 'commands %r' % got)
    dm = daemon(node)
    check(dm.get('pinned_mem_limit') == {'0': '4096M'} and dm.get('active_thread_percentage') == '25.0',
          'new limits %r' % dm)
    print('SetMps with other limits as %s: only the limits sent' % harness.BROKER_USER)


def check_errors(node):
    expect_error(set_mps(node, True, GIB, 50, gpu='GPU-ffffffff-ffff-ffff-ffff-ffffffffffff'),
                 'io.kgpu.Error.UnknownDevice', 'unknown GPU')
    expect_error(set_mps(node, True, GIB, 50, gpu='\u00e9' * 200), 'io.kgpu.Error.UnknownDevice', 'long id')
    expect_error(set_mps(node, True, GIB, 50, gpu='0000:03:00.0'), 'io.kgpu.Error.UnknownDevice', 'an Intel GPU')
    expect_error(call(node.bus_address, 'SetMps', 'sb', [L40S, True]), 'org.freedesktop.DBus.Error.InvalidArgs',
                 'wrong signature')
    expect_error(set_mps(node, True, GIB, 0), 'io.kgpu.Error.InvalidArgs', 'percentage 0', '1..100')
    expect_error(set_mps(node, True, GIB, 101), 'io.kgpu.Error.InvalidArgs', 'percentage 101', '1..100')
    expect_error(set_mps(node, True, 1000, 50), 'io.kgpu.Error.InvalidArgs', 'memory < 1 MiB', '1 MiB')
    # Limits beyond the GPU, as the broker's user: the GPU's memory is the most a slice pins.
    n0 = len(node.nvidia_commands())
    mem = int(gpu(node)['MemoryBytes'])
    check(mem == 46068 << 20, 'MemoryBytes %d' % mem)
    for pinned in (17592186044415 << 20, mem + 1):
        expect_error(set_mps(node, True, pinned, 50, user=harness.BROKER_USER), 'io.kgpu.Error.InvalidArgs',
                     'pinned memory of %d bytes' % pinned, 'more than the %d bytes of GPU' % mem)
    check(without_checks(mps_commands(node, n0)) == [], 'refused limits ran %r' % mps_commands(node, n0))
    check(daemon(node).get('pinned_mem_limit') == {'0': '4096M'}, 'limits changed: %r' % daemon(node))
    check(gpu(node)['MpsState'] == 'running', 'refused calls changed MpsState')
    print('SetMps errors: UnknownDevice, InvalidArgs (also a pinned limit beyond the GPU\'s memory, '
          'as %s)' % harness.BROKER_USER)


def check_health(node):
    n0 = len(node.nvidia_commands())
    kill_daemon(node)
    # Restarted within one interval (plus the tools' own time), same limits (both sent:
    # the memory limit and then the percentage, two runs of the control tool).
    wait(lambda: (lambda d: d.get('running') and d.get('pinned_mem_limit') and
                  d.get('active_thread_percentage') != '100.0')(daemon(node)),
         'the daemon restarted with limits', timeout=INTERVAL_MS / 1000 * 2 + 5)
    dm = daemon(node)
    check(dm.get('pinned_mem_limit') == {'0': '4096M'} and dm.get('active_thread_percentage') == '25.0',
          'limits after the restart %r' % dm)
    wait(lambda: any(c.endswith('set_default_active_thread_percentage 25') for c in mps_commands(node, n0)),
         'the limits sent again')
    check(any(c.startswith('nvidia-cuda-mps-control -d ') for c in mps_commands(node, n0)), 'no -d')
    g = gpu(node)
    check(g['MpsState'] == 'running' and g['Health'] == 'Healthy', 'after the restart: %s %s' % (g['MpsState'], g['Health']))
    print('dead MPS daemon restarted with its limits')

    kill_daemon(node)
    g = wait(lambda: (lambda x: x if x['MpsState'] == 'failed' else None)(gpu(node)), 'MpsState failed',
             timeout=INTERVAL_MS / 1000 * 2 + 5)
    check(g['Health'] == 'Unhealthy' and g['HealthReason'] == 'mps-failed',
          'health %s %s' % (g['Health'], g['HealthReason']))
    check(not daemon(node).get('running'), 'failed, yet the daemon runs')
    print('dead again: MpsState failed, Unhealthy mps-failed')

    r = set_mps(node, True, 2 * GIB, 50)
    check(r[0] == 'ok', 'SetMps after failed: %r' % (r,))
    g = gpu(node)
    check(g['MpsState'] == 'running' and g['Health'] == 'Healthy' and g['HealthReason'] == '',
          'after SetMps: %s %s %s' % (g['MpsState'], g['Health'], g['HealthReason']))
    print('SetMps after failed: running and Healthy again')


def daemon_alive(node):
    pid = daemon(node).get('pid')
    return pid and os.path.exists('/proc/%d' % pid)


def check_probe_restart(node):
    n0 = len(node.nvidia_commands())
    pid = daemon(node).get('pid')
    check(daemon_alive(node), 'no MPS daemon process before the restart: %r' % daemon(node))
    node.daemons['probe'].stop()
    check(daemon_alive(node) and daemon(node).get('pid') == pid,
          'the MPS daemon did not survive the probe: %r' % daemon(node))
    node.start_probe()
    node.wait_bus_name(harness.PROBE_BUS, 10, node.daemons['probe'])
    # Adopted without any SetMps: running again on the Gpu1 object.
    g = wait(lambda: (lambda x: x if x.get('MpsState') == 'running' else None)(gpu(node)),
             'MpsState running after the probe restart')
    check(g['MpsPipeDirectory'] == pipe_dir(node), 'MpsPipeDirectory %r' % g['MpsPipeDirectory'])
    got = mps_commands(node, n0)
    check(not any(' -d ' in c for c in got) and not any(' -c ' in c for c in got),
          'a second daemon or a mode change after the restart: %r' % got)
    check(daemon(node).get('pinned_mem_limit') == {'0': '2048M'}, 'limits lost %r' % daemon(node))
    check(daemon_alive(node) and daemon(node).get('pid') == pid, 'another daemon after the restart: %r (was %d)'
          % (daemon(node), pid))
    # The limits the earlier probe sent are known (its limits file names this daemon):
    # the broker's SetMps with them runs nothing; other limits are sent.
    n1 = len(node.nvidia_commands())
    check(set_mps(node, True, 2 * GIB, 50)[0] == 'ok', 'SetMps with the limits in force after the restart')
    got = without_checks(mps_commands(node, n1))
    check(got == [], 'SetMps with the limits in force ran %r' % got)
    print('probe restart: the MPS daemon (pid %d) kept running and was adopted with its limits '
          '(MpsState running, no SetMps, the same limits run nothing)' % pid)


def play_pod(node):
    """What a pod could leave in the pipe directory. Its non-root users: nothing (0755
    root; the broker mounts it read-only anyway). A root pod with a read-write mount, as
    the broker gave before: a subdirectory with files, deeper ones of another user, a
    symlink out of the directory, a FIFO. Returns a file outside that must survive."""
    pipe = pipe_dir(node)
    p = subprocess.run(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', 'mkdir',
                        os.path.join(pipe, 'sub')], capture_output=True, text=True, timeout=10)
    check(p.returncode != 0 and 'Permission denied' in p.stderr and not os.path.exists(os.path.join(pipe, 'sub')),
          'uid 65534 could create a directory in the pipe directory: %r' % (p,))
    victim = os.path.join(node.tmp, 'victim')
    with open(victim, 'w') as f:
        f.write('keep\n')
    os.makedirs(os.path.join(pipe, 'sub', 'deeper'))
    with open(os.path.join(pipe, 'sub', 'file'), 'w') as f:
        f.write('x' * 4096)
    os.symlink(victim, os.path.join(pipe, 'sub', 'deeper', 'link'))
    os.symlink(node.tmp, os.path.join(pipe, 'dirlink'))
    os.mkfifo(os.path.join(pipe, 'fifo'))
    os.chown(os.path.join(pipe, 'sub', 'deeper'), 65534, 65534)
    return victim


def check_disable(node):
    victim = play_pod(node)
    n0 = len(node.nvidia_commands())
    r = set_mps(node, False, 0, 0, user=harness.BROKER_USER)
    check(r[0] == 'ok', 'SetMps(false) with a pod\'s files in the pipe directory: %r' % (r,))
    g = gpu(node)
    check(g['MpsState'] == '' and g['MpsPipeDirectory'] == '', 'after disable %r %r' % (g['MpsState'], g['MpsPipeDirectory']))
    check(g['Health'] == 'Healthy' and g['HealthReason'] == '', 'health after disable %s %s' % (g['Health'],
                                                                                                g['HealthReason']))
    with open(victim) as f:
        check(f.read() == 'keep\n', 'a file outside the pipe directory changed')
    check(os.path.isdir(node.tmp), 'the directory a symlink pointed to is gone')
    st = node.nvidia_state()
    # The mode found before MPS, recorded by the probe before the restart, not Default.
    check(st.get('compute_mode', {}).get('0') == MODE_BEFORE, 'compute mode %r' % st.get('compute_mode'))
    check(daemon(node).get('running') is False, 'daemon %r' % daemon(node))
    check(not os.path.exists(os.path.dirname(pipe_dir(node))), 'directories left')
    got = without_checks(mps_commands(node, n0))
    check(got[1:] == ['nvidia-cuda-mps-control < quit', 'nvidia-smi -i 0 -c ' + MODE_BEFORE.upper()],
          'commands %r' % got)
    # Idempotent.
    n0 = len(node.nvidia_commands())
    check(set_mps(node, False, 0, 0)[0] == 'ok', 'second SetMps(false)')
    check(mps_commands(node, n0) == [], 'second disable ran %r' % mps_commands(node, n0))
    print('SetMps(false) with a root pod\'s files in the pipe directory (uid 65534 could make none): quit, '
          'compute mode %s again (recorded before the probe restart), directories removed, nothing outside '
          'touched, MpsState "", Healthy' % MODE_BEFORE)


def check_labels(node):
    with open(node.feature_file) as f:
        lines = f.read().splitlines()
    # Under sharing.mps (2 replicas): GFD's shared product name, replicas and strategy.
    for want in ('nvidia.com/gpu.product=NVIDIA-L40S-SHARED', 'nvidia.com/gpu.family=ada-lovelace',
                 'nvidia.com/gpu.count=1', 'nvidia.com/gpu.memory=46068', 'nvidia.com/mig.capable=false',
                 'nvidia.com/mps.capable=true', 'nvidia.com/gpu.replicas=2', 'nvidia.com/gpu.sharing-strategy=mps'):
        check(want in lines, '%s missing from the feature file: %r' % (want, lines))
    print('NVIDIA labels in the feature file')


def check_mig_gpu():
    with harness.Node(broker=False, kubelet=False, nvidia_scenario='h100-mig', resources=[],
                      config_extra=NO_CHECKS + MPS_SECTION % '0') as n:
        wait(lambda: gpu(n).get('MigMode') == 'Enabled', 'the H100 with MIG')
        expect_error(set_mps(n, True, GIB, 50), 'io.kgpu.Error.InvalidArgs', 'MIG GPU', 'MIG')
        check(mps_commands(n, 0) == [], 'MIG GPU: tools ran %r' % mps_commands(n, 0))
    print('SetMps on a MIG-enabled GPU: InvalidArgs, nothing run')


def reload_probe(n, extra):
    n.write_config_extra(extra)
    before = n.daemons['probe'].log_text().count('Reloaded the configuration')
    n.daemons['probe'].send_signal(signal.SIGHUP)
    wait(lambda: n.daemons['probe'].log_text().count('Reloaded the configuration') > before, 'the probe reloaded')


def check_scope():
    # The probe's own policy: the broker's user cannot put a GPU under MPS that the
    # configuration (the probe reads the same kgpu.yaml) does not, at start and after a
    # reload; turning MPS off is always allowed.
    with harness.Node(broker=False, kubelet=False, nvidia_scenario='l40s', resources=[],
                      config_extra=NO_CHECKS + MPS_SECTION % '1') as n:
        wait(lambda: gpu(n).get('Vendor') == 'nvidia', 'the L40S')
        expect_error(set_mps(n, True, GIB, 50, user=harness.BROKER_USER), REFUSED, 'GPU 0 outside sharing.mps',
                     'GPU %s is not under MPS in the configuration' % L40S)
        check(mps_commands(n, 0) == [], 'a refused SetMps ran %r' % mps_commands(n, 0))
        check(gpu(n)['MpsState'] == '' and n.nvidia_state().get('compute_mode') is None,
              'refused, yet %r %r' % (gpu(n)['MpsState'], n.nvidia_state()))
        check('Refused SetMps for GPU %s' % L40S in n.daemons['probe'].log_text(), 'the refusal is not logged')
        check(set_mps(n, False, 0, 0, user=harness.BROKER_USER)[0] == 'ok', 'SetMps(false) outside sharing.mps')
        # No MPS section at all (time-slicing instead): refused as well.
        reload_probe(n, NO_CHECKS + MPS_SECTION.replace('mps:', 'timeSlicing:') % '0')
        expect_error(set_mps(n, True, GIB, 50, user=harness.BROKER_USER), REFUSED, 'time-slicing only')
        # Reloaded with GPU 0 (by UUID) under MPS: allowed.
        reload_probe(n, NO_CHECKS + MPS_SECTION % L40S)
        r = set_mps(n, True, GIB, 50, user=harness.BROKER_USER)
        check(r[0] == 'ok', 'SetMps after the reload put GPU 0 under MPS: %r' % (r,))
        # Out of the configuration again: no new limits, but off is allowed.
        reload_probe(n, NO_CHECKS)
        expect_error(set_mps(n, True, 2 * GIB, 50, user=harness.BROKER_USER), REFUSED, 'after a reload without MPS')
        check(set_mps(n, False, 0, 0, user=harness.BROKER_USER)[0] == 'ok', 'SetMps(false) after the reload')
        check(n.nvidia_state().get('compute_mode', {}).get('0') == 'Default', 'compute mode %r' % n.nvidia_state())
    print('SetMps as %s on a GPU outside sharing.mps: Refused, nothing run (at start, and after reloads that '
          'take it out again); allowed after a reload puts it in; SetMps(false) always' % harness.BROKER_USER)


def check_daemon_refuses():
    with harness.Node(broker=False, kubelet=False, nvidia_scenario='l40s', resources=[],
                      bus_policy=ALLOW_ALL, config_extra='nvidia:\n  healthIntervalMs: 0\n') as n:
        wait(lambda: gpu(n).get('Vendor') == 'nvidia', 'the L40S')
        expect_error(set_mps(n, True, GIB, 50, user='daemon'), KGPU_DENIED, 'SetMps as daemon (probe check)')
        check(mps_commands(n, 0) == [], 'refused by the probe: tools ran %r' % mps_commands(n, 0))
    print('SetMps as daemon on an allow-all bus: refused by the probe itself')


def check_systemd_launcher_without_systemd():
    # Forced to the systemd launcher on a bus where nobody owns org.freedesktop.systemd1
    # (the test's private bus): a clear MpsFailed, no daemon started.
    with harness.Node(broker=False, kubelet=False, nvidia_scenario='l40s', resources=[],
                      config_extra=NO_CHECKS + '  mpsLauncher: systemd\n' + MPS_SECTION % '0') as n:
        wait(lambda: gpu(n).get('Vendor') == 'nvidia', 'the L40S')
        expect_error(set_mps(n, True, GIB, 50), 'io.kgpu.Error.MpsFailed', 'systemd launcher without systemd',
                     'systemd does not answer on the system bus')
        cmds = mps_commands(n, 0)
        check(not any(' -d ' in c for c in cmds), 'a daemon was started: %r' % cmds)
        check(gpu(n)['MpsState'] == 'failed', 'MpsState %r' % gpu(n)['MpsState'])
        check(any('nvidia.mpsLauncher is systemd, but systemd does not own its name' in line
                  for line in n.daemons['probe'].log_text().splitlines()), 'no warning in the log')
    print('nvidia.mpsLauncher systemd without systemd on the bus: MpsFailed naming it, nothing started')


def run(node):
    wait(lambda: gpu(node).get('Vendor') == 'nvidia', 'the L40S')
    harness.fake_nvidia.put_compute_mode(node.tmp, 0, MODE_BEFORE)
    check_policy(node)
    check_enable(node)
    check_errors(node)
    check_health(node)
    check_probe_restart(node)
    check_disable(node)
    check_labels(node)
    check_mig_gpu()
    check_scope()
    check_daemon_refuses()
    check_systemd_launcher_without_systemd()


if __name__ == '__main__':
    harness.run_test(run, need_root=True, broker=False, kubelet=False, nvidia_scenario='l40s', resources=[],
                     config_extra=CONFIG)
