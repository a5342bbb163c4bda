#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# dbus_call_as.py — one D-Bus method call made by whichever uid runs this file; the tests
# run it under setpriv through harness.Node.call_as() to see what the bus policy and the
# daemons answer other users.
#
# It imports nothing from the checkout: it runs from a copy in the node's directory,
# because other users cannot read a checkout in a 0700 home directory.
#
# argv[1]: JSON [bus address, destination, path, interface, method, signature, [args]]
# stdout:  JSON ["ok", [str(value), ...]] or ["error", error name, message]

import json
import sys

import dbus


def main():
    address, dest, path, iface, method, sig, args = json.loads(sys.argv[1])
    bus = dbus.bus.BusConnection(address)
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
