#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_bus_policy.py — the project's bus policy (dbus/*.conf) enforced the same by both
# system bus daemons kgpu meets: dbus-daemon (Debian, Ubuntu) and dbus-broker (Fedora,
# Arch). dbus-broker reads the same XML through dbus-broker-launch, but compiles it into
# its own rule tables; this shows the two agree on every rule kgpu's policy has.
#
# For each daemon, a node (probe and broker, as root: they own their names as root and
# kgpu-broker) and, as each of root, kgpu, kgpu-broker, kgpu-cluster, nobody and daemon
# (uid 1), over one connection each (dbus_policy_probe.py under setpriv):
#  - RequestName of io.kgpu.Broker1, io.kgpu.Probe1 (both owned) and io.kgpu.Unclaimed1
#    (owned by no one; no policy names it): allowed (EXISTS / PRIMARY_OWNER) or
#    org.freedesktop.DBus.Error.AccessDenied (own rules, default and user contexts);
#  - every method of every interface of dbus/io.kgpu.Broker1.xml and io.kgpu.Probe1.xml
#    on its object, and Properties Get/GetAll/Set, Introspect, Peer.Ping and
#    GetManagedObjects, each with the interface and once without one (a method call's
#    interface is optional; sd-bus then dispatches on the member alone), always with a
#    signature the method does not take, so that a call the bus lets through fails in
#    the daemon with InvalidArgs/UnknownMethod and changes nothing: the outcome is
#    "denied" (the bus's AccessDenied) or "delivered" (send_member, send_interface,
#    user and default contexts);
#  - a call to io.kgpu.Unclaimed1: the bus's error for a name with no owner
#    (ServiceUnknown, or NameHasNoOwner where the caller asked for no auto-start; kgpu's
#    callers treat both as "absent": daemons/grpc/convert.c, kgpuctl); printed per daemon.
# Asserts: both daemons give the same outcome for every (user, request); a few outcomes
# the policy text fixes (nobody may not call Allocate or Rescan or own io.kgpu.Broker1,
# kgpu may call Allocate but not Rescan, kgpu-broker may own io.kgpu.Broker1 and call
# Rescan, kgpu-cluster only SetNodeConfig/SetGasPods where the XML has them, everyone may
# Get properties and call ListResources), so that two equally wrong daemons fail too.
# Then, on each daemon, the trap the packages' postinst order is for: a policy naming a
# user that does not exist when the bus reads it is dropped, stays dropped once the user
# exists, and applies once ReloadConfig (org.freedesktop.DBus, as root) returns.
# Needs root (other uids, useradd/userdel of a throwaway system user).

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import harness
from harness import check

USERS = ('root', 'kgpu', 'kgpu-broker', 'kgpu-cluster', 'nobody', 'daemon')
UNCLAIMED = 'io.kgpu.Unclaimed1'
LATE_USER = 'kgpu-test-late'
LATE_NAME = 'io.kgpu.TestLate1'
LATE_POLICY = ('  <policy user="%s">\n    <allow own="%s"/>\n  </policy>\n' % (LATE_USER, LATE_NAME))
OBJECTS = {'io.kgpu.Broker1': '/io/kgpu/Broker1', 'io.kgpu.Probe1': '/io/kgpu/Probe1'}
STANDARD = [('org.freedesktop.DBus.Properties', 'Get', 'ss'), ('org.freedesktop.DBus.Properties', 'GetAll', 's'),
            ('org.freedesktop.DBus.Properties', 'Set', 'ssv'),
            ('org.freedesktop.DBus.Introspectable', 'Introspect', ''),
            ('org.freedesktop.DBus.Peer', 'Ping', ''),
            ('org.freedesktop.DBus.ObjectManager', 'GetManagedObjects', '')]


def xml_methods(dest):
    """(interface, member, in-signature) of every method dbus/<dest>.xml declares."""
    root = ET.parse(os.path.join(harness.SOURCE_ROOT, 'dbus', dest + '.xml')).getroot()
    out = []
    for iface in root.iter('interface'):
        for m in iface.iter('method'):
            sig = ''.join(a.get('type') for a in m.iter('arg') if a.get('direction', 'in') == 'in')
            out.append((iface.get('name'), m.get('name'), sig))
    return out


def requests():
    """[(label, request)] for dbus_policy_probe.py."""
    reqs = [('own %s' % n, ['own', n]) for n in list(OBJECTS) + [UNCLAIMED]]
    for dest, path in OBJECTS.items():
        for iface, member, sig in xml_methods(dest) + STANDARD:
            # A signature the method does not take: the daemon refuses it unrun.
            bad_sig, args = ('s', ['x']) if sig == '' else ('', [])
            reqs.append(('%s %s.%s' % (dest, iface, member), ['call', dest, path, iface, member, bad_sig, args]))
            reqs.append(('%s (no interface).%s' % (dest, member), ['call', dest, path, None, member, bad_sig, args]))
    reqs.append(('call %s' % UNCLAIMED, ['call', UNCLAIMED, '/', 'org.freedesktop.DBus.Peer', 'Ping', '', []]))
    return reqs


def outcome(label, res):
    """'denied', 'delivered', or for the unowned name its error class."""
    if res[0] == 'error' and res[1] == 'org.freedesktop.DBus.Error.AccessDenied':
        return 'denied'
    if label.startswith('own '):
        return 'allowed' if res[0] == 'ok' else 'error %s' % res[1]
    if label.startswith('call %s' % UNCLAIMED):
        ok = res[0] == 'error' and res[1] in ('org.freedesktop.DBus.Error.ServiceUnknown',
                                               'org.freedesktop.DBus.Error.NameHasNoOwner')
        return 'no owner' if ok else 'unexpected %r' % (res,)
    # Delivered: the daemon answered (it refuses the wrong signature or the member; sd-bus
    # answers org.freedesktop.DBus.Peer.Ping whatever its arguments).
    if res[0] == 'ok' and '.Peer.Ping' in label:
        return 'delivered'
    if res[0] == 'error' and (res[1].startswith('org.freedesktop.DBus.Error.Unknown') or
                              res[1] == 'org.freedesktop.DBus.Error.InvalidArgs'):
        return 'delivered'
    return 'unexpected %r' % (res,)


def probe_as(node, user, reqs):
    helper = os.path.join(node.tmp, 'dbus_policy_probe.py')
    if not os.path.exists(helper):
        shutil.copyfile(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'dbus_policy_probe.py'), helper)
        os.chmod(helper, 0o644)
    argv = ['setpriv', '--reuid=' + user, '--regid=' + harness._group_of(user), '--clear-groups',
            sys.executable, '-I', helper, json.dumps([node.bus_address, [r for _, r in reqs]])]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, cwd=node.tmp)
    check(r.returncode == 0, 'probe as %s failed: %s' % (user, r.stderr.decode(errors='replace')))
    return json.loads(r.stdout)


def late_user_trap(node):
    """The policy for LATE_USER was read while the user did not exist."""
    subprocess.run(['useradd', '--system', '--no-create-home', '--shell', '/usr/sbin/nologin', LATE_USER],
                   check=True)
    try:
        own = [('own', ['own', LATE_NAME])]
        before = probe_as(node, LATE_USER, own)[0]
        check(outcome('own ', before) == 'denied',
              '%s: a rule for a user created after the bus read it applies without a reload: %r'
              % (node.bus_impl, before))
        node.busctl('call', 'org.freedesktop.DBus', '/org/freedesktop/DBus', 'org.freedesktop.DBus',
                    'ReloadConfig', json_out=False)
        after = probe_as(node, LATE_USER, own)[0]
        check(outcome('own ', after) == 'allowed',
              '%s: after ReloadConfig returned, %s may still not own %s: %r' % (node.bus_impl, LATE_USER,
                                                                              LATE_NAME, after))
        print('%s: policy for a missing user dropped; applied after ReloadConfig' % node.bus_impl)
    finally:
        subprocess.run(['userdel', LATE_USER], check=False)


def matrix(bus):
    reqs = requests()
    out = {}
    with harness.Node(bus=bus, grpcd=False, kubelet=False, bus_policy=LATE_POLICY) as node:
        exe = os.path.basename(os.readlink('/proc/%d/exe' % node.bus.pid))
        check(exe == {'dbus-daemon': 'dbus-daemon', 'dbus-broker': 'dbus-broker-launch'}[bus],
              'the bus of the %s node runs %s' % (bus, exe))
        for user in USERS:
            for (label, _), res in zip(reqs, probe_as(node, user, reqs)):
                out[(user, label)] = (outcome(label, res), res)
        late_user_trap(node)
        for d in ('probe', 'broker'):
            check(node.daemons[d].alive(), '%s died during the probing on %s' % (d, bus))
    return out


def main():
    harness.exit_on_sigterm()
    if not harness.is_root():
        print('SKIP test_bus_policy.py: needs root (other uids on the bus, a throwaway user)')
        sys.exit(77)
    harness.ensure_users()
    for u in ('kgpu-cluster',):
        if subprocess.run(['id', u], capture_output=True).returncode != 0:
            subprocess.run(['useradd', '--system', '--no-create-home', '--shell', '/usr/sbin/nologin', u], check=True)
    if subprocess.run(['id', LATE_USER], capture_output=True).returncode == 0:
        subprocess.run(['userdel', LATE_USER], check=True)   # left by an interrupted run
    try:
        got = {bus: matrix(bus) for bus in ('dbus-daemon', 'dbus-broker')}
    except harness.Skip as e:
        print('SKIP test_bus_policy.py: %s' % e)
        sys.exit(77)
    d, b = got['dbus-daemon'], got['dbus-broker']
    check(set(d) == set(b), 'different requests')
    diff = [(k, d[k], b[k]) for k in sorted(d) if d[k][0] != b[k][0]]
    for k, x, y in diff:
        print('DIFFERENT %-14s %-64s dbus-daemon %s, dbus-broker %s\n    %r\n    %r' % (k[0], k[1], x[0], y[0],
                                                                                          x[1], y[1]))
    odd = [(k, v) for k, v in sorted(d.items()) + sorted(b.items()) if v[0].startswith(('unexpected', 'error'))]
    for k, v in odd:
        print('UNEXPECTED %s %s: %r' % (k[0], k[1], v[1]))
    check(not diff, '%d outcomes differ between dbus-daemon and dbus-broker' % len(diff))
    check(not odd, '%d unexpected answers' % len(odd))

    # What the policy text fixes, whichever daemon.
    def o(user, label):
        return d[(user, label)][0]
    B, P = 'io.kgpu.Broker1 io.kgpu.Broker1.', 'io.kgpu.Probe1 io.kgpu.Probe1.'
    expect = [('nobody', B + 'Allocate', 'denied'), ('nobody', P + 'Rescan', 'denied'),
              ('nobody', 'own io.kgpu.Broker1', 'denied'), ('kgpu', 'own io.kgpu.Probe1', 'denied'),
              ('kgpu', B + 'Allocate', 'delivered'), ('kgpu', P + 'Rescan', 'denied'),
              ('kgpu', 'io.kgpu.Probe1 io.kgpu.Kubelet1.OpenPluginSocket', 'delivered'),
              ('kgpu-broker', 'own io.kgpu.Broker1', 'allowed'), ('kgpu-broker', P + 'Rescan', 'delivered'),
              ('kgpu-broker', B + 'Allocate', 'denied'), ('root', 'own io.kgpu.Probe1', 'allowed'),
              ('nobody', 'io.kgpu.Broker1 org.freedesktop.DBus.Properties.Get', 'delivered'),
              ('nobody', 'io.kgpu.Broker1 org.freedesktop.DBus.Properties.Set', 'denied'),
              ('daemon', B + 'ListResources', 'delivered'),
              ('nobody', 'io.kgpu.Broker1 (no interface).ListResources', 'denied'),
              ('kgpu-cluster', B + 'Allocate', 'denied'), ('nobody', 'own ' + UNCLAIMED, 'denied'),
              ('root', 'call ' + UNCLAIMED, 'no owner')]
    for member in ('SetNodeConfig', 'SetGasPods'):
        if (('kgpu-cluster', B + member)) in d:
            expect += [('kgpu-cluster', B + member, 'delivered'), ('nobody', B + member, 'denied'),
                       ('kgpu', B + member, 'delivered')]
    for user, label, want in expect:
        check(o(user, label) == want, '%s %s: %s, the policy says %s' % (user, label, o(user, label), want))
    n_denied = sum(1 for v in d.values() if v[0] == 'denied')
    print('%d requests x %d users: the same outcome on both daemons (%d denied by the policy); '
          'no owner: dbus-daemon %s, dbus-broker %s' % (
              len(requests()), len(USERS), n_denied, d[('root', 'call ' + UNCLAIMED)][1][1],
              b[('root', 'call ' + UNCLAIMED)][1][1]))
    print('PASS test_bus_policy.py on dbus-daemon and dbus-broker')


if __name__ == '__main__':
    try:
        main()
    except AssertionError as e:
        print('FAIL test_bus_policy.py: %s' % e)
        sys.exit(1)
