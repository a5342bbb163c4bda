#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Diff a daemon's --introspect output against the contract in dbus/*.xml.

Compares, for every io.kgpu.* interface the daemon prints: methods with their argument
names, types and directions; properties with type and access; signals with their
arguments. Documentation and annotations are ignored. Exits non-zero with a readable
diff when they differ, or when an interface of the contract is missing.

usage: check-introspection.py CONTRACT.xml DAEMON [INTERFACE ...]
"""
import subprocess
import sys
import xml.etree.ElementTree as ET


def members(node, only):
    out = {}
    for iface in node.iter('interface'):
        name = iface.get('name')
        if not name.startswith('io.kgpu.') or (only and name not in only):
            continue
        items = set()
        for m in iface.findall('method'):
            args = tuple((a.get('name'), a.get('type'), a.get('direction', 'in'))
                         for a in m.findall('arg'))
            items.add(('method', m.get('name'), args))
        for p in iface.findall('property'):
            items.add(('property', p.get('name'), (p.get('type'), p.get('access'))))
        for s in iface.findall('signal'):
            args = tuple((a.get('name'), a.get('type')) for a in s.findall('arg'))
            items.add(('signal', s.get('name'), args))
        out[name] = items
    return out


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    contract_file, daemon, only = sys.argv[1], sys.argv[2], set(sys.argv[3:])
    contract = members(ET.parse(contract_file).getroot(), only)
    res = subprocess.run([daemon, '--introspect'], capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        print(f'{daemon} --introspect failed ({res.returncode}): {res.stderr}', file=sys.stderr)
        return 1
    try:
        actual = members(ET.fromstring(res.stdout), only)
    except ET.ParseError as e:
        print(f'{daemon} --introspect printed invalid XML: {e}\n{res.stdout}', file=sys.stderr)
        return 1
    ok = True
    for name, items in sorted(contract.items()):
        if name not in actual:
            print(f'interface {name}: in {contract_file} but not exported by {daemon}')
            ok = False
            continue
        for item in sorted(items - actual[name], key=str):
            print(f'{name}: only in contract: {item}')
            ok = False
        for item in sorted(actual[name] - items, key=str):
            print(f'{name}: only in daemon:   {item}')
            ok = False
    for name in sorted(set(actual) - set(contract)):
        print(f'interface {name}: exported by {daemon} but missing from {contract_file}')
        ok = False
    if ok:
        n = sum(len(v) for v in contract.values())
        print(f'{daemon}: {len(contract)} interfaces, {n} members match {contract_file}')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
