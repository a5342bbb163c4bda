#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_hostile_dbus.py — every io.kgpu.Broker1 and io.kgpu.Probe1 method given hostile
# input over a real dbus-daemon: wrong argument types, huge arrays, over-long strings,
# unknown ids, unknown members and objects, and callers whose uid may not call them.
#
# Asserts, on a whole node with the project's bus policy:
#  - each bad call fails with the error name in the table below (never a timeout, never
#    a crash), the daemons stay up and keep serving (ListResources, GetDevices,
#    GetManagedObjects), and no failed call left an allocation behind;
#  - uid nobody and uid kgpu-broker are refused Allocate, PreStartContainer, Reconcile and
#    Reload by the policy (org.freedesktop.DBus.Error.AccessDenied), nobody and kgpu are
#    refused Probe1.Rescan, nobody and kgpu-broker every io.kgpu.Kubelet1 method (the
#    kubelet's directories are the front end's business only); reads (ListResources)
#    work for nobody; OpenPluginSocket refuses path-like and foreign resource names;
# and on a second node whose bus config allows every call (a mandatory allow-all
# policy), so that only the daemons' own uid checks stand:
#  - uids nobody and daemon get io.kgpu.Error.AccessDenied from the broker itself for
#    the four mutations, nobody and kgpu from the probe for Rescan, nobody and
#    kgpu-broker from the probe for the Kubelet1 methods; root (Allocate), kgpu-broker
#    (Rescan) and kgpu (ConnectKubelet) still pass.
# Calls as other uids go through `setpriv` and dbus_call_as.py (dbus-python), run from a
# copy in the node's directory so that a checkout in a 0700 home works.
# Needs root (other uids, privilege drop).

import os

import dbus

import harness
from harness import check, RES_I915, GPU_I915

BROKER = (harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS)
PROBE = (harness.PROBE_BUS, '/io/kgpu/Probe1', harness.PROBE_BUS)
KUBELET = (harness.PROBE_BUS, '/io/kgpu/Probe1', 'io.kgpu.Kubelet1')
KUBELET_CALLS = [('ConnectKubelet', '', []), ('ConnectPodResources', '', []),
                 ('OpenPluginSocket', 's', [RES_I915]), ('ClosePluginSocket', 'st', [RES_I915, 1])]

INVALID_ARGS = 'org.freedesktop.DBus.Error.InvalidArgs'
BUS_DENIED = 'org.freedesktop.DBus.Error.AccessDenied'
KGPU_DENIED = 'io.kgpu.Error.AccessDenied'

ALLOW_ALL = ('  <policy context="mandatory">\n'
             '    <allow send_destination="*"/>\n'
             '  </policy>\n')


def call(address, dest, path, iface, method, sig='', args=(), timeout=15):
    """One method call; returns ('ok', reply) or ('error', name, message)."""
    bus = dbus.bus.BusConnection(address)
    try:
        r = bus.call_blocking(dest, path, iface, method, sig, list(args), timeout=timeout)
        return ('ok', r)
    except dbus.exceptions.DBusException as e:
        return ('error', e.get_dbus_name(), e.get_dbus_message() or '')
    finally:
        bus.close()


def call_as(node, user, dest, path, iface, method, sig='', args=()):
    """The same call from another uid (harness.Node.call_as: setpriv + dbus_call_as.py)."""
    return node.call_as(user, dest, path, iface, method, sig, args)


def expect_error(res, name, what, text=None):
    check(res[0] == 'error', '%s: expected %s, got a reply %r' % (what, name, res[1:][:1]))
    check(res[1] == name, '%s: expected %s, got %s: %s' % (what, name, res[1], res[2][:200]))
    if text is not None:
        check(text in res[2], '%s: message %r lacks %r' % (what, res[2][:300], text))
    print('  %-58s -> %s: %s' % (what, res[1], res[2][:90]))


def still_serving(node, what):
    for name in ('probe', 'broker'):
        d = node.daemons.get(name)
        if d is not None:
            check(d.alive(), '%s died after %s' % (name, what))
    r = call(node.bus_address, *BROKER, 'ListResources')
    check(r[0] == 'ok' and len(r[1]) >= 1, 'ListResources after %s: %r' % (what, r))
    r = call(node.bus_address, *BROKER, 'GetDevices', 's', [RES_I915])
    check(r[0] == 'ok' and any(str(d[0]) == GPU_I915 for d in r[1]), 'GetDevices after %s: %r' % (what, r))
    r = call(node.bus_address, harness.PROBE_BUS, '/io/kgpu/Probe1',
             'org.freedesktop.DBus.ObjectManager', 'GetManagedObjects')
    check(r[0] == 'ok' and len(r[1]) == 2, 'GetManagedObjects after %s: %r' % (what, r))


def hostile_calls(node):
    a = node.bus_address
    n0 = len(node.list_allocations())
    big = 'x' * (1 << 20)          # 1 MiB string
    many_ids = ['0000:03:00.0-%d' % i for i in range(100000)]

    r = call(a, harness.PROBE_BUS, '/io/kgpu/Probe1', 'org.freedesktop.DBus.ObjectManager', 'GetManagedObjects')
    check(r[0] == 'ok' and r[1], 'GetManagedObjects: %r' % (r,))
    gpu_path = sorted(str(p) for p in r[1])[0]

    print('wrong types, wrong arity:')
    for method, sig, args in [
            ('Allocate', 'i', [5]),
            ('Allocate', 's', [RES_I915]),
            ('Allocate', 'sas', [RES_I915, [GPU_I915]]),
            ('Allocate', 'saasi', [RES_I915, [[GPU_I915]], 1]),
            ('GetDevices', 'u', [1]),
            ('GetDevices', '', []),
            ('GetPreferredAllocation', 'saas', [RES_I915, [[GPU_I915]]]),
            ('PreStartContainer', 'saas', [RES_I915, [[GPU_I915]]]),
            ('Reconcile', 'a(ss)', [[('a', 'b')]]),
            ('ListResources', 's', ['extra']),
            ('ListAllocations', 'v', [dbus.String('x', variant_level=1)]),
            ('Reload', 's', ['/etc/shadow'])]:
        expect_error(call(a, *BROKER, method, sig, args), INVALID_ARGS,
                     'Broker1.%s(%s)' % (method, sig or 'no args'))
    expect_error(call(a, *PROBE, 'Rescan', 's', ['now']), INVALID_ARGS, 'Probe1.Rescan(s)')
    expect_error(call(a, *KUBELET, 'OpenPluginSocket', 'u', [1]), INVALID_ARGS, 'Kubelet1.OpenPluginSocket(u)')
    expect_error(call(a, *KUBELET, 'ConnectKubelet', 's', ['/etc/shadow']), INVALID_ARGS,
                 'Kubelet1.ConnectKubelet(s)')
    for bad in ('../../etc/passwd', 'gpu.intel.com/../x', big[:4096], 'a/b/c', ''):
        expect_error(call(a, *KUBELET, 'OpenPluginSocket', 's', [bad]), 'io.kgpu.Error.InvalidArgs',
                     'Kubelet1.OpenPluginSocket(%r)' % bad[:20])
    expect_error(call(a, *KUBELET, 'OpenPluginSocket', 's', ['example.com/gpu']), 'io.kgpu.Error.Refused',
                 'Kubelet1.OpenPluginSocket(another domain)', 'example.com/gpu')
    check(not any(n.startswith('kgpu-') and 'example' in n for n in os.listdir(node.plugin_dir)),
          'a socket was made for a refused name')

    print('unknown ids and names:')
    expect_error(call(a, *BROKER, 'Allocate', 'saas', [RES_I915, [['0000:ff:00.0']]]),
                 'io.kgpu.Error.UnknownDevice', 'Allocate unknown device', '0000:ff:00.0')
    expect_error(call(a, *BROKER, 'Allocate', 'saas', ['example.com/none', [[GPU_I915]]]),
                 'io.kgpu.Error.UnknownResource', 'Allocate unknown resource')
    expect_error(call(a, *BROKER, 'GetDevices', 's', ['example.com/none']),
                 'io.kgpu.Error.UnknownResource', 'GetDevices unknown resource')
    expect_error(call(a, *BROKER, 'PreStartContainer', 'sas', [RES_I915, ['nope']]),
                 'io.kgpu.Error.UnknownDevice', 'PreStartContainer unknown device')
    # Ids not in the resource are left out of the preference (resources.h), not an error.
    for avail, must in ((['nope', GPU_I915], []), ([GPU_I915], ['nope'])):
        r = call(a, *BROKER, 'GetPreferredAllocation', 'sa(asasi)', [RES_I915, [(avail, must, 1)]])
        check(r[0] == 'ok' and [[str(x) for x in c] for c in r[1]] == [[GPU_I915]],
              'GetPreferredAllocation(%r, %r): %r' % (avail, must, r))
    print('  %-58s -> %s' % ('GetPreferredAllocation unknown ids', 'skipped, known ids preferred'))
    expect_error(call(a, *BROKER, 'Allocate', 'saas', [RES_I915, [[GPU_I915, GPU_I915]]]),
                 'io.kgpu.Error.InvalidArgs', 'Allocate duplicate id')
    expect_error(call(a, *BROKER, 'Allocate', 'saas', [RES_I915, [['']]]),
                 'io.kgpu.Error.InvalidArgs', 'Allocate empty id')
    expect_error(call(a, *BROKER, 'Allocate', 'saas', [RES_I915, []]),
                 'io.kgpu.Error.InvalidArgs', 'Allocate no container')
    expect_error(call(a, *BROKER, 'GetPreferredAllocation', 'sa(asasi)',
                      [RES_I915, [([GPU_I915], [], -1)]]),
                 'io.kgpu.Error.InvalidArgs', 'GetPreferredAllocation size -1')
    expect_error(call(a, *BROKER, 'NoSuchMethod'), 'org.freedesktop.DBus.Error.UnknownMethod',
                 'Broker1.NoSuchMethod')
    expect_error(call(a, harness.BROKER_BUS, '/io/kgpu/Nowhere', harness.BROKER_BUS, 'ListResources'),
                 'org.freedesktop.DBus.Error.UnknownObject', 'Broker1 on an unknown path')
    expect_error(call(a, harness.PROBE_BUS, gpu_path, 'org.freedesktop.DBus.Properties', 'Get', 'ss',
                      ['io.kgpu.Gpu1', 'NoSuchProperty']),
                 'org.freedesktop.DBus.Error.UnknownProperty', 'Gpu1 unknown property')
    expect_error(call(a, harness.PROBE_BUS, gpu_path, 'org.freedesktop.DBus.Properties', 'Set', 'ssv',
                      ['io.kgpu.Gpu1', 'Health', dbus.String('Healthy', variant_level=1)]),
                 'org.freedesktop.DBus.Error.PropertyReadOnly', 'Gpu1 Set Health')
    expect_error(call(a, harness.PROBE_BUS, '/io/kgpu/Probe1/gpu/nope', 'org.freedesktop.DBus.Properties',
                      'GetAll', 's', ['io.kgpu.Gpu1']),
                 'org.freedesktop.DBus.Error.UnknownObject', 'Gpu1 unknown GPU object')

    print('over-long strings, huge arrays:')
    expect_error(call(a, *BROKER, 'GetDevices', 's', [big]),
                 'io.kgpu.Error.InvalidArgs', 'GetDevices 1 MiB resource name')
    expect_error(call(a, *BROKER, 'Allocate', 'saas', [RES_I915, [[big]]]),
                 'io.kgpu.Error.InvalidArgs', 'Allocate 1 MiB device id')
    expect_error(call(a, *BROKER, 'Allocate', 'saas', [big, [[GPU_I915]]]),
                 'io.kgpu.Error.InvalidArgs', 'Allocate 1 MiB resource name')
    expect_error(call(a, *BROKER, 'Allocate', 'saas', [RES_I915, [many_ids]]),
                 'io.kgpu.Error.InvalidArgs', 'Allocate 100000 ids in one container')
    expect_error(call(a, *BROKER, 'Allocate', 'saas', [RES_I915, [[GPU_I915]] * 10000]),
                 'io.kgpu.Error.InvalidArgs', 'Allocate 10000 containers')
    expect_error(call(a, *BROKER, 'PreStartContainer', 'sas', [RES_I915, many_ids]),
                 'io.kgpu.Error.InvalidArgs', 'PreStartContainer 100000 ids')
    expect_error(call(a, *BROKER, 'GetPreferredAllocation', 'sa(asasi)',
                      [RES_I915, [(many_ids, [], 1)]]),
                 'io.kgpu.Error.InvalidArgs', 'GetPreferredAllocation 100000 ids')
    expect_error(call(a, *BROKER, 'GetPreferredAllocation', 'sa(asasi)',
                      [RES_I915, [([GPU_I915], [], 1)] * 10000]),
                 'io.kgpu.Error.InvalidArgs', 'GetPreferredAllocation 10000 containers')
    r = call(a, *BROKER, 'Reconcile', 'a(sassss)', [[(RES_I915, [big], 'ns', 'pod', 'c')]])
    check(r[0] == 'error', 'Reconcile with a 1 MiB device id succeeded: %r' % (r,))
    print('  %-58s -> %s: %s' % ('Reconcile 1 MiB device id', r[1], r[2][:90]))
    r = call(a, *BROKER, 'Reconcile', 'a(sassss)',
             [[(RES_I915, [GPU_I915], 'ns', 'pod%d' % i, 'c') for i in range(50000)]])
    check(r[0] == 'error', 'Reconcile with 50000 containers succeeded: %r' % (r[0],))
    print('  %-58s -> %s: %s' % ('Reconcile 50000 containers', r[1], r[2][:90]))
    still_serving(node, 'hostile calls')
    check(len(node.list_allocations()) == n0, 'failed calls left allocations behind')

    # A good call still works afterwards.
    r = call(a, *BROKER, 'Allocate', 'saas', [RES_I915, [[GPU_I915]]])
    check(r[0] == 'ok' and len(r[1]) == 1, 'Allocate after the hostile calls: %r' % (r,))
    check(len(node.list_allocations()) == n0 + 1, 'good Allocate not recorded')


def forbidden_by_policy(node):
    print('callers the bus policy forbids:')
    for user in ('nobody', harness.BROKER_USER):
        for method, sig, args in [('Allocate', 'saas', [RES_I915, [[GPU_I915]]]),
                                  ('PreStartContainer', 'sas', [RES_I915, [GPU_I915]]),
                                  ('Reconcile', 'a(sassss)', [[]]),
                                  ('Reload', '', [])]:
            expect_error(call_as(node, user, *BROKER, method, sig, args), BUS_DENIED,
                         'Broker1.%s as %s (policy)' % (method, user))
    for user in ('nobody', harness.GRPC_USER):
        expect_error(call_as(node, user, *PROBE, 'Rescan'), BUS_DENIED, 'Probe1.Rescan as %s (policy)' % user)
    for user in ('nobody', harness.BROKER_USER):
        for method, sig, args in KUBELET_CALLS:
            expect_error(call_as(node, user, *KUBELET, method, sig, args), BUS_DENIED,
                         'Kubelet1.%s as %s (policy)' % (method, user))
    r = call_as(node, 'nobody', *BROKER, 'ListResources')
    check(r[0] == 'ok', 'ListResources as nobody: %r' % (r,))


def forbidden_by_daemon():
    print('callers only the daemons\' own checks refuse (bus allows all):')
    with harness.Node(grpcd=False, kubelet=False, bus_policy=ALLOW_ALL) as n2:
        n0 = len(n2.list_allocations())
        # (The broker accepts its own uid, kgpu-broker, as the same principal.)
        for user in ('nobody', 'daemon'):
            for method, sig, args in [('Allocate', 'saas', [RES_I915, [[GPU_I915]]]),
                                      ('PreStartContainer', 'sas', [RES_I915, [GPU_I915]]),
                                      ('Reconcile', 'a(sassss)', [[]]),
                                      ('Reload', '', [])]:
                expect_error(call_as(n2, user, *BROKER, method, sig, args), KGPU_DENIED,
                             'Broker1.%s as %s (daemon)' % (method, user))
        for user in ('nobody', harness.GRPC_USER):
            expect_error(call_as(n2, user, *PROBE, 'Rescan'), KGPU_DENIED, 'Probe1.Rescan as %s (daemon)' % user)
        for user in ('nobody', harness.BROKER_USER):
            for method, sig, args in KUBELET_CALLS:
                expect_error(call_as(n2, user, *KUBELET, method, sig, args), KGPU_DENIED,
                             'Kubelet1.%s as %s (daemon)' % (method, user))
        # The front end's user passes the uid check (no kubelet on this node: unavailable).
        expect_error(call_as(n2, harness.GRPC_USER, *KUBELET, 'ConnectKubelet'), 'io.kgpu.Error.KubeletUnavailable',
                     'Kubelet1.ConnectKubelet as %s (no kubelet)' % harness.GRPC_USER)
        check(len(n2.list_allocations()) == n0, 'a refused Allocate was recorded')
        # Root and the broker's own checks still let the right callers through.
        r = call(n2.bus_address, *BROKER, 'Allocate', 'saas', [RES_I915, [[GPU_I915]]])
        check(r[0] == 'ok', 'Allocate as root on the allow-all bus: %r' % (r,))
        r = call_as(n2, harness.BROKER_USER, *PROBE, 'Rescan')
        check(r[0] == 'ok', 'Probe1.Rescan as %s: %r' % (harness.BROKER_USER, r))
        still_serving(n2, 'refused calls')
        rcs = n2.stop(dump_on_unclean=True)
        check(all(v in (0, None) for v in rcs.values()), 'second node exit codes: %r' % rcs)


def run(node):
    hostile_calls(node)
    forbidden_by_policy(node)
    still_serving(node, 'policy denials')
    forbidden_by_daemon()


if __name__ == '__main__':
    harness.run_test(run, need_root=True)
