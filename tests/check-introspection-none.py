#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A daemon without a D-Bus interface of its own (kgpu-grpcd): --introspect answers at
once (within 10 s; it used to take sd-bus's 90 s timeout) with exit status 0, a valid
XML document whose <node> has no interface, and a comment that says so.

usage: check-introspection-none.py DAEMON
"""
import subprocess
import sys
import time
import xml.etree.ElementTree as ET


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.argv[1], '--introspect'], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        print('%s --introspect: no answer within 10 s' % sys.argv[1])
        return 1
    took = time.monotonic() - t0
    if p.returncode != 0:
        print('%s --introspect: exit status %d: %s' % (sys.argv[1], p.returncode, p.stderr))
        return 1
    node = ET.fromstring(p.stdout)
    if node.tag != 'node' or list(node.iter('interface')):
        print('not an empty <node>:\n' + p.stdout)
        return 1
    if 'exports no D-Bus interface' not in p.stdout:
        print('no statement in the output:\n' + p.stdout)
        return 1
    print('%s --introspect: empty node with its statement in %.2f s' % (sys.argv[1], took))
    return 0


if __name__ == '__main__':
    sys.exit(main())
