#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# bus_daemons.py — the private system-like message bus of the integration tests and the
# benchmark, run by either of the two bus daemons Linux distributions ship as the
# system bus: dbus-daemon (Debian, Ubuntu) or dbus-broker (Fedora, Arch).
#
# Contract: selected() names the daemon KGPU_TEST_BUS asks for ("dbus-daemon", the
# default, or "dbus-broker"; anything else raises ValueError). start_dbus_broker() starts
# dbus-broker on the same configuration file harness.py writes for dbus-daemon
# (bus.conf.in: <type>system</type>, the project's policy files, the test's listen path)
# and returns a BrokerBus once the bus is ready, or raises (with the launcher's log)
# or Skip when it cannot run here.
#
# The recipe, without systemd as PID 1. dbus-broker is two programs: dbus-broker itself
# takes no configuration files, only a controller socket over which a launcher hands it
# the listening socket and the compiled policy; dbus-broker-launch is that launcher, it
# reads dbus-daemon's XML configuration (with --config-file, as dbus.service on Fedora
# runs it) and is what every distribution runs, so it is what is tested here: its XML →
# policy translation is part of what kgpu relies on. It differs from dbus-daemon in three
# ways that matter without systemd:
#  1. It ignores <listen> and takes its listening socket only by socket activation
#     (LISTEN_FDS=1, LISTEN_PID = its own pid, the socket on fd 3), as dbus.socket
#     passes it. Here the harness binds and listens on the test's path itself, makes it
#     world-accessible (0666, SocketMode= of dbus.socket; dbus-daemon does the same for
#     its own socket) and execs the launcher from bash, which moves the socket to fd 3
#     and sets LISTEN_PID=$$ (no systemd-socket-activate: it would exec the launcher
#     only at the first connection, and make the socket 0644).
#  2. It logs only to the journal, through the hard-coded /run/systemd/journal/socket,
#     and exits at start when it cannot connect to it. The launcher therefore runs in a
#     private mount namespace (unshare -m, root only) with a small tmpfs on /run/systemd
#     and the harness's own datagram socket bound at journal/socket there; the harness
#     reads the journal's native protocol and writes every record, with the broker's
#     policy denials, to logs/dbus-broker.log. The host's /run is not touched. Not root:
#     used as is if the host has a journal (records then go to the host's journal), else
#     Skip.
#  3. It connects to the bus it runs as a client of its own, through the system bus
#     address (sd_bus_open_system), and exits when that fails: DBUS_SYSTEM_BUS_ADDRESS is
#     the test's bus. It says "READY=1" over $NOTIFY_SOCKET (a Type=notify service)
#     before it has handed the broker the listening socket, so the readiness waited for
#     is its journal record "Ready", logged once listener, policy and its own connection
#     are in place (without the private journal: READY=1 and then a Hello answered).
# Bus activation would go through systemd (org.freedesktop.systemd1.Activator); the test
# configuration has no service directories, so nothing is activated on either daemon.

import os
import socket
import struct
import subprocess
import threading
import time

BUS_DAEMONS = ('dbus-daemon', 'dbus-broker')


def selected():
    """The bus daemon KGPU_TEST_BUS names (dbus-daemon when unset or empty)."""
    v = os.environ.get('KGPU_TEST_BUS') or 'dbus-daemon'
    if v not in BUS_DAEMONS:
        raise ValueError('KGPU_TEST_BUS=%r: expected one of %s' % (v, ', '.join(BUS_DAEMONS)))
    return v


def parse_journal_record(data):
    """Fields of one datagram of the journal's native protocol: "KEY=value\\n", or for a
    value that may hold newlines "KEY\\n", its length as 64-bit little endian, the value
    and "\\n". Returns [(key, value)]; stops at the first malformed field."""
    out = []
    i = 0
    n = len(data)
    while i < n:
        nl = data.find(b'\n', i)
        if nl < 0:
            break
        line = data[i:nl]
        eq = line.find(b'=')
        if eq >= 0:
            out.append((line[:eq].decode(errors='replace'), line[eq + 1:].decode(errors='replace')))
            i = nl + 1
            continue
        if nl + 9 > n:
            break
        size = struct.unpack('<Q', data[nl + 1:nl + 9])[0]
        start = nl + 9
        if start + size + 1 > n:
            break
        out.append((line.decode(errors='replace'), data[start:start + size].decode(errors='replace')))
        i = start + size + 1
    return out


class JournalSink:
    """A datagram socket speaking just enough of journald's native protocol: each record
    becomes one line "<priority> MESSAGE [KEY=value ...]" in the log file (fields of the
    broker's own, DBUS_BROKER_*, kept; the source location dropped)."""

    def __init__(self, directory, log_path, t0):
        os.makedirs(directory, exist_ok=True)
        os.chmod(directory, 0o755)
        self.path = os.path.join(directory, 'socket')
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o666)
        self.sock.settimeout(0.2)
        self.log = open(log_path, 'ab')
        self.t0 = t0
        self.records = []
        self.lock = threading.Lock()
        self._stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self._stop:
            try:
                data, anc, _, _ = self.sock.recvmsg(256 * 1024, socket.CMSG_SPACE(4 * 4))
            except socket.timeout:
                continue
            except OSError:
                return
            # A record too large for one datagram comes as a sealed memfd.
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    for (fd,) in struct.iter_unpack('i', payload[:len(payload) - len(payload) % 4]):
                        try:
                            data += os.pread(fd, 1 << 20, 0)
                        finally:
                            os.close(fd)
            fields = parse_journal_record(data)
            d = dict(fields)
            extra = ' '.join('%s=%s' % (k, v) for k, v in fields if k.startswith('DBUS_BROKER_'))
            line = '[%10.6f] <%s> %s%s\n' % (time.monotonic() - self.t0, d.get('PRIORITY', '?'),
                                             d.get('MESSAGE', '(no MESSAGE)'), ' ' + extra if extra else '')
            with self.lock:
                self.records.append(d)
                self.log.write(line.encode())
                self.log.flush()

    def has_message(self, message):
        with self.lock:
            return any(r.get('MESSAGE') == message for r in self.records)

    def close(self):
        self._stop = True
        self.thread.join(1)
        self.sock.close()
        self.log.close()


# The launcher's shell (bash: dash takes only one-digit descriptors in redirections):
# the listening socket to fd 3, a private /run/systemd with the harness's journal
# socket (when $3 is 1), then exec with LISTEN_PID=$$.
_LAUNCH_SH = r'''set -eu
fd=$1 journal=$2 private=$3
shift 3
if [ "$private" = 1 ]; then
        mount -t tmpfs -o mode=0755,size=64k kgpu-test-run /run/systemd
        mkdir /run/systemd/journal
        mount --bind "$journal" /run/systemd/journal
fi
if [ "$fd" != 3 ]; then
        eval "exec 3<&$fd $fd<&-"
fi
LISTEN_FDS=1 LISTEN_PID=$$
export LISTEN_FDS LISTEN_PID
unset LISTEN_FDNAMES
exec "$@"
'''


def _hello(socket_path):
    """Whether the bus at socket_path answers Hello (busctl connects and says it)."""
    r = subprocess.run(['busctl', '--address=unix:path=' + socket_path, 'call', 'org.freedesktop.DBus',
                        '/org/freedesktop/DBus', 'org.freedesktop.DBus', 'GetId'],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=5)
    return r.returncode == 0


def _running(pid):
    """Whether pid is a process that has not exited (a zombie has: the orphaned broker
    waits for whoever is PID 1 to reap it)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] not in ('Z', 'X')
    except (OSError, IndexError):
        return False


class BrokerBus:
    """dbus-broker-launch (and the dbus-broker it forks) for one test node; quacks like
    the subprocess.Popen of dbus-daemon the harness keeps (pid, poll, terminate, wait,
    kill), plus close() for the journal sink."""

    def __init__(self, proc, sink, notify):
        self.proc = proc
        self.sink = sink
        self.notify = notify
        self.stdout = None
        # The dbus-broker the launcher forked: it quits when the launcher's controller
        # socket closes, moments after the launcher, and wait() waits for that too.
        try:
            with open('/proc/%d/task/%d/children' % (proc.pid, proc.pid)) as f:
                self.broker_pids = [int(x) for x in f.read().split()]
        except OSError:
            self.broker_pids = []

    @property
    def pid(self):
        return self.proc.pid

    def poll(self):
        return self.proc.poll()

    def terminate(self):
        self.proc.terminate()

    def kill(self):
        self.proc.kill()

    def wait(self, timeout=None):
        rc = self.proc.wait(timeout)
        deadline = time.monotonic() + (timeout if timeout is not None else 10)
        while self.broker_pids and time.monotonic() < deadline:
            self.broker_pids = [p for p in self.broker_pids if _running(p)]
            time.sleep(0.01)
        return rc

    def close(self):
        if self.sink is not None:
            self.sink.close()
            self.sink = None
        if self.notify is not None:
            self.notify.close()
            self.notify = None


def start_dbus_broker(conf_path, socket_path, tmp, log_path, t0, skip_exc=RuntimeError, timeout=10):
    """Starts dbus-broker-launch --scope=system --config-file=conf_path serving a socket
    bound at socket_path; returns a BrokerBus once it is ready (see the top). tmp: a
    directory of the node's for the notify and journal sockets. skip_exc: raised (with the reason) where
    dbus-broker cannot run here."""
    for prog in ('dbus-broker-launch', 'dbus-broker'):
        if not any(os.access(os.path.join(d, prog), os.X_OK) for d in os.environ.get('PATH', '').split(':') + ['/usr/bin']):
            raise skip_exc('%s is not installed (scripts/setup-deps.sh installs dbus-broker)' % prog)
    private = os.geteuid() == 0
    if private and not os.path.isdir('/run/systemd'):
        # Nothing to mount the private tmpfs on, and the host's /run is not changed.
        private = False
    if not private:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            probe.connect('/run/systemd/journal/socket')
        except OSError:
            raise skip_exc('dbus-broker-launch logs only to /run/systemd/journal/socket: this host has no '
                           'journal and a private one needs root (unshare -m) and a /run/systemd to mount on')
        finally:
            probe.close()

    log = open(log_path, 'ab')
    sink = JournalSink(os.path.join(tmp, 'bus-journal'), log_path, t0) if private else None
    listen = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
    proc = None
    try:
        listen.bind(socket_path)
        os.chmod(socket_path, 0o666)
        listen.listen(4096)
        notify_path = os.path.join(tmp, 'bus-notify')
        notify.bind(notify_path)
        notify.settimeout(0.01)
        env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'LANG': 'C.UTF-8', 'NOTIFY_SOCKET': notify_path,
               'DBUS_SYSTEM_BUS_ADDRESS': 'unix:path=' + socket_path}
        journal_dir = os.path.dirname(sink.path) if sink else '-'
        argv = ['bash', '-c', _LAUNCH_SH, 'bash', str(listen.fileno()), journal_dir, '1' if private else '0',
                'dbus-broker-launch', '--scope=system', '--config-file=' + conf_path]
        if private:
            argv = ['unshare', '--mount', '--propagation', 'private'] + argv
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                pass_fds=(listen.fileno(),))
        log.close()
        listen.close()   # the launcher holds it now
        deadline = time.monotonic() + timeout
        notified = False
        while True:
            try:
                notified |= 'READY=1' in notify.recv(4096).decode(errors='replace').splitlines()
            except socket.timeout:
                pass
            if sink is not None:
                if sink.has_message('Ready'):
                    break
            elif notified and _hello(socket_path):
                break
            if proc.poll() is not None:
                raise RuntimeError('dbus-broker-launch exited (rc %s) before it was ready; see %s' % (
                    proc.returncode, log_path))
            if time.monotonic() > deadline:
                raise RuntimeError('dbus-broker-launch not ready within %ss; see %s' % (timeout, log_path))
        return BrokerBus(proc, sink, notify)
    except BaseException:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        listen.close()
        notify.close()
        if sink is not None:
            sink.close()
        raise
