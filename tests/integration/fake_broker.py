#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# fake_broker.py — a hostile stand-in for kgpu-brokerd: it owns io.kgpu.Broker1 on the
# node's bus (as the broker's user, started by harness.Node(fake_broker=...)) and answers
# whatever its control file says, as a compromised broker process could.
#
# It imports nothing from the checkout (it runs from a copy in the node's directory, which
# the broker's user can read). argv[1]: bus address; argv[2]: the control file, JSON,
# read again at every call and watched (every 50 ms) for changes, after which
# ResourcesChanged names every resource:
#   resources: [[name, pre_start_required, get_preferred_allocation_available], ...]
#   devices:   {resource: [[id, "Healthy", [numa node, ...]], ...]}
#   answers:   {resource: {envs: {}, mounts: [[container, host, read_only]],
#                          devices: [[container, host, permissions]], annotations: {},
#                          cdi: [name]}}     (every container of an Allocate gets it)
#   spoof:     [{path, interface, properties: {name: [signature, value]}, unicast: bool}]
#              signals sent before each Allocate answer, as if from the probe:
#              PropertiesChanged of that interface at that path (unicast: to the caller)
#   probe:     {object path: {name: [signature, value]}}: once present, the process also
#              takes io.kgpu.Probe1 (where the bus lets it) and serves these io.kgpu.Gpu1
#              objects through GetManagedObjects at /io/kgpu/Probe1
# It logs each call to stdout (the harness keeps it in logs/broker.log). SIGTERM: exit 0.

import json
import os
import signal
import sys

import dbus
import dbus.lowlevel
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

IFACE = 'io.kgpu.Broker1'
PATH = '/io/kgpu/Broker1'


def log(msg):
    print('fake-broker: %s' % msg, flush=True)


def variant(sig, value):
    if sig == 'as':
        return dbus.Array(value, signature='s')
    if sig == 'i':
        return dbus.Int32(value)
    return dbus.String(value)


class FakeProbe(dbus.service.Object):
    def __init__(self, bus, objects):
        super().__init__(bus, '/io/kgpu/Probe1')
        self.objects = objects

    @dbus.service.method('org.freedesktop.DBus.ObjectManager', in_signature='', out_signature='a{oa{sa{sv}}}')
    def GetManagedObjects(self):
        return {dbus.ObjectPath(p): {'io.kgpu.Gpu1': dbus.Dictionary({k: variant(*v) for k, v in props.items()},
                                                                     signature='sv')}
                for p, props in self.objects.items()}


class Broker(dbus.service.Object):
    def __init__(self, bus, control):
        self.bus = bus
        self.control = control
        self.mtime = None
        self.probe = None
        self.name = dbus.service.BusName(IFACE, bus, do_not_queue=True)
        super().__init__(bus, PATH)

    def state(self):
        with open(self.control) as f:
            return json.load(f)

    def poll(self):
        try:
            m = os.stat(self.control).st_mtime_ns
        except OSError:
            return True
        if self.mtime is not None and m != self.mtime:
            st = self.state()
            names = [r[0] for r in st.get('resources', [])]
            log('control file changed, ResourcesChanged %r' % names)
            self.ResourcesChanged(dbus.Array(names, signature='s'))
            if st.get('probe') and self.probe is None:
                self.probe = FakeProbe(self.bus, st['probe'])
                try:
                    self.probe_name = dbus.service.BusName('io.kgpu.Probe1', self.bus, do_not_queue=True)
                    log('owns io.kgpu.Probe1, serving %r' % st['probe'])
                except dbus.exceptions.DBusException as e:
                    log('cannot own io.kgpu.Probe1: %s' % e)
        self.mtime = m
        return True

    @dbus.service.signal(IFACE, signature='as')
    def ResourcesChanged(self, names):
        pass

    @dbus.service.method(IFACE, in_signature='', out_signature='a(sbb)')
    def ListResources(self):
        return dbus.Array([dbus.Struct((r[0], bool(r[1]), bool(r[2])), signature='sbb')
                           for r in self.state().get('resources', [])], signature='(sbb)')

    @dbus.service.method(IFACE, in_signature='s', out_signature='a(ssai)')
    def GetDevices(self, resource):
        devs = self.state().get('devices', {}).get(str(resource), [])
        return dbus.Array([dbus.Struct((d[0], d[1], dbus.Array(d[2], signature='i')), signature='ssai')
                           for d in devs], signature='(ssai)')

    @dbus.service.method(IFACE, in_signature='sa(asasi)', out_signature='aas')
    def GetPreferredAllocation(self, resource, requests):
        return dbus.Array([dbus.Array(list(r[0])[:r[2]], signature='s') for r in requests], signature='as')

    @dbus.service.method(IFACE, in_signature='sas', out_signature='')
    def PreStartContainer(self, resource, ids):
        pass

    @dbus.service.method(IFACE, in_signature='saas', out_signature='a(a{ss}a(ssb)a(sss)a{ss}as)',
                         sender_keyword='sender')
    def Allocate(self, resource, requests, sender=None):
        st = self.state()
        log('Allocate %s %r' % (resource, [list(map(str, r)) for r in requests]))
        for s in st.get('spoof', []):
            msg = dbus.lowlevel.SignalMessage(s['path'], 'org.freedesktop.DBus.Properties', 'PropertiesChanged')
            props = dbus.Dictionary({k: dbus.types.Array(v[1], signature=v[0][1:]) if v[0].startswith('a')
                                     else v[1] for k, v in s['properties'].items()}, signature='sv')
            msg.append(s['interface'], props, dbus.Array([], signature='s'), signature='sa{sv}as')
            if s.get('unicast'):
                msg.set_destination(sender)
            self.bus.send_message(msg)
            log('spoofed PropertiesChanged %s %r%s' % (s['path'], s['properties'],
                                                      ' to %s' % sender if s.get('unicast') else ''))
        a = st.get('answers', {}).get(str(resource), {})
        one = dbus.Struct((
            dbus.Dictionary(a.get('envs', {}), signature='ss'),
            dbus.Array([dbus.Struct((m[0], m[1], bool(m[2])), signature='ssb') for m in a.get('mounts', [])],
                       signature='(ssb)'),
            dbus.Array([dbus.Struct(tuple(d), signature='sss') for d in a.get('devices', [])], signature='(sss)'),
            dbus.Dictionary(a.get('annotations', {}), signature='ss'),
            dbus.Array(a.get('cdi', []), signature='s'),
        ), signature='a{ss}a(ssb)a(sss)a{ss}as')
        return dbus.Array([one] * len(requests), signature='(a{ss}a(ssb)a(sss)a{ss}as)')


def main():
    address, control = sys.argv[1], sys.argv[2]
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(address)
    loop = GLib.MainLoop()
    broker = Broker(bus, control)
    broker.poll()
    GLib.timeout_add(50, broker.poll)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, loop.quit)
    log('owns %s as uid %d' % (IFACE, os.getuid()))
    loop.run()
    bus.close()


if __name__ == '__main__':
    main()
