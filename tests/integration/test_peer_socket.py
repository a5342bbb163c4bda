#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_peer_socket.py — io.kgpu.Broker1 over the broker's peer socket: grpcd's hot path
# without the bus daemon, the same access rule and contract as on the bus, the fallback.
#
# Asserts (root only: other uids through setpriv). The broker listens on broker.socket
# (0666, owned by the broker's user). grpcd's Allocate, PreStartContainer and
# GetPreferredAllocation go over it: a dbus-monitor on the bus sees none of them while
# it sees a ListResources and a ListAllocations sent over the bus before and after (in
# bus order), and the allocation is recorded. On the peer socket: user daemon, made
# cluster.user for this node, may read (ListResources, GetDevices, Properties.Get) but
# is refused Allocate, PreStartContainer, Reconcile and Reload (io.kgpu.Error.AccessDenied);
# kgpu may Allocate; a user with no role (nobody) is refused at accept while the bus still
# answers its reads and denies its Allocate. Introspection of /io/kgpu/Broker1 over the
# peer socket and over the bus both match dbus/io.kgpu.Broker1.xml. At most 8 peer
# connections per uid; closed ones are freed (a ninth works after they close); a peer
# that pipelines calls and never reads is closed (64 answers waiting) while the broker
# keeps answering grpcd. A broker
# started with its socket elsewhere: grpcd says once that it uses the bus, every
# kubelet call still works (the monitor now sees Allocate), and with the socket back
# (broker restarted again) grpcd uses it again.

import importlib.util
import os
import pwd
import socket
import stat
import struct
import subprocess
import threading
import time

import harness
from harness import check, RES_I915, GPU_I915

B = (harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS)
CLUSTER = 'daemon'     # this node's cluster.user
ROLELESS = 'nobody'   # no role at all


class Monitor:
    """dbus-monitor on the node's bus, method calls to io.kgpu.Broker1 only."""

    def __init__(self, node):
        self.lines = []
        self.proc = subprocess.Popen(['dbus-monitor', '--address', node.bus_address,
                                      "type='method_call',interface='io.kgpu.Broker1'"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def members(self):
        out = []
        for line in list(self.lines):
            if line.startswith('method call') and 'member=' in line:
                out.append(line.split('member=')[1].split()[0])
        return out

    def mark(self, node, method='ListResources', timeout=10):
        """Sends method over the bus and waits until the monitor saw it: everything the
        bus relayed before is in self.lines then."""
        n = self.members().count(method)
        node.busctl('call', *B, method)
        deadline = time.monotonic() + timeout
        while self.members().count(method) <= n:
            check(time.monotonic() < deadline, 'dbus-monitor did not see %s: %r' % (method, self.lines[-5:]))
            time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=5)


def list_resources_call(serial):
    """A Broker1.ListResources method call, marshalled by hand (little endian, no body)."""
    fields = b''
    for code, sig, val in ((1, b'o', harness.BROKER_PATH), (2, b's', harness.BROKER_BUS),
                           (3, b's', 'ListResources')):
        fields += b'\0' * (-(16 + len(fields)) % 8)
        v = val.encode()
        fields += bytes([code, 1]) + sig + b'\0' + struct.pack('<I', len(v)) + v + b'\0'
    msg = struct.pack('<cBBBIII', b'l', 1, 0, 1, 0, serial, len(fields)) + fields
    return msg + b'\0' * (-len(msg) % 8)


def contract_members(xml_text):
    spec = importlib.util.spec_from_file_location(
        'check_introspection', os.path.join(harness.SOURCE_ROOT, 'tests', 'check-introspection.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import xml.etree.ElementTree as ET
    return mod.members(ET.fromstring(xml_text), {'io.kgpu.Broker1'})


def wait_for(what, fn, timeout=10):
    deadline = time.monotonic() + timeout
    while not fn():
        check(time.monotonic() < deadline, 'timed out waiting for ' + what)
        time.sleep(0.05)


def run(node):
    path = node.broker_socket
    peer = 'peer:unix:path=' + path
    st = os.lstat(path)
    check(stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666,
          '%s: mode %o' % (path, st.st_mode))
    check(st.st_uid == pwd.getpwnam(harness.BROKER_USER).pw_uid, '%s owned by uid %d' % (path, st.st_uid))
    grpc_uid = pwd.getpwnam(harness.GRPC_USER).pw_uid
    wait_for('grpcd on the peer socket', lambda: 'Peer connection of uid %d ' % grpc_uid
             in node.daemons['broker'].log_text())

    # grpcd's calls to the broker do not cross the bus.
    mon = Monitor(node)
    try:
        mon.mark(node)
        cl = node.kubelet.plugin(RES_I915)
        cl.wait_update(lambda d: len(d) > 0, timeout=5)
        check(cl.get_preferred_allocation([GPU_I915], [], 1) == [GPU_I915], 'GetPreferredAllocation')
        for _ in range(3):
            c = cl.allocate([GPU_I915])
            check(len(c['devices']) == 2, 'Allocate %r' % c)
            check(cl.pre_start_container([GPU_I915]), 'PreStartContainer')
        mon.mark(node, 'ListAllocations')
        seen = mon.members()
        for m in ('Allocate', 'PreStartContainer', 'GetPreferredAllocation', 'GetDevices'):
            check(m not in seen, '%s crossed the bus: %r' % (m, seen))
        allocs = node.busctl('call', *B, 'ListAllocations')['data'][0]
        check(any(a[1] == RES_I915 and a[2] == [GPU_I915] for a in allocs), 'not recorded: %r' % allocs)

        # The access rule on the peer socket: nobody is this node's cluster.user.
        ok = node.call_as(CLUSTER, None, harness.BROKER_PATH, harness.BROKER_BUS, 'ListResources', address=peer)
        check(ok[0] == 'ok' and RES_I915 in ok[1][0], CLUSTER + ': ListResources on the peer %r' % (ok,))
        ok = node.call_as(CLUSTER, None, harness.BROKER_PATH, harness.BROKER_BUS, 'GetDevices', 's', [RES_I915],
                          address=peer)
        check(ok[0] == 'ok' and GPU_I915 in ok[1][0], CLUSTER + ': GetDevices on the peer %r' % (ok,))
        ok = node.call_as(CLUSTER, None, harness.BROKER_PATH, 'org.freedesktop.DBus.Properties', 'Get', 'ss',
                          [harness.BROKER_BUS, 'Version'], address=peer)
        check(ok[0] == 'ok', CLUSTER + ': Properties.Get on the peer %r' % (ok,))
        for method, sig, args in (('Allocate', 'saas', [RES_I915, [[GPU_I915]]]),
                                  ('PreStartContainer', 'sas', [RES_I915, [GPU_I915]]),
                                  ('Reconcile', 'a(sassss)', [[]]),
                                  ('Reload', '', [])):
            r = node.call_as(CLUSTER, None, harness.BROKER_PATH, harness.BROKER_BUS, method, sig, args, address=peer)
            check(r[0] == 'error' and r[1] == 'io.kgpu.Error.AccessDenied',
                  CLUSTER + ': %s on the peer socket: %r' % (method, r))
        r = node.call_as(harness.GRPC_USER, None, harness.BROKER_PATH, harness.BROKER_BUS, 'Allocate', 'saas',
                         [RES_I915, [[GPU_I915]]], address=peer)
        check(r[0] == 'ok', 'kgpu: Allocate on the peer socket %r' % (r,))

        # A uid that may only read is refused at accept; the bus serves its reads.
        r = node.call_as(ROLELESS, None, harness.BROKER_PATH, harness.BROKER_BUS, 'ListResources', address=peer)
        check(r[0] == 'error', '%s: a peer connection was accepted: %r' % (ROLELESS, r))
        r = node.call_as(ROLELESS, harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS, 'ListResources')
        check(r[0] == 'ok', '%s: ListResources on the bus %r' % (ROLELESS, r))
        r = node.call_as(ROLELESS, harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS, 'Allocate',
                         'saas', [RES_I915, [[GPU_I915]]])
        check(r[0] == 'error' and 'AccessDenied' in r[1], '%s: Allocate on the bus %r' % (ROLELESS, r))

        # One contract on both transports.
        xml = open(os.path.join(harness.SOURCE_ROOT, 'dbus', 'io.kgpu.Broker1.xml')).read()
        want = contract_members(xml)
        for label, dest, addr in (('peer', None, peer), ('bus', harness.BROKER_BUS, None)):
            r = node.call_as('root', dest, harness.BROKER_PATH, 'org.freedesktop.DBus.Introspectable', 'Introspect',
                             address=addr)
            check(r[0] == 'ok', 'Introspect over the %s: %r' % (label, r))
            got = contract_members(r[1][0])
            check(got == want, 'introspection over the %s differs from the XML: only there %r, only in the XML %r'
                  % (label, sorted(got.get('io.kgpu.Broker1', set()) - want['io.kgpu.Broker1'], key=str),
                     sorted(want['io.kgpu.Broker1'] - got.get('io.kgpu.Broker1', set()), key=str)))

        # Bounds: 8 connections per uid; closed ones are freed.
        def hello(s):
            s.sendall(b'\0AUTH EXTERNAL\r\n')
            s.settimeout(5)
            return s.recv(256)
        socks = []
        for i in range(8):
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            check(hello(s).startswith(b'DATA') or hello(s).startswith(b'OK'), 'connection %d not served' % i)
            socks.append(s)
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.settimeout(5)
        try:
            s.sendall(b'\0AUTH EXTERNAL\r\n')
            got = s.recv(256)
        except (ConnectionResetError, BrokenPipeError):
            got = b''
        check(got == b'', 'a ninth connection of uid 0 was served: %r' % got)
        s.close()
        for s in socks:
            s.close()
        wait_for('closed peers freed', lambda: node.call_as('root', None, harness.BROKER_PATH, harness.BROKER_BUS,
                                                            'ListResources', address=peer)[0] == 'ok')

        # A peer that sends and never reads is closed; the broker goes on serving.
        slow = socket.socket(socket.AF_UNIX)
        slow.connect(path)
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.settimeout(5)
        slow.sendall(b'\0AUTH EXTERNAL\r\n')
        check(slow.recv(64).startswith(b'DATA'), 'slow peer: no DATA')
        slow.sendall(b'DATA\r\n')
        check(slow.recv(64).startswith(b'OK '), 'slow peer: not authenticated')
        slow.sendall(b'BEGIN\r\n' + b''.join(list_resources_call(i + 1) for i in range(64)))
        slow.setblocking(False)
        sent = 64
        deadline = time.monotonic() + 30
        closing = 'messages wait for it to read'
        while closing not in node.daemons['broker'].log_text():
            check(time.monotonic() < deadline, 'the broker kept a peer that does not read (%d calls sent)' % sent)
            try:
                slow.send(b''.join(list_resources_call(sent + i + 1) for i in range(64)))
                sent += 64
            except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                time.sleep(0.01)
            c = cl.allocate([GPU_I915])     # the broker answers others meanwhile
            check(len(c['devices']) == 2, 'Allocate beside a slow peer %r' % c)
        slow.close()

        # The socket missing: grpcd falls back to the bus, and says so once.
        grpc_log = node.daemons['grpc'].log_text
        fallback = "Cannot use the broker's peer socket"
        node.broker_args = node.broker_args + ['--broker-socket=' + path + '.elsewhere']
        node.restart_broker()
        wait_for('grpcd to see the new broker', lambda: fallback in grpc_log(), timeout=15)
        mon.mark(node)
        for _ in range(3):
            c = cl.allocate([GPU_I915])
            check(len(c['devices']) == 2, 'Allocate over the bus %r' % c)
        mon.mark(node, 'ListAllocations')
        check('Allocate' in mon.members(), 'no Allocate on the bus after the fallback: %r' % mon.members())
        check(grpc_log().count(fallback) == 1, 'fallback logged %d times' % grpc_log().count(fallback))

        # The socket back: used again.
        node.broker_args = node.broker_args[:-1]
        node.restart_broker()
        wait_for('grpcd back on the peer socket', lambda: 'over its peer socket' in grpc_log(), timeout=15)
        wait_for('grpcd on the new peer socket', lambda: node.daemons['broker'].log_text().count(
            'Peer connection of uid %d ' % grpc_uid) >= 1, timeout=15)
        mon.mark(node)
        n = mon.members().count('Allocate')
        for _ in range(3):
            cl.allocate([GPU_I915])
        mon.mark(node, 'ListAllocations')
        check(mon.members().count('Allocate') == n, 'Allocate crossed the bus again: %r' % mon.members())
    finally:
        mon.stop()


if __name__ == '__main__':
    harness.run_test(run, need_root=True, broker_args=['--cluster-user=' + CLUSTER])
