#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# dbus_policy_probe.py — many D-Bus calls made over one connection by whichever uid runs
# this file, for test_bus_policy.py: what the bus lets this uid do. Like dbus_call_as.py
# it imports nothing from the checkout (it runs from a copy in the node's directory).
#
# argv[1]: JSON [bus address, [[kind, ...], ...]] where kind is
#   "call": [dest, path, interface or null, member, signature, [args]]
#   "own":  [name] (RequestName with DBUS_NAME_FLAG_DO_NOT_QUEUE; released at once)
# stdout:  JSON list, one per request: ["ok", [str(value), ...]] or ["error", name, message]

import json
import sys

import dbus


def main():
    address, requests = json.loads(sys.argv[1])
    bus = dbus.bus.BusConnection(address)
    out = []
    try:
        for req in requests:
            try:
                if req[0] == 'own':
                    r = bus.request_name(req[1], dbus.bus.NAME_FLAG_DO_NOT_QUEUE)
                    if r == dbus.bus.REQUEST_NAME_REPLY_PRIMARY_OWNER:
                        bus.release_name(req[1])
                    out.append(['ok', [str(r)]])
                else:
                    dest, path, iface, member, sig, args = req[1:]
                    r = bus.call_blocking(dest, path, iface, member, sig, list(args), timeout=15)
                    if r is None:
                        r = []
                    elif not isinstance(r, tuple):
                        r = [r]
                    out.append(['ok', [str(x) for x in r]])
            except dbus.exceptions.DBusException as e:
                out.append(['error', e.get_dbus_name(), e.get_dbus_message() or ''])
    finally:
        bus.close()
    print(json.dumps(out))


if __name__ == '__main__':
    main()
