#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# kgpu-bench.py — latency and memory of kgpu through the whole chain on a simulated node.
#
# Contract: starts a simulated node with tests/integration/harness.py (private bus,
# umockdev testbed with two Intel GPUs, the three daemons from the build tree, the
# kubelet simulator on python3-grpcio) and measures, from the kubelet's side:
#   allocate     Allocate round trip (kubelet -> grpcd -> broker, SQLite commit -> back)
#   preferred    GetPreferredAllocation round trip
#   reregister   kubelet restart: kubelet.sock recreated -> Register received
#   hotplug      udev remove written to the testbed -> ListAndWatch update received
#                (and add -> Healthy again)
#   rss          VmRSS of each daemon when idle after start, and after the run
#   shared_*     (--shared) layout eight-gpus with intel.sharedDevNum=16 (128 device ids):
#                GetPreferredAllocation over all 128 ids (size 1 and 4) per policy, and
#                Allocate of one share with the sharing limit checked
# Prints a table; --json FILE writes every number. --quick uses small counts (CI smoke
# run). Latencies include the python3-grpcio client's own overhead (~100-200 µs/call).
# Exit status 0 unless the node failed to start or a call failed.

import argparse
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, '..'))
sys.path.insert(0, os.path.join(SRC, 'tests', 'integration'))

import harness  # noqa: E402
from harness import TWO_GPUS, RES_I915, GPU_I915  # noqa: E402


def pct(sorted_vals, p):
    if not sorted_vals:
        return float('nan')
    k = min(len(sorted_vals) - 1, max(0, int(round(p / 100.0 * (len(sorted_vals) - 1)))))
    return sorted_vals[k]


def summary(vals_s):
    v = sorted(x * 1e3 for x in vals_s)  # ms
    return {'n': len(v), 'p50_ms': pct(v, 50), 'p99_ms': pct(v, 99),
            'min_ms': v[0] if v else None, 'max_ms': v[-1] if v else None,
            'mean_ms': sum(v) / len(v) if v else None}


def timed_calls(fn, n, warmup=20):
    for _ in range(min(warmup, n)):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def bench_shared(build_root, calls):
    """GetPreferredAllocation and Allocate on eight-gpus x 16 shares, per policy."""
    out = {}
    for policy in ('balanced', 'packed', 'none'):
        node = harness.Node(build_root=build_root, layout='eight-gpus', resources=[RES_I915],
                            config_extra='intel:\n  sharedDevNum: 16\n  allocationPolicy: %s\n' % policy)
        try:
            node.start()
            cl = node.kubelet.plugin(RES_I915)
            _, devs = cl.wait_update(lambda d: len(d) == 128, timeout=10)
            ids = [d['id'] for d in devs]
            for size in (1, 4):
                out['shared_preferred_%s_size%d' % (policy, size)] = summary(timed_calls(
                    lambda: cl.get_preferred_allocation(ids, [], size), calls))
            if policy == 'balanced':
                # Every call a new container on one of the 128 shares: the limit check
                # reads every recorded allocation (up to `calls` of them).
                it = iter(range(10 ** 9))
                out['shared_allocate'] = summary(timed_calls(
                    lambda: cl.allocate([ids[next(it) % len(ids)]]), calls))
        except BaseException:
            import traceback
            traceback.print_exc()
            node.dump_logs()
            node.stop()
            return None
        node.stop()
    return out


def rss_all(node):
    return {name: harness.rss_kb(d.pid) for name, d in node.daemons.items() if d.alive()}


def main():
    ap = argparse.ArgumentParser(description='kgpu end-to-end benchmark on a simulated node')
    ap.add_argument('--build-root', default=os.environ.get('KGPU_BUILD_ROOT'))
    ap.add_argument('--json', metavar='FILE', help='write the results as JSON')
    ap.add_argument('--quick', action='store_true', help='small counts (smoke run for CI)')
    ap.add_argument('--calls', type=int, help='Allocate/GetPreferredAllocation calls (default 2000)')
    ap.add_argument('--restarts', type=int, help='kubelet restarts (default 50)')
    ap.add_argument('--hotplugs', type=int, help='remove/add rounds (default 20)')
    ap.add_argument('--shared', action='store_true',
                    help='also measure 8 GPUs x 16 shares (balanced, packed, none)')
    args = ap.parse_args()
    calls = args.calls or (100 if args.quick else 2000)
    restarts = args.restarts or (5 if args.quick else 50)
    hotplugs = args.hotplugs or (3 if args.quick else 20)

    build_root = os.path.abspath(args.build_root) if args.build_root else None
    harness.exit_on_sigterm()
    node = harness.Node(build_root=build_root)
    results = {'host': {'machine': platform.machine(), 'kernel': platform.release(),
                        'cpus': os.cpu_count(), 'python_grpcio': __import__('grpc').__version__,
                        'root': harness.is_root()},
               'counts': {'calls': calls, 'restarts': restarts, 'hotplugs': hotplugs}}
    try:
        t0 = time.monotonic()
        node.start()
        results['startup_s'] = time.monotonic() - t0
        time.sleep(1.0)  # let start-up work settle before the idle reading
        results['rss_idle_kb'] = rss_all(node)

        cl = node.kubelet.plugin(RES_I915)
        ids = [GPU_I915]
        results['allocate'] = summary(timed_calls(lambda: cl.allocate(ids), calls))
        if cl.options['get_preferred_allocation_available']:
            results['preferred'] = summary(timed_calls(
                lambda: cl.get_preferred_allocation(ids, [], 1), calls))

        lat = []
        for _ in range(restarts):
            got = node.kubelet.restart(resources=sorted(TWO_GPUS), timeout=10)
            lat += got.values()
        results['reregister'] = summary(lat)
        results['reregister']['note'] = 'per resource, %d resources per restart' % len(TWO_GPUS)

        cl = node.kubelet.wait_connected([RES_I915], timeout=10)[RES_I915]

        def health(devs):
            return next((d['health'] for d in devs if d['id'] == GPU_I915), None)

        rm, add = [], []
        for _ in range(hotplugs):
            t = node.testbed_cmd('remove ' + GPU_I915)
            t1, _ = cl.wait_update(lambda d: health(d) == 'Unhealthy', after=t, timeout=5)
            rm.append(t1 - t)
            t = node.testbed_cmd('add ' + GPU_I915)
            t1, _ = cl.wait_update(lambda d: health(d) == 'Healthy', after=t, timeout=5)
            add.append(t1 - t)
        results['hotplug_remove'] = summary(rm)
        results['hotplug_add'] = summary(add)
        results['rss_after_kb'] = rss_all(node)
        results['allocations_recorded'] = len(node.list_allocations())
    except harness.Skip as e:
        print('kgpu-bench: cannot run: %s' % e, file=sys.stderr)
        node.stop()
        return 77
    except BaseException:
        import traceback
        traceback.print_exc()
        node.dump_logs()
        node.stop()
        return 1
    node.stop()
    if args.shared:
        r = bench_shared(build_root, calls)
        if r is None:
            return 1
        results.update(r)

    print('kgpu end-to-end benchmark (%s, %d CPUs, client python3-grpcio %s)' % (
        results['host']['machine'], results['host']['cpus'], results['host']['python_grpcio']))
    print('%-36s %6s %9s %9s %9s' % ('measure', 'n', 'p50 ms', 'p99 ms', 'max ms'))
    for key, label in (('allocate', 'Allocate (incl. SQLite commit)'),
                       ('preferred', 'GetPreferredAllocation'),
                       ('reregister', 'kubelet restart -> Register'),
                       ('hotplug_remove', 'udev remove -> ListAndWatch'),
                       ('hotplug_add', 'udev add -> ListAndWatch')) + tuple(
                           (k, k.replace('_', ' ')) for k in sorted(results) if k.startswith('shared_')):
        r = results.get(key)
        if r:
            print('%-36s %6d %9.3f %9.3f %9.3f' % (label, r['n'], r['p50_ms'], r['p99_ms'], r['max_ms']))
    print('%-36s %s' % ('start-up (all daemons, registered)', '%.2f s' % results['startup_s']))
    print('%-36s %9s %9s' % ('RSS (VmRSS)', 'idle kB', 'after kB'))
    for name in sorted(results['rss_idle_kb']):
        print('  %-34s %9d %9s' % (name, results['rss_idle_kb'][name],
                                   results['rss_after_kb'].get(name, '-')))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=2, sort_keys=True)
            f.write('\n')
        print('wrote %s' % args.json)
    return 0


if __name__ == '__main__':
    sys.exit(main())
