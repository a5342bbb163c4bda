#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# kgpu-bench-compare.py — two trees' builds measured back to back by kgpu-bench.py, in one run.
#
# Runs bench/kgpu-bench.py (of this tree) against --base and --new build directories in
# turn, --pairs times, so both trees see the same machine minute by minute; the order
# alternates (base new, new base, base new, ...) so a machine getting busier or quieter
# during the run does not favour the tree that always runs first.
# Every latency row (p50 and p99), the daemons' RSS and PSS, the CPU per Allocate and the
# idle wakeups are taken from each run's JSON; the medians of each tree's runs are compared
# and every row whose median is more than --limit (default 10 %) worse than the base's is
# named. Rows that measure the machine rather than the tree (the state directory's fsync
# and fdatasync) are shown apart and never judged. Exit 0 when no judged row is worse, 1
# when one is, 2 when a run failed.
#
#   bench/kgpu-bench-compare.py --base ../before/build --new build-bench --pairs 5 \
#       -- --idle-seconds 20

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, 'kgpu-bench.py')

# Rows of the machine, not of the code under test: shown, never judged.
ENVIRONMENT = ('node8.fsync', 'node8.fdatasync')


def rows_of(result):
    """Flatten one kgpu-bench.py JSON result into {row name: value}, lower is better."""
    out = {}

    def walk(path, v):
        if isinstance(v, dict):
            if 'p50_ms' in v and 'p99_ms' in v:
                out[path + ' p50 ms'] = v['p50_ms']
                out[path + ' p99 ms'] = v['p99_ms']
                return
            for k, x in v.items():
                if k in ('maps_idle', 'rounds', 'counts', 'host', 'picked_size2', 'picked_size4'):
                    continue
                walk(path + '.' + k if path else k, x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            leaf = path.rsplit('.', 1)[-1]
            if '.mem_' in path and leaf not in ('rss_kb', 'pss_kb'):
                return
            if path.endswith(('.seconds', '.gpus', '.ids', '.pods', '.shares', '.preload', 'calls_before_mem_after',
                              'allocations_recorded')) or '.idle.wakeups.' in path or path == 'wall_s':
                return
            out[path] = v

    walk('', result)
    for k in ('mem_idle', 'mem_after'):
        daemons = result.get('node8', {}).get(k, {})
        if all(d in daemons for d in ('probe', 'broker', 'grpc')):
            out['node8.%s.three daemons rss_kb' % k] = sum(daemons[d]['rss_kb'] for d in ('probe', 'broker', 'grpc'))
            out['node8.%s.three daemons pss_kb' % k] = sum(daemons[d]['pss_kb'] for d in ('probe', 'broker', 'grpc'))
    return out


def run_bench(build, extra, log):
    with tempfile.NamedTemporaryFile(suffix='.json', delete=False) as f:
        path = f.name
    try:
        cmd = [sys.executable, BENCH, '--build-root', os.path.abspath(build), '--json', path] + extra
        t0 = time.monotonic()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log.write(p.stdout)
        log.flush()
        if p.returncode != 0:
            sys.stderr.write(p.stdout[-4000:])
            raise RuntimeError('kgpu-bench.py --build-root %s exited %d' % (build, p.returncode))
        with open(path) as f:
            result = json.load(f)
        return result, time.monotonic() - t0
    finally:
        os.unlink(path)


def judge(base_runs, new_runs, limit):
    names = sorted(set().union(*[r.keys() for r in base_runs + new_runs]))
    table = []
    for name in names:
        b = [r[name] for r in base_runs if name in r]
        n = [r[name] for r in new_runs if name in r]
        if not b or not n:
            continue
        mb, mn = statistics.median(b), statistics.median(n)
        if mb > 0:
            change = mn / mb - 1.0
        else:
            change = 0.0 if mn == 0 else float('inf')
        env = name.startswith(ENVIRONMENT)
        worse = (not env) and change > limit
        table.append((name, mb, min(b), max(b), mn, min(n), max(n), change, env, worse))
    return table


def main():
    ap = argparse.ArgumentParser(description='kgpu-bench.py on two builds, alternating, one run')
    ap.add_argument('--base', required=True, help='build directory of the tree before')
    ap.add_argument('--new', required=True, help='build directory of the tree after')
    ap.add_argument('--pairs', type=int, default=5, help='base/new pairs (default 5)')
    ap.add_argument('--limit', type=float, default=10.0, help='percent worse that fails a row (default 10)')
    ap.add_argument('--json', metavar='FILE', help='write every run and the verdict as JSON')
    ap.add_argument('--log', metavar='FILE', default=os.devnull, help="keep every bench run's output")
    ap.add_argument('bench_args', nargs='*', help='passed to kgpu-bench.py (after --)')
    args = ap.parse_args()
    if args.pairs < 1:
        ap.error('--pairs must be at least 1')

    base_runs, new_runs, loads = [], [], []
    with open(args.log, 'w') as log:
        for i in range(args.pairs):
            order = (('base', args.base, base_runs), ('new', args.new, new_runs))
            for tree, build, runs in (order if i % 2 == 0 else order[::-1]):
                load = os.getloadavg()[0]
                try:
                    result, wall = run_bench(build, args.bench_args, log)
                except RuntimeError as e:
                    print('kgpu-bench-compare: %s' % e, file=sys.stderr)
                    return 2
                runs.append(rows_of(result))
                loads.append(load)
                print('pair %d/%d %-4s %s: %.0f s, load average at start %.2f' %
                      (i + 1, args.pairs, tree, build, wall, load), flush=True)

    limit = args.limit / 100.0
    table = judge(base_runs, new_runs, limit)
    print()
    print('medians of %d runs per tree (min..max), change of the new tree against the base' % args.pairs)
    print('%-52s %22s %22s %8s' % ('row (lower is better)', 'base', 'new', 'change'))
    for name, mb, bl, bh, mn, nl, nh, change, env, worse in table:
        mark = ' (machine, not judged)' if env else (' WORSE' if worse else '')
        print('%-52s %9.3f (%5.3g..%5.3g) %9.3f (%5.3g..%5.3g) %+7.1f%%%s' %
              (name[:52], mb, bl, bh, mn, nl, nh, change * 100, mark))
    worse = [t[0] for t in table if t[9]]
    print()
    print('load average at the start of each run: %s' % ', '.join('%.2f' % x for x in loads))
    if worse:
        print('%d of %d judged rows more than %.0f%% worse: %s' %
              (len(worse), sum(1 for t in table if not t[8]), args.limit, ', '.join(worse)))
    else:
        print('no judged row of %d more than %.0f%% worse' % (sum(1 for t in table if not t[8]), args.limit))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'base': args.base, 'new': args.new, 'pairs': args.pairs, 'limit_percent': args.limit,
                       'base_runs': base_runs, 'new_runs': new_runs, 'loads': loads,
                       'rows': [dict(zip(('row', 'base_median', 'base_min', 'base_max', 'new_median',
                                          'new_min', 'new_max', 'change', 'machine', 'worse'), t))
                                for t in table]}, f, indent=1)
    return 1 if worse else 0


if __name__ == '__main__':
    sys.exit(main())
