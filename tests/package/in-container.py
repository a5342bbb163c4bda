#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# in-container.py — the install test's steps, run inside the booted bookworm container.
#
# Contract: started by kgpu-pkgtest.service (see test-install.sh) with systemd as PID 1,
# the payload read-only at /kgpu-test and a writable /kgpu-results. Makes the kubelet's
# root and pod-resources/ directories as a node has them, installs the .deb with dpkg,
# then checks, in order: users from sysusers.d, the kubelet's directories untouched by
# the package (mode, owner, ACL), the three units active after `systemctl start
# kgpu.target`, grpcd and the broker running as their users with no capabilities,
# busctl introspect/tree answering, denial of mutating calls from `nobody`, no bus
# activation (a stopped daemon stays stopped whoever calls its name), the probe's
# label file and CDI spec at the default places, the kubelet simulator (kubelet_sim.py
# on grpcio) run as a systemd unit with the default UMask as the kubelet runs (it makes
# device-plugins/ 0750 after kgpu started; sockets only root can reach) and kgpu
# registering both resources of the two-gpus testbed through the root probe, an
# Allocate answer, registration again after that unit restarts,
# kgpuctl, allocations kept across `systemctl reload` and `systemctl restart
# kgpu-brokerd`, `systemd-analyze verify` with nothing on stderr and the exposure
# thresholds; `systemctl reload kgpu.target` reloading all three daemons and a changed
# intel.pciGroupingLevel reaching the label file; MPS control daemons outliving a probe
# restart (their own section); `apt-get remove kgpu` (then purge) taking the label file
# and kgpu's CDI specs, keeping other vendors' files and leaving the kubelet's
# directories exactly as they were; kgpu-clusterd (in_container_cluster.py): stopped by
# itself without credentials, then started against the API server simulator with a
# kubeconfig and client certificate, as kgpu-cluster, a node label reaching the broker.
# Prints one line per check; exit status 0 only if
# every check passed. The probe runs under umockdev through a unit drop-in installed
# here (test only).

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import in_container_cluster  # noqa: E402

PAYLOAD = '/kgpu-test'
PLUGIN_DIR = '/var/lib/kubelet/device-plugins'
POD_RESOURCES = '/var/lib/kubelet/pod-resources/kubelet.sock'
# The kubelet's directories a node has before kgpu comes: its root as the kubelet makes
# it (0750) and one an operator opened (0755). device-plugins/ is made later, by the
# kubelet simulator's unit, after kgpu started.
KUBELET_DIRS = {'/var/lib/kubelet': 0o750, os.path.dirname(POD_RESOURCES): 0o755}
FEATURE_FILE = '/etc/kubernetes/node-feature-discovery/features.d/kgpu'
CDI_DIR = '/var/run/cdi'
KGPU_CDI_SPECS = ('kgpu-intel-gpu.json', 'kgpu-nvidia.yaml')
UNITS = ['kgpu-probed.service', 'kgpu-brokerd.service', 'kgpu-grpcd.service']
THRESHOLDS = {'kgpu-grpcd.service': 1.5, 'kgpu-brokerd.service': 1.5, 'kgpu-probed.service': 4.0,
              'kgpu-clusterd.service': 2.0}
# Layout two-gpus: resource -> GPU id.
TWO_GPUS = {'gpu.intel.com/i915': '0000:03:00.0', 'gpu.intel.com/xe': '0000:04:00.0'}
WATCHDOG_SEC = 2

failures = []
T0 = time.monotonic()


def log(msg):
    print('[%6.2f] %s' % (time.monotonic() - T0, msg), flush=True)


def check(cond, what, detail=''):
    log('%s: %s%s' % ('ok  ' if cond else 'FAIL', what, '' if cond or not detail else ' -- %s' % detail))
    if not cond:
        failures.append(what)
    return cond


def sh(*argv, check_rc=True, user=None, timeout=60, env=None):
    if user:
        argv = ('setpriv', '--reuid=' + user, '--regid=nogroup', '--clear-groups') + argv
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if check_rc and p.returncode != 0:
        raise RuntimeError('%s failed (%d): %s%s' % (' '.join(argv), p.returncode, p.stdout, p.stderr))
    return p


def wait(fn, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            return v
        time.sleep(0.1)


def unit_prop(unit, prop):
    return sh('systemctl', 'show', '-P', prop, unit).stdout.strip()


def proc_status(pid):
    out = {}
    with open('/proc/%s/status' % pid) as f:
        for line in f:
            k, _, v = line.partition(':')
            out[k] = v.strip()
    return out


def install_testbed():
    """The simulated GPUs: kgpu-testbed as a service, the probe under its preload."""
    os.makedirs('/etc/systemd/system/kgpu-probed.service.d', exist_ok=True)
    shutil.copy(os.path.join(PAYLOAD, 'kgpu-testbed.service'), '/etc/systemd/system/')
    shutil.copy(os.path.join(PAYLOAD, 'probe-testbed.conf'),
                '/etc/systemd/system/kgpu-probed.service.d/testbed.conf')
    # A short watchdog, so that a daemon that does not ping is killed within the test.
    for u in UNITS:
        os.makedirs('/etc/systemd/system/%s.d' % u, exist_ok=True)
        with open('/etc/systemd/system/%s.d/watchdog.conf' % u, 'w') as f:
            f.write('[Service]\nWatchdogSec=%ds\n' % WATCHDOG_SEC)


def sim_events():
    try:
        with open('/run/kubelet-sim/events') as f:
            return [json.loads(l) for l in f if l.strip()]
    except FileNotFoundError:
        return []


def sim_registered(pid):
    """The resources registered with the simulator process `pid`."""
    return {e['resource'] for e in sim_events() if e['what'] == 'register' and str(e['pid']) == str(pid)}


def allocations():
    p = sh('kgpuctl', '--json', 'allocations', check_rc=False)
    if p.returncode != 0:
        return None
    return sorted(json.dumps(a, sort_keys=True) for a in json.loads(p.stdout))


def make_kubelet_dirs():
    """The kubelet's directories, made before kgpu is installed (as the kubelet does)."""
    for d, mode in KUBELET_DIRS.items():
        os.makedirs(d, exist_ok=True)
        os.chmod(d, mode)


def kubelet_dirs_state(dirs=KUBELET_DIRS):
    """Mode, owner and full ACL (getfacl) of each of the kubelet's directories."""
    out = {}
    for d in dirs:
        st = os.stat(d)
        acl = sh('getfacl', '-cpE', d, check_rc=False).stdout
        out[d] = (oct(st.st_mode & 0o7777), st.st_uid, st.st_gid, acl)
    return out


def check_kubelet_dirs(before, when):
    now = kubelet_dirs_state(before)
    for d in before:
        check(now[d] == before[d], '%s %s as the kubelet made it (mode, owner, ACL)' % (when, d),
              '%r -> %r' % (before[d], now[d]))


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def journal_cursor():
    p = sh('journalctl', '--no-pager', '-n', '0', '--show-cursor', check_rc=False)
    for line in p.stdout.splitlines():
        if line.startswith('-- cursor: '):
            return line[len('-- cursor: '):]
    return None


def unit_log_since(unit, cursor):
    argv = ['journalctl', '--no-pager', '-o', 'cat', '-u', unit]
    if cursor:
        argv += ['--after-cursor', cursor]
    return sh(*argv, check_rc=False).stdout


def check_reload_target():
    """One command reloads all three daemons; a probe key reaches the label file."""
    before = read(FEATURE_FILE)
    check(before is not None and 'gpu.intel.com/pci-groups' not in before,
          'label file without pci-groups before the change', repr(before))
    with open('/etc/kgpu/kgpu.yaml') as f:
        original = f.read()
    pids = {u: unit_prop(u, 'MainPID') for u in UNITS}
    cursor = journal_cursor()
    with open('/etc/kgpu/kgpu.yaml', 'a') as f:
        f.write('\nintel:\n  pciGroupingLevel: 2\n')
    p = sh('systemctl', 'reload', 'kgpu.target', check_rc=False, timeout=60)
    check(p.returncode == 0, 'systemctl reload kgpu.target', p.stderr)
    after = wait(lambda: (read(FEATURE_FILE) or '') if 'gpu.intel.com/pci-groups=' in (read(FEATURE_FILE) or '')
                 else None, 10, 'pci-groups label')
    check(bool(after), 'intel.pciGroupingLevel 2 + reload of kgpu.target: the label file has pci-groups',
          repr(read(FEATURE_FILE)))
    for u in UNITS:
        reloaded = wait(lambda: 'Reloaded the configuration' in unit_log_since(u, cursor), 10, u)
        check(reloaded and unit_prop(u, 'MainPID') == pids[u] and unit_prop(u, 'ActiveState') == 'active',
              '%s reloaded by systemctl reload kgpu.target (same process)' % u, unit_log_since(u, cursor)[-600:])
    with open('/etc/kgpu/kgpu.yaml', 'w') as f:
        f.write(original)
    sh('systemctl', 'reload', 'kgpu.target', check_rc=False, timeout=60)
    # The Intel labels (the NVIDIA ones of the MPS section's fake GPU follow its MPS state).
    intel = lambda text: [l for l in (text or '').splitlines() if l.startswith('gpu.intel.com/')]
    check(wait(lambda: intel(read(FEATURE_FILE)) == intel(before), 10, 'labels back'),
          'configuration restored + reload: the Intel labels as before', repr(read(FEATURE_FILE)))


def check_remove(kubelet_before):
    """Removing the package takes kgpu's node outputs and nothing else."""
    spec = os.path.join(CDI_DIR, KGPU_CDI_SPECS[0])
    check(read(FEATURE_FILE) is not None and os.path.exists(spec),
          'before the removal: %s and %s are there' % (FEATURE_FILE, spec))
    others = [os.path.join(os.path.dirname(FEATURE_FILE), 'other-labeler'), os.path.join(CDI_DIR, 'other-vendor.yaml')]
    for o in others:
        with open(o, 'w') as f:
            f.write('vendor.example.com/thing=1\n' if 'labeler' in o else 'cdiVersion: "0.5.0"\n')
    if shutil.which('apt-get'):
        p = sh('apt-get', 'remove', '-y', '-q', 'kgpu', check_rc=False, timeout=120,
               env=dict(os.environ, DEBIAN_FRONTEND='noninteractive'))
        what = 'apt-get remove kgpu'
    else:
        p = sh('dpkg', '-r', 'kgpu', check_rc=False, timeout=120)
        what = 'dpkg -r kgpu'
    if not check(p.returncode == 0, what, p.stdout + p.stderr):
        return
    for u in UNITS:
        check(unit_prop(u, 'ActiveState') in ('inactive', ''), 'after %s: %s stopped' % (what, u))
    check(not os.path.exists(FEATURE_FILE), 'after %s: no %s' % (what, FEATURE_FILE), p.stdout + p.stderr)
    left = [f for f in KGPU_CDI_SPECS if os.path.exists(os.path.join(CDI_DIR, f))]
    check(not left, 'after %s: no kgpu CDI spec in %s' % (what, CDI_DIR), repr(left))
    check(all(os.path.exists(o) for o in others), 'after %s: other vendors\' label file and CDI spec kept' % what)
    check_kubelet_dirs(kubelet_before, 'after %s:' % what)
    p = sh('dpkg', '--purge', 'kgpu', check_rc=False, timeout=120)
    check(p.returncode == 0 and not os.path.exists('/var/lib/kgpu'), 'dpkg --purge kgpu (state directory gone)',
          p.stdout + p.stderr)
    check_kubelet_dirs(kubelet_before, 'after the purge:')


# --- MPS daemons outlive the probe ------------------------------------------------------
# The fake nvidia-smi and nvidia-cuda-mps-control (payload fake-nvidia/, replaying
# data/nvidia, scenario l40s: one GPU) stand in for the driver: the probe runs them
# through a drop-in, kgpu-mps@.service through another (the fake's own variables only:
# the unit's CUDA_* and tool path come from the EnvironmentFile the probe writes). The
# broker gets the MPS slices of test_nvidia_mps.py. Checked: a unit that fails to start
# is MpsFailed with the job's result (a drop-in with ExecStartPre=/bin/false, then
# removed); the control daemon runs in its own unit, not in the probe's cgroup;
# `systemctl restart kgpu-probed` (and reload) leaves that process alone (same pid, unit
# not restarted), the new probe adopts it (MpsState running, no second -d, no limits
# sent again) and Allocate of an MPS slice is still answered with the pipe directory;
# `systemctl stop` of the unit quits the daemon (ExecStop=) and the probe's health check
# starts it again with its limits; taking MPS out of the config stops the unit. The
# probe holds no capabilities for any of this.
MPS_GPU = 'GPU-00000000-0000-0000-0000-000000000000'   # the L40S of scenario l40s
MPS_UNIT = 'kgpu-mps@%s.service' % MPS_GPU
MPS_RES = 'nvidia.com/gpu-2gb'
FAKE_DIR = '/run/kgpu-fake-nvidia'
MPS_CONFIG = """version: v1
flags:
  migStrategy: none
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      rename: nvidia.com/gpu-2gb
      memoryGB: 2
      replicas: 2
    - name: nvidia.com/gpu
      rename: nvidia.com/gpu-4gb
      memoryGB: 4
      replicas: 1
"""


def mps_gpu_prop(name):
    path = '/io/kgpu/Probe1/gpu/' + ''.join(c if c.isalnum() else '_%02x' % ord(c) for c in MPS_GPU)
    p = sh('busctl', 'get-property', '--json=short', 'io.kgpu.Probe1', path, 'io.kgpu.Gpu1', name, check_rc=False)
    return json.loads(p.stdout)['data'] if p.returncode == 0 else None


def mps_daemon_pid():
    try:
        with open('/run/kgpu/mps/%s/pipe/nvidia-cuda-mps-control.pid' % MPS_GPU) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def mps_fake_commands():
    try:
        with open(os.path.join(FAKE_DIR, 'log')) as f:
            return f.read().splitlines()
    except OSError:
        return []


def broker_mps_answers():
    """How often the broker logged the probe's answer to SetMps for the GPU."""
    return sh('journalctl', '--no-pager', '-o', 'cat', '-u', 'kgpu-brokerd.service',
              check_rc=False).stdout.count('MPS on GPU %s: running' % MPS_GPU)


def check_mps_survives_probe_restart():
    fake = os.path.join(PAYLOAD, 'fake-nvidia')
    os.makedirs(FAKE_DIR, exist_ok=True)
    fake_env = ('Environment=KGPU_FAKE_NVIDIA_SCENARIO=l40s KGPU_FAKE_NVIDIA_STATE=%s/state.json '
                'KGPU_FAKE_NVIDIA_LOG=%s/log\nReadWritePaths=%s\n' % (FAKE_DIR, FAKE_DIR, FAKE_DIR))
    with open('/etc/systemd/system/kgpu-probed.service.d/fake-nvidia.conf', 'w') as f:
        f.write('[Service]\nEnvironment=KGPU_NVIDIA_SMI=%s/nvidia-smi KGPU_NVIDIA_MPS_CONTROL=%s/nvidia-cuda-mps-control\n'
                % (fake, fake) + fake_env)
    os.makedirs('/etc/systemd/system/kgpu-mps@.service.d', exist_ok=True)
    with open('/etc/systemd/system/kgpu-mps@.service.d/fake-nvidia.conf', 'w') as f:
        f.write('[Service]\n' + fake_env)
    # First the unit cannot start: the probe must read the job's result, not assume.
    failing = '/etc/systemd/system/kgpu-mps@.service.d/zz-fail.conf'
    with open(failing, 'w') as f:
        f.write('[Service]\nExecStartPre=/bin/false\n')
    with open('/etc/kgpu/kgpu.yaml') as f:
        config = f.read()
    with open('/etc/kgpu/kgpu.yaml', 'w') as f:
        f.write(MPS_CONFIG)
    sh('systemctl', 'daemon-reload')
    p = sh('systemctl', 'restart', 'kgpu-probed.service', check_rc=False, timeout=60)
    check(p.returncode == 0, 'kgpu-probed restarted with the fake NVIDIA tools', p.stderr)
    sh('systemctl', 'reload', 'kgpu-brokerd.service', check_rc=False, timeout=60)

    sys.path.insert(0, PAYLOAD)
    os.environ['KGPU_PROTO_DIR'] = os.path.join(PAYLOAD, 'proto')
    import kubelet_sim
    sim = kubelet_sim.KubeletSim(PLUGIN_DIR, POD_RESOURCES)
    sim.start()
    try:
        try:
            sim.wait_registrations([MPS_RES], timeout=30)
        except TimeoutError as e:
            check(False, 'kubelet simulator got Register for %s' % MPS_RES, str(e))
            return
        failed = wait(lambda: mps_gpu_prop('MpsState') == 'failed', 30, 'MPS failed')
        refusal = "the job ended with result 'failed' (see journalctl -u %s)" % MPS_UNIT
        check(failed and refusal in sh('journalctl', '--no-pager', '-o', 'cat', '-u', 'kgpu-brokerd.service',
                                       check_rc=False).stdout,
              'a unit that fails to start: MpsState failed, MpsFailed naming the unit and the job result',
              'MpsState %r' % mps_gpu_prop('MpsState'))
        os.unlink(failing)
        sh('systemctl', 'daemon-reload')
        sh('systemctl', 'reload', 'kgpu-brokerd.service', check_rc=False, timeout=60)   # asks again
        running = wait(lambda: mps_gpu_prop('MpsState') == 'running', 30, 'MPS running')
        pid = mps_daemon_pid()
        check(running and pid > 0, 'MPS running on %s, control daemon pid %d' % (MPS_GPU, pid),
              'MpsState %r; %s' % (mps_gpu_prop('MpsState'),
                                   sh('journalctl', '--no-pager', '-n', '30', '-u', MPS_UNIT, '-u',
                                      'kgpu-probed.service', check_rc=False).stdout))
        if not running or pid <= 0:
            return
        pipe = mps_gpu_prop('MpsPipeDirectory')
        check(unit_prop(MPS_UNIT, 'ActiveState') == 'active' and unit_prop(MPS_UNIT, 'MainPID') == str(pid),
              '%s active, its main process is the control daemon' % MPS_UNIT,
              'state %s pid %s' % (unit_prop(MPS_UNIT, 'ActiveState'), unit_prop(MPS_UNIT, 'MainPID')))
        with open('/proc/%d/cgroup' % pid) as f:
            cgroup = f.read()
        check(MPS_UNIT in cgroup and 'kgpu-probed' not in cgroup,
              'the control daemon lives in its unit\'s cgroup, not the probe\'s', cgroup)
        # The probe managed the unit as root without any capability (its unit's empty
        # bounding set): nothing was widened for it.
        st = proc_status(unit_prop('kgpu-probed.service', 'MainPID'))
        check(int(st['CapEff'], 16) == 0 and int(st['CapBnd'], 16) == 0,
              'kgpu-probed started the unit holding no capabilities', 'CapEff %s CapBnd %s' % (st['CapEff'], st['CapBnd']))
        starts = lambda: sum(1 for c in mps_fake_commands() if c.startswith('nvidia-cuda-mps-control -d'))
        n_starts, n_cmds = starts(), len(mps_fake_commands())
        cl = sim.plugin(MPS_RES)
        cl.wait_update(lambda d: len(d) == 2, timeout=15)
        try:
            ans = cl.allocate([MPS_GPU + '::0'])
            check(ans['envs'].get('CUDA_MPS_PIPE_DIRECTORY') and
                  any(m['host_path'] == pipe for m in ans['mounts']),
                  'Allocate of an MPS slice answered with the pipe directory %s' % pipe, repr(ans))
        except Exception as e:  # grpc.RpcError
            check(False, 'Allocate of an MPS slice answered', repr(e))

        for action in ('restart', 'reload'):
            probe_pid = unit_prop('kgpu-probed.service', 'MainPID')
            n_answers = broker_mps_answers()
            p = sh('systemctl', action, 'kgpu-probed.service', check_rc=False, timeout=60)
            check(p.returncode == 0 and unit_prop('kgpu-probed.service', 'ActiveState') == 'active' and
                  (unit_prop('kgpu-probed.service', 'MainPID') != probe_pid) == (action == 'restart'),
                  'systemctl %s kgpu-probed' % action, p.stderr)
            # The broker asks a new probe again (and logs the answer); the adopted
            # daemon's limits are known, so that runs nothing.
            if action == 'restart':
                check(wait(lambda: broker_mps_answers() > n_answers, 30, 'SetMps'),
                      'after restart: the broker set MPS up on the new probe')
            adopted = wait(lambda: mps_gpu_prop('MpsState') == 'running', 20, 'MPS adopted')
            check(adopted and mps_gpu_prop('MpsPipeDirectory') == pipe,
                  'after %s: MpsState running, MpsPipeDirectory unchanged' % action,
                  '%r %r' % (mps_gpu_prop('MpsState'), mps_gpu_prop('MpsPipeDirectory')))
            check(mps_daemon_pid() == pid and os.path.exists('/proc/%d' % pid) and
                  unit_prop(MPS_UNIT, 'MainPID') == str(pid) and unit_prop(MPS_UNIT, 'NRestarts') == '0',
                  'after systemctl %s kgpu-probed: the MPS control daemon is the same process (pid %d)'
                  % (action, pid), 'pid file %d, unit pid %s' % (mps_daemon_pid(), unit_prop(MPS_UNIT, 'MainPID')))
            check(starts() == n_starts, 'after %s: no second control daemon started' % action,
                  repr(mps_fake_commands()[n_cmds:]))
            sent = [c for c in mps_fake_commands()[n_cmds:] if '< set_default' in c]
            check(sent == [], 'after %s: no limits sent again to the adopted daemon' % action, repr(sent))
            try:
                ans = cl.allocate([MPS_GPU + '::1'])
                check(any(m['host_path'] == pipe for m in ans['mounts']),
                      'after %s: Allocate of an MPS slice still answered' % action, repr(ans))
            except Exception as e:  # grpc.RpcError
                check(False, 'after %s: Allocate of an MPS slice still answered' % action, repr(e))

        # An operator stops the unit: ExecStop= asks the daemon to quit (its pid file
        # goes, which a SIGTERM would leave); the probe's health check starts the unit
        # again and sends the limits.
        n_cmds = len(mps_fake_commands())
        p = sh('systemctl', 'stop', MPS_UNIT, check_rc=False, timeout=60)
        check(p.returncode == 0 and 'nvidia-cuda-mps-control < quit' in mps_fake_commands()[n_cmds:] and
              mps_daemon_pid() == 0 and not os.path.exists('/proc/%d' % pid),
              'systemctl stop %s: ExecStop= quit the daemon' % MPS_UNIT, repr(mps_fake_commands()[n_cmds:]))
        back = wait(lambda: mps_daemon_pid() not in (0, pid) and unit_prop(MPS_UNIT, 'ActiveState') == 'active' and
                    any('set_default_active_thread_percentage' in c for c in mps_fake_commands()[n_cmds:]), 30,
                    'restarted')
        check(back and mps_gpu_prop('MpsState') == 'running',
              'the probe\'s health check started %s again with its limits' % MPS_UNIT,
              'pid %d, unit %s, %r' % (mps_daemon_pid(), unit_prop(MPS_UNIT, 'ActiveState'),
                                        mps_fake_commands()[n_cmds:]))
        pid = mps_daemon_pid()

        # MPS out of the config: the probe quits the daemon and stops its unit.
        with open('/etc/kgpu/kgpu.yaml', 'w') as f:
            f.write(config)
        sh('systemctl', 'reload', 'kgpu-brokerd.service', check_rc=False, timeout=60)
        stopped = wait(lambda: mps_gpu_prop('MpsState') == '' and unit_prop(MPS_UNIT, 'ActiveState') == 'inactive',
                       30, 'MPS stopped')
        check(stopped and not os.path.exists('/proc/%d' % pid),
              'MPS taken out of the config: %s inactive, the daemon gone' % MPS_UNIT,
              'MpsState %r, unit %s' % (mps_gpu_prop('MpsState'), unit_prop(MPS_UNIT, 'ActiveState')))
    finally:
        sim.stop()


# --- the system bus: dbus-daemon (Debian) or dbus-broker (Fedora, Arch) ---------------
# test-install.sh writes which one the root has into the payload. The same steps run on
# both; here only what tells them apart: which unit is dbus.service and what it runs,
# which line its journal has for a reload the bus did by itself (dbus-daemon and
# dbus-broker-launch both watch their policy directories), and the trap the postinst
# order is for, shown on this bus: a policy naming a user that does not exist yet is
# dropped when read and stays dropped once the user exists, until ReloadConfig.
SYSTEM_BUS = (read(os.path.join(PAYLOAD, 'system-bus')) or 'dbus-daemon').strip()
BUS_UNIT = {'dbus-daemon': 'dbus.service', 'dbus-broker': 'dbus-broker.service'}[SYSTEM_BUS]
BUS_AUTO_RELOAD = {'dbus-daemon': 'Reloaded configuration',
                   'dbus-broker': 'Noticed file-system modification, trigger reload'}[SYSTEM_BUS]
LATE_USER = 'kgpu-pkgtest-late'
LATE_NAME = 'io.kgpu.PkgtestLate'
LATE_CONF = '/usr/share/dbus-1/system.d/%s.conf' % LATE_NAME


def check_system_bus():
    """dbus.service is the bus daemon this root was made with, and only that one."""
    unit = unit_prop('dbus.service', 'Id')
    pid = unit_prop('dbus.service', 'MainPID')
    exe = os.path.basename(os.readlink('/proc/%s/exe' % pid)) if pid not in ('', '0') else ''
    want = {'dbus-daemon': 'dbus-daemon', 'dbus-broker': 'dbus-broker-launch'}[SYSTEM_BUS]
    check(unit == BUS_UNIT and unit_prop('dbus.service', 'ActiveState') == 'active' and exe == want,
          'the system bus is %s (dbus.service is %s, running %s)' % (SYSTEM_BUS, unit, exe))
    if SYSTEM_BUS == 'dbus-broker':
        check(not os.path.exists('/usr/bin/dbus-daemon'), 'no dbus-daemon installed beside dbus-broker')
    check(os.path.exists('/run/dbus/system_bus_socket'), 'the system bus socket the postinst looks for is there')


def request_late_name():
    return sh('busctl', 'call', 'org.freedesktop.DBus', '/org/freedesktop/DBus', 'org.freedesktop.DBus',
              'RequestName', 'su', LATE_NAME, '4', user=LATE_USER, check_rc=False)


def check_late_user_reload():
    """The postinst order (users, then ReloadConfig) is what this bus needs too."""
    with open(LATE_CONF, 'w') as f:
        f.write('<busconfig><policy user="%s"><allow own="%s"/></policy></busconfig>\n' % (LATE_USER, LATE_NAME))
    try:
        time.sleep(1)   # the bus's own reload on the new file, with the user missing
        p = sh('busctl', 'call', 'org.freedesktop.DBus', '/org/freedesktop/DBus', 'org.freedesktop.DBus',
               'ReloadConfig', check_rc=False)
        check(p.returncode == 0, 'ReloadConfig on %s (user %s missing)' % (SYSTEM_BUS, LATE_USER), p.stderr)
        sh('useradd', '--system', '--no-create-home', '--shell', '/usr/sbin/nologin', LATE_USER)
        p = request_late_name()
        check(p.returncode != 0 and ('Access denied' in p.stderr or 'AccessDenied' in p.stderr),
              '%s: the rule for a user made after the policy was read stays dropped (the trap)' % SYSTEM_BUS,
              p.stdout + p.stderr)
        p = sh('busctl', 'call', 'org.freedesktop.DBus', '/org/freedesktop/DBus', 'org.freedesktop.DBus',
               'ReloadConfig', check_rc=False)
        q = request_late_name()
        check(p.returncode == 0 and q.returncode == 0 and q.stdout.strip() == 'u 1',
              '%s: ReloadConfig once the user exists applies its rule at once' % SYSTEM_BUS,
              p.stderr + q.stdout + q.stderr)
    finally:
        os.unlink(LATE_CONF)
        sh('userdel', LATE_USER, check_rc=False)
        sh('busctl', 'call', 'org.freedesktop.DBus', '/org/freedesktop/DBus', 'org.freedesktop.DBus',
           'ReloadConfig', check_rc=False)


def main():
    check_system_bus()
    check_late_user_reload()
    install_testbed()
    make_kubelet_dirs()
    kubelet_before = kubelet_dirs_state()

    # --- install -------------------------------------------------------------------
    debs = [f for f in os.listdir(PAYLOAD) if f.startswith('kgpu_') and f.endswith('.deb')]
    # dpkg -i in its two steps, with a pause between: the bus re-reads its policy as
    # soon as the .conf files are unpacked, while the users they name do not exist yet
    # (the trap docs/ARCHITECTURE.md describes under Packaging); the postinst must create them and make the bus
    # read the policy again, else the broker cannot own its name.
    reloads = lambda: sh('journalctl', '--no-pager', '-o', 'cat', '-u', BUS_UNIT,
                         check_rc=False).stdout.count(BUS_AUTO_RELOAD)
    n0 = reloads()
    p = sh('dpkg', '--unpack', *[os.path.join(PAYLOAD, d) for d in debs], check_rc=False, timeout=120)
    if not check(p.returncode == 0, 'dpkg --unpack %s' % ' '.join(debs), p.stdout + p.stderr):
        return
    check(wait(lambda: reloads() > n0, 5, 'dbus reload'), 'the bus re-read its policy after the unpack')
    p = sh('dpkg', '--configure', 'kgpu', check_rc=False, timeout=120)
    if not check(p.returncode == 0, 'dpkg --configure kgpu', p.stdout + p.stderr):
        return
    check(os.path.isfile('/etc/kgpu/kgpu.yaml'), 'default /etc/kgpu/kgpu.yaml installed (the daemons start with it)')
    for user in ('kgpu', 'kgpu-broker', 'kgpu-cluster'):
        try:
            pw = pwd.getpwnam(user)
            check(pw.pw_uid < 1000 and pw.pw_uid != 0, 'postinst created system user %s (uid %d)' % (user, pw.pw_uid))
        except KeyError:
            check(False, 'postinst created system user %s' % user)
    # tmpfiles.d runs again at every boot (and dh's snippet ran it a second time): the
    # package still changes nothing in the kubelet's directories after that.
    sh('systemd-tmpfiles', '--create', 'kgpu.conf', check_rc=False)
    check_kubelet_dirs(kubelet_before, 'after the install:')

    # --- start ---------------------------------------------------------------------
    sh('systemctl', 'stop', 'kgpu.target', *UNITS, check_rc=False)
    sh('systemctl', 'reset-failed', check_rc=False)
    p = sh('systemctl', 'start', 'kgpu.target', check_rc=False, timeout=60)
    check(p.returncode == 0, 'systemctl start kgpu.target', p.stderr)
    for u in UNITS:
        state = wait(lambda: unit_prop(u, 'ActiveState') == 'active', 10, u)
        check(state, '%s active' % u, 'state %s; %s' % (
            unit_prop(u, 'ActiveState'), sh('journalctl', '--no-pager', '-n', '30', '-u', u, check_rc=False).stdout))
    # Without a cluster configuration kgpu-clusterd stops by itself, cleanly.
    in_container_cluster.check_no_credentials(sys.modules[__name__])

    for u, user in (('kgpu-grpcd.service', 'kgpu'), ('kgpu-brokerd.service', 'kgpu-broker'),
                    ('kgpu-probed.service', 'root')):
        pid = unit_prop(u, 'MainPID')
        if not check(pid not in ('', '0'), '%s has a main process' % u):
            continue
        st = proc_status(pid)
        uid = int(st['Uid'].split()[0])
        check(uid == pwd.getpwnam(user).pw_uid, '%s runs as %s' % (u, user), 'Uid: %s' % st['Uid'])
        if user != 'root':
            check(int(st['CapEff'], 16) == 0 and int(st['CapPrm'], 16) == 0 and int(st['CapBnd'], 16) == 0,
                  '%s holds no capabilities' % u, 'CapEff %s CapPrm %s CapBnd %s' % (
                      st['CapEff'], st['CapPrm'], st['CapBnd']))

    # --- D-Bus -----------------------------------------------------------------------
    p = sh('busctl', 'introspect', 'io.kgpu.Probe1', '/io/kgpu/Probe1', check_rc=False)
    check(p.returncode == 0 and 'io.kgpu.Probe1' in p.stdout and '.Rescan' in p.stdout,
          'busctl introspect io.kgpu.Probe1 /io/kgpu/Probe1', p.stdout + p.stderr)
    p = sh('busctl', 'tree', 'io.kgpu.Probe1', check_rc=False)
    gpus = [l for l in p.stdout.splitlines() if '/io/kgpu/Probe1/gpu/' in l]
    check(p.returncode == 0 and len(gpus) == 2, 'busctl tree io.kgpu.Probe1 shows the 2 testbed GPUs', p.stdout)
    p = sh('busctl', 'tree', 'io.kgpu.Broker1', check_rc=False)
    check(p.returncode == 0 and '/io/kgpu/Broker1' in p.stdout, 'busctl tree io.kgpu.Broker1', p.stdout + p.stderr)

    p = sh('busctl', 'call', 'io.kgpu.Probe1', '/io/kgpu/Probe1', 'io.kgpu.Probe1', 'Rescan',
           user='nobody', check_rc=False)
    check(p.returncode != 0 and ('Access denied' in p.stderr or 'AccessDenied' in p.stderr),
          'nobody calling Probe1.Rescan is denied', p.stdout + p.stderr)
    p = sh('busctl', 'call', 'io.kgpu.Broker1', '/io/kgpu/Broker1', 'io.kgpu.Broker1', 'Allocate',
           'saas', 'gpu.intel.com/i915', '1', '1', TWO_GPUS['gpu.intel.com/i915'], user='nobody', check_rc=False)
    check(p.returncode != 0 and ('Access denied' in p.stderr or 'AccessDenied' in p.stderr),
          'nobody calling Broker1.Allocate is denied', p.stdout + p.stderr)
    p = sh('busctl', 'get-property', 'io.kgpu.Probe1', '/io/kgpu/Probe1', 'io.kgpu.Probe1', 'Version',
           user='nobody', check_rc=False)
    check(p.returncode == 0, 'nobody may read Probe1.Version', p.stderr)
    p = sh('busctl', 'call', 'io.kgpu.Probe1', '/io/kgpu/Probe1', 'io.kgpu.Probe1', 'Rescan', check_rc=False)
    check(p.returncode == 0, 'root may call Probe1.Rescan', p.stderr)

    # --- node outputs: the probe's labels and CDI spec at the default places -----------
    labels = wait(lambda: read(FEATURE_FILE), 10, 'labels') or ''
    check('gpu.intel.com/cards=card0.card1' in labels and 'nvidia.com/' not in labels,
          '%s: the two testbed GPUs\' Intel labels, no NVIDIA label' % FEATURE_FILE, repr(labels))
    check(os.path.exists(os.path.join(CDI_DIR, KGPU_CDI_SPECS[0])) and
          not os.path.exists(os.path.join(CDI_DIR, KGPU_CDI_SPECS[1])),
          '%s: the Intel CDI spec, no NVIDIA spec' % CDI_DIR, repr(os.listdir(CDI_DIR) if os.path.isdir(CDI_DIR) else None))

    # --- kubelet: the simulator as a systemd unit, run as the kubelet runs -----------
    # Root, systemd's default UMask=0022; it makes device-plugins/ (0750) after kgpu
    # started, so the probe also meets a directory that appeared after its unit started
    # (read-only there: the probe exits 75 and systemd starts it again with access).
    sys.path.insert(0, PAYLOAD)
    os.environ['KGPU_PROTO_DIR'] = os.path.join(PAYLOAD, 'proto')
    import kubelet_sim
    shutil.copy(os.path.join(PAYLOAD, 'kgpu-kubelet-sim.service'), '/etc/systemd/system/')
    sh('systemctl', 'daemon-reload')
    p = sh('systemctl', 'start', 'kgpu-kubelet-sim.service', check_rc=False)
    check(p.returncode == 0 and unit_prop('kgpu-kubelet-sim.service', 'UMask') == '0022',
          'kubelet simulator runs as a unit with the default UMask (%s)' % unit_prop('kgpu-kubelet-sim.service', 'UMask'),
          p.stderr)
    sim_pid = unit_prop('kgpu-kubelet-sim.service', 'MainPID')
    wait(lambda: sim_registered(sim_pid) == set(TWO_GPUS), 30, 'registrations')
    regs = sim_registered(sim_pid)
    if not check(regs == set(TWO_GPUS), 'the installed kgpu registered %s with the kubelet unit'
                 % ', '.join(sorted(TWO_GPUS)), 'got %r; events %r; probe: %s' % (
                     regs, sim_events()[-10:], sh('journalctl', '--no-pager', '-n', '20', '-u',
                                                  'kgpu-probed.service', check_rc=False).stdout)):
        return
    check_kubelet_dirs(kubelet_before, 'with kgpu serving the kubelet:')
    st = os.stat(PLUGIN_DIR)
    check(stat.S_IMODE(st.st_mode) == 0o750 and st.st_uid == 0, '%s is 0750 root as the kubelet made it' % PLUGIN_DIR,
          '%o uid %d' % (stat.S_IMODE(st.st_mode), st.st_uid))
    acl = sh('getfacl', '-p', PLUGIN_DIR, check_rc=False).stdout
    check('kgpu' not in acl, '%s carries no kgpu ACL entry' % PLUGIN_DIR, acl)
    # The directory appeared after the probe's unit started, so it was read-only there:
    # the probe said so, exited 75 and systemd started it again with write access.
    plog = sh('journalctl', '--no-pager', '-o', 'cat', '-u', 'kgpu-probed.service', check_rc=False).stdout
    check(unit_prop('kgpu-probed.service', 'NRestarts') == '1' and 'is read-only for kgpu-probed' in plog,
          'the probe met a device-plugins directory made after it started: one restart for write access',
          'NRestarts %s; %s' % (unit_prop('kgpu-probed.service', 'NRestarts'), plog[-800:]))
    for sock in (os.path.join(PLUGIN_DIR, 'kubelet.sock'), POD_RESOURCES):
        st = os.lstat(sock)
        check(stat.S_IMODE(st.st_mode) == 0o755 and st.st_uid == 0,
              '%s is srwxr-xr-x root (umask 0022)' % sock, '%o uid %d' % (stat.S_IMODE(st.st_mode), st.st_uid))
    p = sh('python3', '-c', 'import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])',
           os.path.join(PLUGIN_DIR, 'kubelet.sock'), user='kgpu', check_rc=False)
    check(p.returncode != 0 and ('Permission denied' in p.stderr or 'PermissionError' in p.stderr),
          'user kgpu cannot reach the kubelet socket itself (the probe does it)', p.stderr)

    res = 'gpu.intel.com/i915'
    gpu = TWO_GPUS[res]
    cl = kubelet_sim.PluginClient(os.path.join(PLUGIN_DIR, kubelet_sim.socket_name_for(res)), res)
    try:
        ans = cl.allocate([gpu])
        paths = sorted(d['host_path'] for d in ans['devices'])
        check(paths == ['/dev/dri/card0', '/dev/dri/renderD128'], 'Allocate answer carries the GPU\'s DRM nodes',
              repr(ans))
    except Exception as e:  # grpc.RpcError
        check(False, 'Allocate answered', repr(e))
    # Keep the pod "live" for reconciliation.
    with open('/run/kubelet-sim/pods.json.tmp', 'w') as f:
        json.dump([['pkgtest', 'default', [['c0', [[res, [gpu]]]]]]], f)
    os.rename('/run/kubelet-sim/pods.json.tmp', '/run/kubelet-sim/pods.json')
    st = sh('kgpuctl', 'status', check_rc=False)
    check(st.returncode == 0 and 'Kubelet socket: present' in st.stdout and st.stdout.count(' serving') == 2,
          'kgpuctl status (all up, kubelet present, both sockets serving)', st.stdout + st.stderr)
    log('kgpuctl status:\n' + st.stdout)

    before = allocations()
    check(before is not None and len(before) == 1, 'kgpuctl allocations shows the allocation', repr(before))

    for action, unit in (('reload', 'kgpu-probed.service'), ('reload', 'kgpu-brokerd.service'),
                         ('reload', 'kgpu-grpcd.service'), ('restart', 'kgpu-brokerd.service')):
        pid = unit_prop(unit, 'MainPID')
        p = sh('systemctl', action, unit, check_rc=False, timeout=60)
        check(p.returncode == 0, 'systemctl %s %s' % (action, unit), p.stderr)
        wait(lambda: unit_prop(unit, 'ActiveState') == 'active' and allocations() is not None, 10, unit)
        newpid = unit_prop(unit, 'MainPID')
        check(unit_prop(unit, 'ActiveState') == 'active' and (newpid == pid) == (action == 'reload'),
              '%s after %s (pid %s -> %s)' % (unit, action, pid, newpid))
        after = allocations()
        check(after == before, 'allocations kept across systemctl %s %s' % (action, unit),
              '%r -> %r' % (before, after))
    # Allocate still answered after the reloads and the broker restart.
    try:
        ans = cl.allocate([gpu])
        check(len(ans['devices']) == 2, 'Allocate answered after the broker restart', repr(ans))
    except Exception as e:
        check(False, 'Allocate answered after the broker restart', repr(e))
    cl.close()
    # grpcd reaches the PodResources socket the "kubelet" (root) made, through the probe.
    check(wait(lambda: any(e['what'] == 'list' for e in sim_events()), 35, 'PodResources List'),
          'grpcd called PodResources List through the probe')

    # The kubelet restarts (its unit): every plugin socket removed; kgpu registers again.
    p = sh('systemctl', 'restart', 'kgpu-kubelet-sim.service', check_rc=False)
    new_pid = unit_prop('kgpu-kubelet-sim.service', 'MainPID')
    check(p.returncode == 0 and new_pid != sim_pid, 'systemctl restart kgpu-kubelet-sim (pid %s -> %s)' % (
        sim_pid, new_pid), p.stderr)
    wait(lambda: sim_registered(new_pid) == set(TWO_GPUS), 30, 'registrations again')
    regs = sim_registered(new_pid)
    check(regs == set(TWO_GPUS), 'kgpu registered again after the kubelet unit restarted', 'got %r' % regs)
    cl = kubelet_sim.PluginClient(os.path.join(PLUGIN_DIR, kubelet_sim.socket_name_for(res)), res)
    try:
        ans = cl.allocate([gpu])
        check(len(ans['devices']) == 2, 'Allocate answered on the new socket after the kubelet restart', repr(ans))
    except Exception as e:
        check(False, 'Allocate answered after the kubelet restart', repr(e))
    cl.close()
    sh('systemctl', 'stop', 'kgpu-kubelet-sim.service', check_rc=False)
    # From now on device-plugins/ is one of the kubelet's directories kgpu must leave alone.
    kubelet_before = kubelet_dirs_state(list(KUBELET_DIRS) + [PLUGIN_DIR])
    before = allocations()      # with the one just made

    # --- No bus activation: a daemon an operator stopped stays stopped -------------------
    # The bus would start an activatable name for any caller (it checks the send policy
    # only once the name has an owner), so kgpu ships no activation files: the units start
    # from kgpu.target and the broker's Wants=. Nobody's read, and the broker's own user
    # calling the probe, start nothing.
    check(not any(os.path.exists('/usr/share/dbus-1/system-services/%s.service' % n)
                  for n in ('io.kgpu.Probe1', 'io.kgpu.Broker1')), 'no D-Bus activation files installed')
    sh('systemctl', 'stop', 'kgpu-brokerd.service', check_rc=False)
    sh('systemctl', 'stop', 'kgpu-probed.service', check_rc=False)
    for name, user in (('Broker1', 'nobody'), ('Probe1', 'nobody'), ('Probe1', 'kgpu-broker'), ('Broker1', 'kgpu')):
        p = sh('busctl', 'get-property', 'io.kgpu.' + name, '/io/kgpu/' + name, 'io.kgpu.' + name, 'Version',
               user=user, check_rc=False, timeout=30)
        unit = 'kgpu-brokerd.service' if name == 'Broker1' else 'kgpu-probed.service'
        time.sleep(1)
        check(p.returncode != 0 and unit_prop(unit, 'ActiveState') == 'inactive',
              'a read of io.kgpu.%s by %s leaves the stopped %s stopped (%s)' % (
                  name, user, unit, (p.stderr.strip().splitlines() or ['?'])[-1]), p.stdout + p.stderr)
    p = sh('systemctl', 'start', 'kgpu.target', check_rc=False, timeout=60)
    wait(lambda: all(unit_prop(u, 'ActiveState') == 'active' for u in UNITS) and allocations() is not None, 30,
         'units back')
    check(p.returncode == 0 and all(unit_prop(u, 'ActiveState') == 'active' for u in UNITS),
          'systemctl start kgpu.target starts them again', p.stderr)
    after = allocations()
    check(after == before, 'allocations kept across the stop', '%r -> %r' % (before, after))

    # --- watchdog: every daemon pings (else systemd kills it after WATCHDOG_SEC) ------
    pids = {u: unit_prop(u, 'MainPID') for u in UNITS}
    restarts = {u: unit_prop(u, 'NRestarts') for u in UNITS}
    time.sleep(WATCHDOG_SEC * 1.5)
    for u in UNITS:
        check(unit_prop(u, 'ActiveState') == 'active' and unit_prop(u, 'MainPID') == pids[u]
              and unit_prop(u, 'NRestarts') == restarts[u] and unit_prop(u, 'WatchdogUSec') == '%ds' % WATCHDOG_SEC,
              '%s pings its watchdog (WatchdogSec=%ds, still the same process, no restarts)' % (u, WATCHDOG_SEC),
              'state %s pid %s -> %s restarts %s watchdog %s' % (
                  unit_prop(u, 'ActiveState'), pids[u], unit_prop(u, 'MainPID'), unit_prop(u, 'NRestarts'),
                  unit_prop(u, 'WatchdogUSec')))

    check_mps_survives_probe_restart()

    # --- kgpu-clusterd against the API server simulator (in_container_cluster.py) -----
    in_container_cluster.check_cluster(sys.modules[__name__])

    # --- unit checks -----------------------------------------------------------------
    files = ['/lib/systemd/system/%s' % u for u in UNITS + ['kgpu-clusterd.service', 'kgpu.target']]
    p = sh('systemd-analyze', 'verify', *files, check_rc=False)
    check(p.returncode == 0 and p.stderr.strip() == '', 'systemd-analyze verify: nothing on stderr', p.stderr)
    for u, limit in THRESHOLDS.items():
        p = sh('systemd-analyze', 'security', '--no-pager', u, check_rc=False)
        line = [l for l in p.stdout.splitlines() if 'Overall exposure level' in l]
        score = float(line[0].split(':')[1].split()[0]) if line else 99.0
        check(score <= limit, '%s exposure %.1f <= %.1f (as installed)' % (u, score, limit), p.stdout[-400:])

    # --- one reload command ------------------------------------------------------------
    check_reload_target()

    # --- removal -------------------------------------------------------------------------
    check_remove(kubelet_before)


if __name__ == '__main__':
    try:
        main()
    except Exception as e:
        import traceback
        traceback.print_exc()
        failures.append('exception: %r' % e)
    if failures:
        log('%d check(s) failed: %s' % (len(failures), '; '.join(failures)))
        for u in UNITS + ['kgpu-testbed.service', MPS_UNIT]:
            print('--- journal of %s' % u)
            print(sh('journalctl', '--no-pager', '-n', '40', '-u', u, check_rc=False).stdout, flush=True)
        sys.exit(1)
    log('all checks passed')
