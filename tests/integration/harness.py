#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# harness.py — a whole simulated node for the integration tests, the demo and the bench.
#
# Contract: Node.start() brings up, in a fresh temp directory, a private dbus-daemon
# (bus.conf.in with the project's dbus/*.conf policies), the umockdev testbed tool, then
# kgpu-probed (root, under libumockdev-preload), kgpu-brokerd and kgpu-grpcd from the
# build tree, and the kubelet simulator; it returns once both Intel resources have
# registered and sent their first ListAndWatch update, or raises with every log printed.
# As root the daemons that drop privileges are started as root (they drop themselves;
# check_dropped() verifies it from /proc); users kgpu and kgpu-broker are created if
# missing. Not root: the bus gets a permissive policy for the caller, and tests that need
# root raise Skip. Node.stop() (also from __exit__ and atexit) kills every process it
# started, by pid, and removes the temp directory.
#
# Environment read: KGPU_BUILD_ROOT, KGPU_SOURCE_ROOT (meson test sets both),
# KGPU_TEST_KEEP_TMP=1 (keep the temp directory for debugging),
# KGPU_TEST_VERBOSE=1 (echo the kubelet simulator's events),
# KGPU_VALGRIND=1 (run each daemon under valgrind's memcheck, with a normal, non-ASan
# build: any error or definite leak makes the daemon exit 99 and the test fail; the
# reports are in logs/valgrind-<daemon>.<pid>.log),
# KGPU_CALLGRIND_DIR=DIR (run each daemon under valgrind's callgrind, writing
# DIR/callgrind.<daemon>.<pid> at exit: the instruction counts of
# bench/kgpu-bench-instructions.py).
#
# NVIDIA: Node(nvidia_scenario='h100-mig') points the probe at the fake tools of
# tests/fake-nvidia (KGPU_NVIDIA_SMI, KGPU_NVIDIA_MPS_CONTROL) replaying
# tests/data/nvidia/scenarios/<name>.json, with their command log and state file in the
# node's temp directory (fake_nvidia.test_env; read them with nvidia_commands(),
# nvidia_state(), make GPUs vanish with nvidia_set_lost()), and at a mig-minors file in
# the driver's format (KGPU_NVIDIA_CAPS_MIG_MINORS). start() then also waits for
# 'nvidia.com/gpu' unless `resources` names what to wait for.
#
# A hostile broker: Node(fake_broker={...}) starts tests/integration/fake_broker.py in
# place of kgpu-brokerd (as the broker's user when root, never under valgrind), answering
# what the given control state says (see that file); set_fake_broker() replaces it.

import atexit
import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import kubelet_sim  # noqa: E402

FAKE_NVIDIA_DIR = os.path.join(_HERE, '..', 'fake-nvidia')
sys.path.insert(0, FAKE_NVIDIA_DIR)
import fake_nvidia  # noqa: E402

SOURCE_ROOT = os.environ.get('KGPU_SOURCE_ROOT') or os.path.normpath(os.path.join(_HERE, '..', '..'))
os.environ.setdefault('KGPU_SOURCE_ROOT', SOURCE_ROOT)

RES_I915 = 'gpu.intel.com/i915'
RES_XE = 'gpu.intel.com/xe'
GPU_I915 = '0000:03:00.0'
GPU_XE = '0000:04:00.0'
# Layout "two-gpus" of the testbed tool: resource -> (PCI address, card, render node).
TWO_GPUS = {
    RES_I915: (GPU_I915, '/dev/dri/card0', '/dev/dri/renderD128'),
    RES_XE: (GPU_XE, '/dev/dri/card1', '/dev/dri/renderD129'),
}

PROBE_BUS = 'io.kgpu.Probe1'
BROKER_BUS = 'io.kgpu.Broker1'
BROKER_PATH = '/io/kgpu/Broker1'
GRPC_USER = 'kgpu'
BROKER_USER = 'kgpu-broker'
CLUSTER_USER = 'kgpu-cluster'
CLUSTER_BUS = 'io.kgpu.Cluster1'
CLUSTER_PATH = '/io/kgpu/Cluster1'
RES_NVIDIA = 'nvidia.com/gpu'


def mig_minors_text(n_gpus=8):
    """/proc/driver/nvidia-caps/mig-minors as the driver writes it: config, monitor,
    then per GPU 15 GPU instances with their access minor followed by 8 compute
    instances each."""
    lines = ['config 1', 'monitor 2']
    minor = 3
    for g in range(n_gpus):
        for gi in range(15):
            lines.append('gpu%d/gi%d/access %d' % (g, gi, minor))
            minor += 1
            for ci in range(8):
                lines.append('gpu%d/gi%d/ci%d/access %d' % (g, gi, ci, minor))
                minor += 1
    return '\n'.join(lines) + '\n'


def mig_cap_minor(gpu, gi, ci=None):
    """The minor mig_minors_text() gives a GI (ci None) or a CI access node."""
    base = 3 + gpu * 15 * 9 + gi * 9
    return base if ci is None else base + 1 + ci


VALGRIND = os.environ.get('KGPU_VALGRIND') == '1'
CALLGRIND_DIR = os.environ.get('KGPU_CALLGRIND_DIR')


def valgrind_argv(log_dir, name):
    return ['valgrind', '--quiet', '--vgdb=no', '--error-exitcode=99', '--leak-check=full',
            '--show-leak-kinds=definite', '--errors-for-leak-kinds=definite', '--num-callers=40',
            '--suppressions=' + os.path.join(_HERE, 'valgrind.supp'),
            '--log-file=' + os.path.join(log_dir, 'valgrind-%s.%%p.log' % name)]


class Skip(Exception):
    """Raised by a test that cannot run here; run_test() exits 77."""


def find_build_root():
    b = os.environ.get('KGPU_BUILD_ROOT')
    if b:
        return os.path.abspath(b)
    for cand in ('build-integ', 'build'):
        p = os.path.join(SOURCE_ROOT, cand)
        if os.path.isdir(p):
            return p
    raise Skip('KGPU_BUILD_ROOT not set and no build directory found')


def is_root():
    return os.geteuid() == 0


def ensure_users():
    """Creates the system users kgpu, kgpu-broker and kgpu-cluster if missing (root only)."""
    for u in (GRPC_USER, BROKER_USER, CLUSTER_USER):
        try:
            pwd.getpwnam(u)
        except KeyError:
            subprocess.run(['useradd', '--system', '--no-create-home',
                            '--shell', '/usr/sbin/nologin', u], check=True)


def proc_status(pid):
    """Uid/Gid (real, effective, saved, fs), Groups and capability masks of a pid."""
    out = {}
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            k, _, v = line.partition(':')
            v = v.split()
            if k in ('Uid', 'Gid'):
                out[k] = [int(x) for x in v]
            elif k == 'Groups':
                out[k] = [int(x) for x in v]
            elif k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'):
                out[k] = int(v[0], 16)
            elif k == 'VmRSS':
                out[k] = int(v[0])  # kB
    return out


def rss_kb(pid):
    return proc_status(pid).get('VmRSS', 0)


class Daemon:
    def __init__(self, node, name, argv, env, valgrind=True):
        self.node = node
        self.name = name
        self.argv = argv
        self.env = env
        self.valgrind = valgrind
        self.log_path = os.path.join(node.tmp, 'logs', name + '.log')
        self.proc = None
        self.notify = []           # sd_notify datagrams received
        self.notify_cond = threading.Condition()
        self._nsock = None
        self._nthread = None
        self._log_thread = None
        self.notify_path = os.path.join(node.tmp, 'notify', name)
        self.returncodes = []      # of earlier instances (kill/restart)

    def start(self):
        with contextlib.suppress(OSError):
            os.unlink(self.notify_path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        s.bind(self.notify_path)
        os.chmod(self.notify_path, 0o777)  # the daemon may have dropped to its own user
        s.settimeout(0.2)
        self._nsock = s
        self._nthread = threading.Thread(target=self._notify_loop, args=(s,), daemon=True)
        self._nthread.start()
        env = dict(self.env)
        env['NOTIFY_SOCKET'] = self.notify_path
        log = open(self.log_path, 'ab')
        log.write(('=== %s: %s\n' % (time.strftime('%H:%M:%S'), ' '.join(self.argv))).encode())
        log.flush()
        # Through a pipe so that every line gets a timestamp (seconds since the node
        # started, same clock as the simulator's) for reading races out of the logs.
        argv = self.argv
        if VALGRIND and self.valgrind:
            argv = valgrind_argv(os.path.dirname(self.log_path), self.name) + argv
        elif CALLGRIND_DIR and self.valgrind:
            argv = ['valgrind', '--tool=callgrind', '--quiet', '--vgdb=no',
                    '--callgrind-out-file=%s/callgrind.%s.%%p' % (CALLGRIND_DIR, self.name)] + argv
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     close_fds=True)
        self._log_thread = threading.Thread(target=self._log_loop, args=(self.proc.stdout, log),
                                            daemon=True)
        self._log_thread.start()
        self.node.log('started %s pid %d' % (self.name, self.proc.pid))
        return self

    def _log_loop(self, pipe, log):
        t0 = self.node.t0
        with log, pipe:
            for line in pipe:
                log.write(b'[%10.6f] ' % (time.monotonic() - t0) + line)
                log.flush()

    def _notify_loop(self, s):
        while True:
            try:
                data = s.recv(4096)
            except socket.timeout:
                if s.fileno() < 0:
                    return
                continue
            except OSError:
                return
            with self.notify_cond:
                self.notify.append((time.monotonic(), data.decode(errors='replace')))
                self.notify_cond.notify_all()

    def notified(self, key):
        """Values of KEY=... in the notify messages, in order."""
        with self.notify_cond:
            return self.notified_locked(key)

    def wait_notify(self, key, value=None, timeout=5):
        deadline = time.monotonic() + timeout
        with self.notify_cond:
            while True:
                vals = self.notified_locked(key)
                if vals and (value is None or value in vals):
                    return vals
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError('%s did not send %s=%s via sd_notify' % (self.name, key, value or '...'))
                self.notify_cond.wait(left)

    def notified_locked(self, key):
        out = []
        for _, msg in self.notify:
            for line in msg.splitlines():
                if line.startswith(key + '='):
                    out.append(line[len(key) + 1:])
        return out

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig):
        if self.alive():
            os.kill(self.proc.pid, sig)

    def stop(self, timeout=5, sig=signal.SIGTERM):
        """Stops this instance; returns its exit code (negative: killed by signal)."""
        rc = None
        if (VALGRIND or CALLGRIND_DIR) and self.valgrind:
            timeout *= 6  # memcheck's leak check, callgrind's dump at exit
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, sig)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.node.log('%s did not exit on signal %d in %ss, killing' % (self.name, sig, timeout))
                    os.kill(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
            rc = self.proc.returncode
            self.returncodes.append(rc)
            self.proc = None
            if self._log_thread is not None:
                self._log_thread.join(2)
        if self._nsock is not None:
            self._nsock.close()
            self._nthread.join(1)
            self._nsock = None
        return rc

    def log_text(self):
        try:
            with open(self.log_path, errors='replace') as f:
                return f.read()
        except FileNotFoundError:
            return ''


class Node:
    """A simulated node. Use as a context manager or call start()/stop()."""

    def __init__(self, build_root=None, layout='two-gpus', broker=True, grpcd=True, kubelet=True,
                 verbose=None, extra_env=None, config_extra='', broker_args=(), resources=None,
                 bus_policy='', nvidia_scenario=None, nvidia_lost=None, fake_broker=None,
                 probe_args=(), grpcd_args=()):
        # config_extra: YAML appended to kgpu.yaml; broker_args, probe_args, grpcd_args:
        # extra kgpu-brokerd, kgpu-probed, kgpu-grpcd arguments; resources: the resource names start() waits for (default: the
        # two of layout "two-gpus", plus nvidia.com/gpu with nvidia_scenario);
        # nvidia_scenario: fake NVIDIA tools replaying that scenario (see the top);
        # nvidia_lost: GPU indices lost from the start; fake_broker: control state of a
        # fake_broker.py started instead of kgpu-brokerd (see the top).
        self.build_root = build_root or find_build_root()
        # the simulator caches its generated python modules under the build tree
        os.environ.setdefault('KGPU_BUILD_ROOT', self.build_root)
        self.source_root = SOURCE_ROOT
        self.layout = layout
        self.fake_broker = fake_broker
        self.want_broker = broker and fake_broker is None
        self.want_grpcd = grpcd and (broker or fake_broker is not None)
        self.want_kubelet = kubelet
        self.verbose = os.environ.get('KGPU_TEST_VERBOSE') == '1' if verbose is None else verbose
        self.extra_env = extra_env or {}
        self.bus_policy = bus_policy  # XML appended to the bus config (tests of in-daemon checks)
        self.config_extra = config_extra
        self.broker_args = list(broker_args)
        self.probe_args = list(probe_args)
        self.grpcd_args = list(grpcd_args)
        self.nvidia_scenario = nvidia_scenario
        self.nvidia_lost = nvidia_lost
        if resources is not None:
            self.resources = list(resources)
        else:
            self.resources = list(TWO_GPUS.keys()) + ([RES_NVIDIA] if nvidia_scenario else [])
        self.root = is_root()
        self.tmp = None
        self.t0 = time.monotonic()
        self.daemons = {}
        self.bus = None
        self.testbed = None
        self.umockdev_dir = None
        self.kubelet = None
        self._testbed_lock = threading.Lock()
        self._stopped = False
        self._logfile = None

    # --- paths -----------------------------------------------------------------------
    def bin(self, *rel):
        p = os.path.join(self.build_root, *rel)
        if not os.access(p, os.X_OK):
            raise Skip('%s is not built' % p)
        return p

    @property
    def bus_address(self):
        return 'unix:path=' + os.path.join(self.tmp, 'bus')

    def log(self, msg):
        line = 'harness %s: %s' % (time.strftime('%H:%M:%S'), msg)
        if self.verbose:
            print(line, flush=True)
        if self._logfile:
            self._logfile.write(line + '\n')
            self._logfile.flush()

    # --- start -----------------------------------------------------------------------
    def start(self, timeout=20):
        atexit.register(self.stop)
        try:
            self._start(timeout)
        except BaseException as e:
            if not isinstance(e, Skip):
                self.dump_logs()
            self.stop()
            raise
        return self

    def _start(self, timeout):
        # Short prefix: unix socket paths are limited to 108 bytes.
        self.tmp = tempfile.mkdtemp(prefix='kgpu-it-')
        os.chmod(self.tmp, 0o755)
        # The probe's generated files (NFD labels, CDI spec), never the host's.
        self.feature_file = os.path.join(self.tmp, 'nfd', 'kgpu')
        self.cdi_dir = os.path.join(self.tmp, 'cdi')
        for d in ('logs', 'notify', 'run', 'state'):
            os.mkdir(os.path.join(self.tmp, d))
        os.chmod(os.path.join(self.tmp, 'notify'), 0o755)
        self._logfile = open(os.path.join(self.tmp, 'logs', 'harness.log'), 'a')
        self.state_dir = os.path.join(self.tmp, 'state')
        # The kubelet's root directory as a node has it (made by the kubelet with
        # MkdirAll(0750), owner root): device-plugins/ and pod-resources/ below it are
        # made by the kubelet simulator when it starts, as the kubelet makes them.
        self.kubelet_root = os.path.join(self.tmp, 'kubelet')
        kubelet_sim.make_kubelet_dir(self.kubelet_root)
        self.plugin_dir = os.path.join(self.kubelet_root, 'device-plugins')
        self.pod_resources_socket = os.path.join(self.kubelet_root, 'pod-resources', 'kubelet.sock')
        for d in ('probe', 'broker', 'grpc'):
            os.mkdir(os.path.join(self.tmp, 'run', d))
        if self.root:
            ensure_users()
            gu, bu = pwd.getpwnam(GRPC_USER), pwd.getpwnam(BROKER_USER)
            os.chown(self.state_dir, bu.pw_uid, bu.pw_gid)
            os.chmod(self.state_dir, 0o700)
            os.chown(os.path.join(self.tmp, 'run', 'broker'), bu.pw_uid, bu.pw_gid)
            os.chown(os.path.join(self.tmp, 'run', 'grpc'), gu.pw_uid, gu.pw_gid)

        self.config_file = os.path.join(self.tmp, 'kgpu.yaml')
        with open(self.config_file, 'w') as f:
            f.write('# written by tests/integration/harness.py\n'
                    'logLevel: debug\n'
                    'stateDirectory: %s\n'
                    'kubelet:\n'
                    '  devicePluginPath: %s\n'
                    '  podResourcesSocket: %s\n' % (self.state_dir, self.plugin_dir,
                                                    self.pod_resources_socket))
            f.write('# --- config_extra ---\n')
            f.write(self.config_extra)
        os.chmod(self.config_file, 0o644)

        self._start_bus()
        self._start_testbed()
        self.start_probe()
        self.wait_bus_name(PROBE_BUS, timeout, self.daemons['probe'])
        if self.want_broker:
            self.start_broker()
            self.wait_bus_name(BROKER_BUS, timeout, self.daemons['broker'])
        elif self.fake_broker is not None:
            self.start_fake_broker()
            self.wait_bus_name(BROKER_BUS, timeout, self.daemons['broker'])
        if self.want_kubelet:
            self.kubelet = kubelet_sim.KubeletSim(self.plugin_dir, self.pod_resources_socket,
                                                  verbose=self.verbose, t0=self.t0).start()
        if self.want_grpcd:
            self.start_grpcd()
            if self.want_kubelet:
                self.wait_for(lambda: self.kubelet.wait_connected(self.resources, timeout=1),
                              timeout, self.daemons['grpc'], 'registration of %s' % ', '.join(self.resources))

    def wait_for(self, fn, timeout, daemon=None, what='condition'):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if daemon is not None and not daemon.alive():
                raise RuntimeError('%s exited (rc %s) while waiting for %s' % (
                    daemon.name, daemon.proc.returncode if daemon.proc else '?', what))
            try:
                return fn()
            except (TimeoutError, AssertionError) as e:
                last = e
        raise TimeoutError('timed out after %ss waiting for %s: %s' % (timeout, what, last))

    def _start_bus(self):
        with open(os.path.join(_HERE, 'bus.conf.in')) as f:
            conf = f.read()
        extra = ''
        if not self.root:
            user = pwd.getpwuid(os.getuid()).pw_name
            extra = ('  <policy user="%s">\n    <allow own="*"/>\n'
                     '    <allow send_destination="*"/>\n  </policy>\n' % user)
        extra += self.bus_policy
        conf = (conf.replace('@BUS_SOCKET@', os.path.join(self.tmp, 'bus'))
                .replace('@POLICY_DIR@', os.path.join(self.source_root, 'dbus'))
                .replace('@EXTRA_POLICY@', extra))
        path = os.path.join(self.tmp, 'bus.conf')
        with open(path, 'w') as f:
            f.write(conf)
        log = open(os.path.join(self.tmp, 'logs', 'dbus-daemon.log'), 'ab')
        # dbus-daemon makes its listening socket world-accessible itself (as on the
        # system bus); the policy decides who may do what.
        self.bus = subprocess.Popen(['dbus-daemon', '--config-file=' + path, '--nofork',
                                     '--nopidfile', '--print-address=1', '--nosyslog'],
                                    stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                    close_fds=True)
        log.close()
        line = self.bus.stdout.readline().decode().strip()
        if not line.startswith('unix:'):
            raise RuntimeError('dbus-daemon did not start (printed %r)' % line)
        self.log('dbus-daemon pid %d at %s' % (self.bus.pid, line))

    def _start_testbed(self):
        tb = self.bin('tests', 'testbed', 'kgpu-testbed')
        log = open(os.path.join(self.tmp, 'logs', 'testbed.log'), 'ab')
        self.testbed = subprocess.Popen([tb, self.layout], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=log, close_fds=True,
                                        env=self._env({}))
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            line = self.testbed.stdout.readline().decode()
            if not line:
                raise RuntimeError('kgpu-testbed exited before "ready" (rc %s)' % self.testbed.wait(2))
            line = line.strip()
            if line.startswith('UMOCKDEV_DIR='):
                self.umockdev_dir = line.split('=', 1)[1]
            elif line == 'ready':
                break
        if not self.umockdev_dir:
            raise RuntimeError('kgpu-testbed did not print UMOCKDEV_DIR=')
        self.log('testbed pid %d, UMOCKDEV_DIR=%s' % (self.testbed.pid, self.umockdev_dir))

    def testbed_cmd(self, cmd, timeout=5):
        """Sends a line to the testbed tool; returns the monotonic time just before it
        was written (so delays measured from it include the write), raises unless the
        answer is "ok"."""
        with self._testbed_lock:
            t = time.monotonic()
            self.testbed.stdin.write((cmd + '\n').encode())
            self.testbed.stdin.flush()
            line = self.testbed.stdout.readline().decode().strip()
        if line != 'ok':
            raise RuntimeError('testbed answered %r to %r' % (line, cmd))
        return t

    def _env(self, extra):
        env = {
            'PATH': os.environ.get('PATH', '/usr/bin:/bin'),
            'LANG': 'C.UTF-8',
            'DBUS_SYSTEM_BUS_ADDRESS': self.bus_address if self.tmp else '',
            'KGPU_LOG_LEVEL': 'debug',
            'KGPU_LOG_TARGET': 'stderr',
            'KGPU_CONFIG': getattr(self, 'config_file', ''),
        }
        for k in ('ASAN_OPTIONS', 'UBSAN_OPTIONS', 'LSAN_OPTIONS', 'MALLOC_PERTURB_'):
            if k in os.environ:
                env[k] = os.environ[k]
        env.update(self.extra_env)
        env.update(extra)
        return env

    # --- NVIDIA (fake tools) -------------------------------------------------------------
    def nvidia_env(self):
        """The probe's environment for the fake NVIDIA tools (NVIDIA off without a scenario)."""
        if not self.nvidia_scenario:
            # Hermetic on a host with a real NVIDIA driver: no scenario, no NVIDIA GPUs.
            return {} if 'KGPU_NVIDIA_ENABLED' in self.extra_env else {'KGPU_NVIDIA_ENABLED': 'false'}
        minors = os.path.join(self.tmp, 'nvidia-caps-mig-minors')
        if not os.path.exists(minors):
            with open(minors, 'w') as f:
                f.write(mig_minors_text())
        env = fake_nvidia.test_env(self.nvidia_scenario, self.tmp, self.nvidia_lost)
        env.update({
            'KGPU_NVIDIA_SMI': os.path.join(os.path.abspath(FAKE_NVIDIA_DIR), 'nvidia-smi'),
            'KGPU_NVIDIA_MPS_CONTROL': os.path.join(os.path.abspath(FAKE_NVIDIA_DIR), 'nvidia-cuda-mps-control'),
            'KGPU_NVIDIA_CAPS_MIG_MINORS': minors,
        })
        return env

    def nvidia_commands(self):
        """Every command the fake tools received (fake_nvidia.read_commands)."""
        return fake_nvidia.read_commands(self.tmp)

    def nvidia_state(self):
        """The fake tools' state: compute modes, MPS daemons and limits, lost GPUs. Read
        under the lock the fake tools hold while they rewrite it."""
        import fcntl
        path = os.path.join(self.tmp, 'fake-nvidia-state.json')
        try:
            with open(path) as f:
                fcntl.flock(f, fcntl.LOCK_SH)
                text = f.read()
        except FileNotFoundError:
            return {}
        return json.loads(text) if text.strip() else {}

    def nvidia_set_lost(self, indices):
        """GPUs (by nvidia-smi index) lost from the next nvidia-smi call on; [] restores."""
        if self.nvidia_lost is not None:
            raise RuntimeError('nvidia_lost was given as an environment override; use the state file')
        fake_nvidia.set_lost(self.tmp, indices)

    def write_config_extra(self, extra):
        """Replaces the YAML appended to kgpu.yaml (for reload tests)."""
        with open(self.config_file) as f:
            base = f.read().split('# --- config_extra ---\n')[0]
        self.config_extra = extra
        with open(self.config_file, 'w') as f:
            f.write(base + '# --- config_extra ---\n' + extra)

    def start_probe(self):
        # An ASan build must accept a preload library ahead of its runtime.
        asan = os.environ.get('ASAN_OPTIONS', '')
        asan = (asan + ':' if asan else '') + 'verify_asan_link_order=0'
        env = self._env(dict(self.nvidia_env(), **{
            'ASAN_OPTIONS': asan,
            'LD_PRELOAD': 'libumockdev-preload.so.0',
            'UMOCKDEV_DIR': self.umockdev_dir,
            'KGPU_RUNTIME_DIRECTORY': os.path.join(self.tmp, 'run', 'probe'),
            'KGPU_LABELS_FEATURE_FILE': self.feature_file,
            'KGPU_CDI_SPEC_DIRECTORY': self.cdi_dir,
        }))
        d = Daemon(self, 'probe', [self.bin('daemons', 'probe', 'kgpu-probed')] + self.probe_args, env).start()
        self.daemons['probe'] = d
        return d

    def start_broker(self):
        env = self._env({'KGPU_RUNTIME_DIRECTORY': os.path.join(self.tmp, 'run', 'broker')})
        d = Daemon(self, 'broker', [self.bin('daemons', 'broker', 'kgpu-brokerd')] + self.broker_args, env)
        old = self.daemons.get('broker')
        if old is not None:
            old.stop()  # reaps a killed instance, closes its notify socket
            d.returncodes = old.returncodes
        self.daemons['broker'] = d.start()
        return d

    def start_grpcd(self):
        env = self._env({'KGPU_RUNTIME_DIRECTORY': os.path.join(self.tmp, 'run', 'grpc')})
        d = Daemon(self, 'grpc', [self.bin('daemons', 'grpc', 'kgpu-grpcd')] + self.grpcd_args, env).start()
        self.daemons['grpc'] = d
        return d

    def set_fake_broker(self, state):
        """Replaces the fake broker's control state (it notices within 50 ms and sends
        ResourcesChanged)."""
        path = os.path.join(self.tmp, 'fake-broker.json')
        with open(path + '.new', 'w') as f:
            json.dump(state, f)
        os.chmod(path + '.new', 0o644)
        os.replace(path + '.new', path)
        self.fake_broker = state

    def start_fake_broker(self):
        """fake_broker.py, from a copy the broker's user can read, as that user when root."""
        script = os.path.join(self.tmp, 'fake_broker.py')
        shutil.copyfile(os.path.join(_HERE, 'fake_broker.py'), script)
        os.chmod(script, 0o644)
        self.set_fake_broker(self.fake_broker)
        argv = [sys.executable, '-I', script, self.bus_address, os.path.join(self.tmp, 'fake-broker.json')]
        if self.root:
            argv = ['setpriv', '--reuid=' + BROKER_USER, '--regid=' + _group_of(BROKER_USER),
                    '--clear-groups'] + argv
        d = Daemon(self, 'broker', argv, self._env({}), valgrind=False)
        self.daemons['broker'] = d.start()
        return d

    def start_clusterd(self, env=None, args=(), wait=True, timeout=10):
        """kgpu-clusterd from the build tree (as root when root: it drops to cluster.user
        itself), with the node's kgpu.yaml; env adds to the daemons' environment
        (KUBECONFIG, NODE_NAME, KUBERNETES_SERVICE_HOST/_PORT, KGPU_SERVICEACCOUNT_DIR,
        ...). wait: until io.kgpu.Cluster1 is on the bus. Files it must read have to be
        readable by kgpu-cluster (see cluster_readable())."""
        run = os.path.join(self.tmp, 'run', 'cluster')
        os.makedirs(run, exist_ok=True)
        e = self._env({'KGPU_RUNTIME_DIRECTORY': run})
        # Not the caller's: only what the test gives.
        for k in ('KUBECONFIG', 'NODE_NAME', 'KUBERNETES_SERVICE_HOST', 'KUBERNETES_SERVICE_PORT'):
            e.pop(k, None)
        e.update(env or {})
        d = Daemon(self, 'cluster', [self.bin('daemons', 'cluster', 'kgpu-clusterd')] + list(args), e)
        old = self.daemons.get('cluster')
        if old is not None:
            old.stop()
            d.returncodes = old.returncodes
        self.daemons['cluster'] = d.start()
        if wait:
            self.wait_bus_name(CLUSTER_BUS, timeout, d)
        return d

    def cluster_readable(self, *paths):
        """Makes files (and directories, recursively) readable by kgpu-clusterd's user:
        owned by it when root (the way a node gives it its kubeconfig), else left as they
        are (everything runs as the caller)."""
        if not self.root:
            return
        pw = pwd.getpwnam(CLUSTER_USER)
        for p in paths:
            for dirpath, _dirs, files in (os.walk(p) if os.path.isdir(p) else [(None, [], [p])]):
                if dirpath is not None:
                    os.chown(dirpath, pw.pw_uid, pw.pw_gid)
                for f in files:
                    os.chown(f if dirpath is None else os.path.join(dirpath, f), pw.pw_uid, pw.pw_gid)
            # The directories above must let it through.
            d = os.path.dirname(os.path.abspath(p))
            while d.startswith(self.tmp) and d != self.tmp:
                os.chmod(d, os.stat(d).st_mode | 0o711)
                d = os.path.dirname(d)

    def cluster_properties(self):
        """io.kgpu.Cluster1's properties as {name: value}."""
        r = self.busctl('call', CLUSTER_BUS, CLUSTER_PATH, 'org.freedesktop.DBus.Properties',
                        'GetAll', 's', CLUSTER_BUS)
        return {k: v['data'] for k, v in r['data'][0].items()}

    def wait_cluster(self, pred, timeout=20, what='io.kgpu.Cluster1 condition'):
        """Polls cluster_properties() until pred(props) is true; returns the props."""
        deadline = time.monotonic() + timeout
        props = None
        d = self.daemons.get('cluster')
        while time.monotonic() < deadline:
            if d is not None and not d.alive():
                raise RuntimeError('kgpu-clusterd exited (rc %s) while waiting for %s' % (d.proc.returncode, what))
            try:
                props = self.cluster_properties()
            except RuntimeError:
                props = None
            if props is not None and pred(props):
                return props
            time.sleep(0.05)
        raise TimeoutError('timed out after %ss waiting for %s; last %r' % (timeout, what, props))

    def restart_broker(self, timeout=10):
        self.start_broker()
        self.wait_bus_name(BROKER_BUS, timeout, self.daemons['broker'])

    # --- bus ---------------------------------------------------------------------------
    def busctl(self, *args, user=None, check=True, json_out=True, timeout=10):
        """Runs busctl on the private bus (as `user` via setpriv if given). Returns the
        parsed JSON (json_out) or the CompletedProcess when check is False."""
        argv = ['busctl', '--address=' + self.bus_address]
        if json_out:
            argv.append('--json=short')
        argv += list(args)
        if user is not None:
            argv = ['setpriv', '--reuid=' + user, '--regid=' + _group_of(user),
                    '--clear-groups'] + argv
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
        if not check:
            return r
        if r.returncode != 0:
            raise RuntimeError('%s failed (rc %d): %s' % (' '.join(argv), r.returncode,
                                                          r.stderr.decode(errors='replace').strip()))
        return json.loads(r.stdout) if json_out else r.stdout.decode()

    def call_as(self, user, dest, path, iface, method, sig='', args=(), timeout=30):
        """One method call on the node's bus made by `user` (setpriv and
        dbus_call_as.py); returns ('ok', [str(value), ...]) or ('error', name, message).
        Other users cannot read a checkout in a 0700 home directory (/root, a private
        $HOME), so the helper runs from a copy in the node's directory (0755)."""
        helper = os.path.join(self.tmp, 'dbus_call_as.py')
        if not os.path.exists(helper):
            shutil.copyfile(os.path.join(_HERE, 'dbus_call_as.py'), helper)
            os.chmod(helper, 0o644)
        req = json.dumps([self.bus_address, dest, path, iface, method, sig, list(args)])
        argv = ['setpriv', '--reuid=' + user, '--regid=' + _group_of(user), '--clear-groups',
                sys.executable, '-I', helper, req]
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, cwd=self.tmp)
        check(r.returncode == 0, 'helper as %s failed: %s' % (user, r.stderr.decode(errors='replace')))
        return tuple(json.loads(r.stdout))

    def name_has_owner(self, name):
        r = self.busctl('call', 'org.freedesktop.DBus', '/org/freedesktop/DBus',
                        'org.freedesktop.DBus', 'NameHasOwner', 's', name)
        return bool(r['data'][0])

    def wait_bus_name(self, name, timeout=10, daemon=None):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if daemon is not None and not daemon.alive():
                raise RuntimeError('%s exited (rc %s) before taking %s' % (
                    daemon.name, daemon.proc.returncode, name))
            if self.name_has_owner(name):
                return
            time.sleep(0.02)
        raise TimeoutError('%s did not appear on the bus within %ss' % (name, timeout))

    def wait_bus_name_gone(self, name, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.name_has_owner(name):
                return
            time.sleep(0.02)
        raise TimeoutError('%s still on the bus after %ss' % (name, timeout))

    def list_allocations(self):
        """Broker1.ListAllocations as [(id, resource, [device ids], created usec)]."""
        r = self.busctl('call', BROKER_BUS, BROKER_PATH, BROKER_BUS, 'ListAllocations')
        return [tuple(x) for x in r['data'][0]]

    # --- privileges --------------------------------------------------------------------
    def check_dropped(self, name, user):
        """Asserts the daemon runs with every uid/gid of `user`, no supplementary groups
        and no capabilities; returns the parsed /proc status."""
        pw = pwd.getpwnam(user)
        st = proc_status(self.daemons[name].pid)
        assert st['Uid'] == [pw.pw_uid] * 4, '%s: Uid %r, expected all %d (%s)' % (name, st['Uid'], pw.pw_uid, user)
        assert st['Gid'] == [pw.pw_gid] * 4, '%s: Gid %r, expected all %d' % (name, st['Gid'], pw.pw_gid)
        assert st.get('Groups', []) in ([], [pw.pw_gid]), '%s: supplementary groups %r' % (name, st['Groups'])
        for cap in ('CapPrm', 'CapEff', 'CapAmb', 'CapInh'):
            assert st[cap] == 0, '%s: %s = %#x, expected none' % (name, cap, st[cap])
        assert st['CapBnd'] == 0, '%s: bounding set %#x not cleared' % (name, st['CapBnd'])
        return st

    # --- stop --------------------------------------------------------------------------
    def stop(self, dump_on_unclean=False):
        """Stops everything; returns {daemon: exit code on SIGTERM} (ASan/LSan findings
        at exit show up as non-zero codes; dump_on_unclean prints the logs then)."""
        if self._stopped:
            return {}
        self._stopped = True
        rcs = {}
        if self.kubelet is not None:
            try:
                self.kubelet.stop()
            except Exception as e:  # keep tearing down
                self.log('kubelet sim stop: %s' % e)
        for name in ('cluster', 'grpc', 'broker', 'probe'):
            d = self.daemons.get(name)
            if d is not None:
                rcs[name] = d.stop()
        if self.testbed is not None:
            if self.testbed.poll() is None:
                try:
                    self.testbed.stdin.write(b'quit\n')
                    self.testbed.stdin.flush()
                    self.testbed.wait(3)
                except (OSError, subprocess.TimeoutExpired):
                    self.testbed.kill()
                    self.testbed.wait()
            for f in (self.testbed.stdin, self.testbed.stdout):
                with contextlib.suppress(OSError):
                    f.close()
            # the tool removes its directory on quit; make sure of it if it was killed
            if self.umockdev_dir and os.path.basename(self.umockdev_dir).startswith('umockdev.'):
                shutil.rmtree(self.umockdev_dir, ignore_errors=True)
        if self.nvidia_scenario and self.tmp:
            # `-d` daemons outlive the probe that started them, as real ones do.
            fake_nvidia.stop_daemons(self.tmp)
        if self.bus is not None:
            if self.bus.poll() is None:
                self.bus.terminate()
                try:
                    self.bus.wait(3)
                except subprocess.TimeoutExpired:
                    self.bus.kill()
                    self.bus.wait()
            self.bus.stdout.close()
        logs = os.path.join(self.tmp, 'logs') if self.tmp else ''
        if VALGRIND and os.path.isdir(logs):
            # Every instance counts, also those killed or restarted during the test.
            # Lines "--PID-- ..." are valgrind's own notes (e.g. "unhandled syscall 434",
            # pidfd_open, which the NVIDIA tool runner tries first), not memcheck findings.
            for f in sorted(os.listdir(logs)):
                if not f.startswith('valgrind-'):
                    continue
                with open(os.path.join(logs, f), errors='replace') as fp:
                    text = fp.read()
                if any(line and not re.match(r'--\d+-- ', line) for line in text.splitlines()):
                    rcs['valgrind'] = 1
                    print('----- %s -----\n%s' % (f, text))
        if any(rc not in (0, None) for rc in rcs.values()):
            self.log('unclean daemon exit on SIGTERM: %r' % rcs)
            if dump_on_unclean:
                self.dump_logs()
        if self._logfile:
            self._logfile.close()
            self._logfile = None
        if self.tmp and os.environ.get('KGPU_TEST_KEEP_TMP') != '1':
            shutil.rmtree(self.tmp, ignore_errors=True)
        elif self.tmp:
            print('harness: kept %s' % self.tmp)
        return rcs

    def dump_logs(self):
        if not self.tmp:
            return
        logs = os.path.join(self.tmp, 'logs')
        if not os.path.isdir(logs):
            return
        for f in sorted(os.listdir(logs)):
            try:
                with open(os.path.join(logs, f), errors='replace') as fp:
                    text = fp.read()
            except OSError:
                continue
            print('----- %s (last 200 lines) -----' % f)
            print('\n'.join(text.splitlines()[-200:]))
        for name, d in self.daemons.items():
            if d.notify:
                print('----- %s sd_notify: %r' % (name, [m for _, m in d.notify]))
        sys.stdout.flush()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if exc[0] is not None and not issubclass(exc[0], Skip):
            self.dump_logs()
        self.stop()
        return False


def _group_of(user):
    import grp
    return grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name


def exit_on_sigterm():
    """Turns SIGTERM (meson's timeout, a CI runner) into SystemExit, so that the
    except/finally/atexit paths stop every process the node started."""
    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)


def run_test(fn, need_root=False, **node_args):
    """Runs fn(node) on a fresh node; exits 0 (pass), 1 (fail) or 77 (skip)."""
    name = os.path.basename(sys.argv[0])
    exit_on_sigterm()
    if need_root and not is_root():
        print('SKIP %s: needs root (privilege drop, other uids on the bus)' % name)
        sys.exit(77)
    node = None
    try:
        node = Node(**node_args)
        node.start()
        fn(node)
    except Skip as e:
        print('SKIP %s: %s' % (name, e))
        if node:
            node.stop()
        sys.exit(77)
    except BaseException:
        traceback.print_exc()
        if node:
            node.dump_logs()
            node.stop()
        print('FAIL %s' % name)
        sys.exit(1)
    rcs = node.stop(dump_on_unclean=True)
    bad = {k: v for k, v in rcs.items() if v not in (0, None)}
    if bad:
        print('FAIL %s: daemons did not exit cleanly on SIGTERM: %r' % (name, bad))
        sys.exit(1)
    print('PASS %s (daemon exit codes on SIGTERM: %s)' % (name, rcs))
    sys.exit(0)


def check(cond, msg):
    """assert that survives python -O."""
    if not cond:
        raise AssertionError(msg)
