#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# dbus_call_as.py — one D-Bus method call made by whichever uid runs this file; the tests
# run it under setpriv through harness.Node.call_as() to see what the bus policy and the
# daemons answer other users.
#
# It imports nothing from the checkout: it runs from a copy in the node's directory,
# because other users cannot read a checkout in a 0700 home directory.
#
# argv[1]: JSON [bus address, destination, path, interface, method, signature, [args]];
#          an address "peer:ADDRESS" is a direct connection (no bus daemon, no Hello,
#          no destination), as to the broker's peer socket
# stdout:  JSON ["ok", [str(value), ...]] or ["error", error name, message]; a peer
#          connection that cannot be made: ["error", "connect", message]

import json
import sys

import dbus


def main():
    address, dest, path, iface, method, sig, args = json.loads(sys.argv[1])
    try:
        if address.startswith('peer:'):
            bus = dbus.connection.Connection(address[5:])
            dest = None
        else:
            bus = dbus.bus.BusConnection(address)
    except dbus.exceptions.DBusException as e:
        print(json.dumps(['error', 'connect', str(e)]))
        return
    try:
        r = bus.call_blocking(dest, path, iface, method, sig, list(args), timeout=15)
        if r is None:
            r = []
        elif not isinstance(r, tuple):
            r = [r]
        res = ['ok', [str(x) for x in r]]
    except dbus.exceptions.DBusException as e:
        res = ['error', e.get_dbus_name(), e.get_dbus_message() or '']
    finally:
        bus.close()
    print(json.dumps(res))


if __name__ == '__main__':
    main()
