#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# demo.py — start kgpu on a simulated node and print, readably, what the kubelet sees.
#
# Contract: uses the integration harness (tests/integration/harness.py): private bus,
# umockdev testbed with two Intel GPUs, the three daemons from --build-root, the kubelet
# simulator. Prints the GPUs the probe found, the registered resources with their
# options, each resource's ListAndWatch devices (health, NUMA), one
# GetPreferredAllocation and one Allocate per resource, the broker's allocation record,
# then stops everything (exit 0 if every step worked). --keep leaves the node running
# until Ctrl-C and prints how to poke it. Exit status 1 on any failure, with the logs.

import argparse
import os
import pwd
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, '..'))
sys.path.insert(0, os.path.join(SRC, 'tests', 'integration'))

import grpc  # noqa: E402

import harness  # noqa: E402
import kubelet_sim  # noqa: E402


def yesno(b):
    return 'yes' if b else 'no'


def human_bytes(n):
    for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):
        if n < 1024 or unit == 'TiB':
            return ('%d %s' % (n, unit)) if unit == 'B' else ('%.0f %s' % (n, unit))
        n /= 1024.0


def show_gpus(node):
    objs = node.busctl('call', harness.PROBE_BUS, '/io/kgpu/Probe1',
                       'org.freedesktop.DBus.ObjectManager', 'GetManagedObjects')['data'][0]
    print('\nGPUs found by kgpu-probed (io.kgpu.Probe1):')
    for path in sorted(objs):
        g = objs[path].get('io.kgpu.Gpu1')
        if not g:
            continue
        v = {k: x['data'] for k, x in g.items()}
        print('  %-13s %-5s %04x:%04x  %s %s  NUMA %s  memory %s  %s' % (
            v.get('Id'), v.get('Driver'), v.get('VendorId', 0), v.get('DeviceId', 0),
            v.get('CardNode') or '-', v.get('RenderNode') or '-',
            v.get('NumaNode'), human_bytes(v.get('MemoryBytes', 0)) if v.get('MemoryBytes') else '-',
            v.get('Health') + (' (%s)' % v['HealthReason'] if v.get('HealthReason') else '')))


def show_kubelet_view(node):
    sim = node.kubelet
    print('\nRegistered with the kubelet (v1beta1.Registration/Register):')
    seen = set()
    for r in sim.registrations:
        if r.resource_name in seen:
            continue
        seen.add(r.resource_name)
        print('  %-20s endpoint %-32s version %s' % (r.resource_name, r.endpoint, r.version))
        print('  %-20s options: pre_start_required=%s, get_preferred_allocation_available=%s' % (
            '', yesno(r.pre_start_required), yesno(r.get_preferred_allocation_available)))

    print('\nListAndWatch (what the kubelet would advertise as node capacity):')
    for res in sorted(seen):
        devs = sim.plugin(res).devices() or []
        print('  %s: %d device(s)' % (res, len(devs)))
        for d in devs:
            print('    %-14s %-9s NUMA %s' % (d['id'], d['health'],
                                              ','.join(map(str, d['numa'])) or 'unknown'))

    for res in sorted(seen):
        cl = sim.plugin(res)
        ids = [d['id'] for d in cl.devices() or []]
        print('\n%s:' % res)
        if cl.options and cl.options['get_preferred_allocation_available']:
            pref = cl.get_preferred_allocation(ids, [], 1)
            print('  GetPreferredAllocation(available=%s, size=1) -> %s' % (ids, pref))
        else:
            pref = ids[:1]
            print('  GetPreferredAllocation not offered; taking %s' % pref)
        try:
            c = cl.allocate(pref)
            print('  Allocate(%s) -> container response:' % pref)
            print(kubelet_sim.format_container_response(c, indent='    '))
        except grpc.RpcError as e:
            print('  Allocate(%s) failed: %s %s' % (pref, e.code().name, e.details()))
            raise
        if cl.options and cl.options['pre_start_required']:
            cl.pre_start_container(pref)
            print('  PreStartContainer(%s) -> ok' % pref)

    allocs = node.list_allocations()
    print('\nAllocations recorded by kgpu-brokerd (SQLite, Broker1.ListAllocations):')
    for a in allocs:
        print('  #%d %-20s %s at %s' % (a[0], a[1], ' '.join(a[2]),
                                       time.strftime('%H:%M:%S', time.localtime(a[3] / 1e6))))


def keep_running(node, build_root):
    ctl = os.path.join(node.tmp, 'testbed.ctl')
    os.mkfifo(ctl, 0o600)
    bus = node.bus_address
    pr = os.path.relpath(os.path.join(SRC, 'tests', 'integration', 'kubelet_sim.py'))
    kgpuctl = os.path.join(build_root, 'tools', 'kgpuctl')
    print('''
The node keeps running; Ctrl-C stops it. To poke it from another shell:
  busctl --address=%(bus)s tree io.kgpu.Probe1
  busctl --address=%(bus)s introspect io.kgpu.Broker1 /io/kgpu/Broker1
  busctl --address=%(bus)s call io.kgpu.Broker1 /io/kgpu/Broker1 io.kgpu.Broker1 ListResources
  busctl --address=%(bus)s call io.kgpu.Broker1 /io/kgpu/Broker1 io.kgpu.Broker1 ListAllocations
  DBUS_SYSTEM_BUS_ADDRESS=%(bus)s %(kgpuctl)s status
  /usr/bin/python3 %(pr)s devices --dir %(dir)s --resource gpu.intel.com/i915
  /usr/bin/python3 %(pr)s allocate --dir %(dir)s --resource gpu.intel.com/xe 0000:04:00.0
  echo "remove 0000:03:00.0" > %(ctl)s    # simulate unplugging a GPU (then "add ...")
Device plugin sockets: %(dir)s
Daemon logs:           %(logs)s
''' % {'bus': bus, 'pr': pr, 'dir': node.plugin_dir, 'ctl': ctl, 'kgpuctl': kgpuctl,
       'logs': os.path.join(node.tmp, 'logs')})
    sys.stdout.flush()
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    signal.signal(signal.SIGTERM, lambda *a: stop.set())

    def forward():
        while not stop.is_set():
            with open(ctl) as f:  # blocks until a writer opens it
                for line in f:
                    line = line.strip()
                    if line and not stop.is_set():
                        try:
                            node.testbed_cmd(line)
                            print('testbed: %s -> ok' % line, flush=True)
                        except Exception as e:
                            print('testbed: %s -> %s' % (line, e), flush=True)

    threading.Thread(target=forward, daemon=True).start()
    seen = {}
    while not stop.wait(0.2):
        for res, cl in node.kubelet.plugin_items():
            n = len(cl.updates)
            if n and seen.get(res) != (id(cl), n):
                if res in seen:
                    print('ListAndWatch %s: %s' % (res, ', '.join(
                        '%s %s' % (d['id'], d['health']) for d in cl.devices())), flush=True)
                seen[res] = (id(cl), n)


def main():
    ap = argparse.ArgumentParser(description='run kgpu on a simulated node and show what the kubelet sees')
    ap.add_argument('--build-root', default=os.path.join(SRC, 'build-demo'))
    ap.add_argument('--keep', action='store_true', help='leave the node running until Ctrl-C')
    ap.add_argument('--no-deps', action='store_true', help=argparse.SUPPRESS)
    args = ap.parse_args()
    build_root = os.path.abspath(args.build_root)
    harness.exit_on_sigterm()

    node = harness.Node(build_root=build_root)
    try:
        print('==> Starting the simulated node: private D-Bus, umockdev testbed (two Intel GPUs),')
        print('    kgpu-probed, kgpu-brokerd, kgpu-grpcd, kubelet simulator (python3-grpcio)')
        if not harness.is_root():
            print('    (not root: all daemons run as you, on a permissive private bus)')
        t0 = time.monotonic()
        node.start()
        print('    up in %.2f s, in %s' % (time.monotonic() - t0, node.tmp))
        for name, d in sorted(node.daemons.items()):
            st = harness.proc_status(d.pid)
            user = pwd.getpwuid(st['Uid'][1]).pw_name
            print('    %-7s pid %-6d user %-12s RSS %5d kB  %s' % (
                name, d.pid, user, st.get('VmRSS', 0), (d.notified('STATUS') or [''])[-1]))
        show_gpus(node)
        show_kubelet_view(node)
        if args.keep:
            keep_running(node, build_root)
    except harness.Skip as e:
        print('demo: cannot run: %s' % e, file=sys.stderr)
        node.stop()
        return 1
    except BaseException as e:
        import traceback
        traceback.print_exc()
        node.dump_logs()
        node.stop()
        print('demo: FAILED: %s' % e, file=sys.stderr)
        return 1
    print('\n==> Shutting down')
    rcs = node.stop()
    bad = {k: v for k, v in rcs.items() if v != 0}
    print('    daemons exited: %s' % ', '.join('%s %s' % kv for kv in sorted(rcs.items())))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
