#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# kgpu-bench-instructions.py — instructions each daemon executes per call, counted by
# valgrind's callgrind, for one build or for two builds side by side.
#
# Timings on a shared machine move by tens of percent from one minute to the next; the
# number of instructions a daemon executes for a call does not. Each workload starts a
# simulated node (tests/integration/harness.py: private bus, umockdev testbed, the
# python3-grpcio kubelet simulator) with every daemon under callgrind
# (KGPU_CALLGRIND_DIR), makes the call N1 times, stops the node (callgrind writes each
# daemon's total at exit), then does the same with N2 calls; the difference divided by
# N2 - N1 is the cost of one call in each daemon, start-up and shutdown cancelled out.
# With --base, every workload runs on both builds and every row more than --limit
# (default 10 %) above the base is named; exit 1 then, 2 when a node failed.
#
#   bench/kgpu-bench-instructions.py --build-root build-bench --base ../before/build
#
# Run as root, it runs itself again as nobody (the harness's unprivileged mode: same code
# paths, no privilege drop): callgrind opens its output file when the daemon starts, as
# root, and the broker and grpcd, running as their own users by then, could not write it
# at exit.

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, '..'))
sys.path.insert(0, os.path.join(SRC, 'tests', 'integration'))

NO_POLL = {'KGPU_RECONCILE_INTERVAL_SEC': '0', 'KGPU_LOG_LEVEL': 'info'}
EIGHT_FIRST = '0000:18:00.0'


def node_args(workload):
    import harness
    res = harness.RES_I915
    if workload.startswith('nvlink8'):
        return dict(layout='two-gpus', nvidia_scenario='8xh100-nvlink', resources=['nvidia.com/gpu'],
                    extra_env=NO_POLL), 'nvidia.com/gpu', 8
    if workload.startswith('shared1024'):
        return dict(layout='eight-gpus', resources=[res], config_extra='intel:\n  sharedDevNum: 128\n',
                    extra_env=NO_POLL), res, 1024
    return dict(layout='eight-gpus', resources=[res], extra_env=NO_POLL), res, 8


def health_of(devs, first):
    return next((x['health'] for x in devs if x['id'].startswith(first)), None)


def run_calls(workload, node, cl, ids, n):
    if workload.endswith('allocate'):
        for i in range(n):
            cl.allocate([ids[i % len(ids)]] if workload.startswith('shared') else [ids[0]])
    elif workload.endswith('prestart'):
        for _ in range(n):
            cl.pre_start_container([ids[0]])
    elif workload.endswith('preferred4'):
        for _ in range(n):
            cl.get_preferred_allocation(ids, [], 4)
    elif workload.endswith('preferred1'):
        for _ in range(n):
            cl.get_preferred_allocation(ids, [], 1)
    elif workload.endswith('hotplug'):
        first = ids[0].rsplit('-', 1)[0] if len(ids) > 8 else ids[0]
        for _ in range(n):
            t = node.testbed_cmd('remove ' + first)
            cl.wait_update(lambda d: health_of(d, first) == 'Unhealthy', after=t, timeout=60)
            t = node.testbed_cmd('add ' + first)
            cl.wait_update(lambda d: health_of(d, first) == 'Healthy', after=t, timeout=60)
    elif workload.endswith('reregister'):
        import harness
        for _ in range(n):
            node.kubelet.restart(resources=[harness.RES_I915], timeout=60)
        node.kubelet.wait_connected([harness.RES_I915], timeout=60)
    else:
        raise ValueError(workload)


# workload -> (N1, N2): calls per run; a hot-plug or a kubelet restart is one round
WORKLOADS = {
    'node8.allocate': (20, 120),
    'node8.prestart': (20, 120),
    'node8.preferred4': (20, 120),
    'node8.hotplug': (4, 20),
    'node8.reregister': (4, 20),
    'shared1024.preferred1': (5, 25),
    'shared1024.allocate': (20, 80),
    'nvlink8.preferred4': (20, 120),
    'nvlink8.allocate': (20, 120),
}


def totals(directory):
    """{daemon: instructions} from the callgrind files of one node (one process each)."""
    out = {}
    for f in os.listdir(directory):
        m = re.match(r'callgrind\.(\w+)\.\d+$', f)
        if not m:
            continue
        with open(os.path.join(directory, f), errors='replace') as fp:
            for line in fp:
                t = re.match(r'(?:totals|summary): (\d+)', line)
                if t:
                    out[m.group(1)] = out.get(m.group(1), 0) + int(t.group(1))
                    break
    return out


def one_run(build_root, workload, n):
    import harness
    kwargs, res, n_ids = node_args(workload)
    cg = tempfile.mkdtemp(prefix='kgpu-callgrind-')
    os.chmod(cg, 0o1777)  # the broker and grpcd drop to their own users when run as root
    harness.CALLGRIND_DIR = cg
    try:
        node = harness.Node(build_root=build_root, **kwargs)
        try:
            node.start(timeout=300)
            cl = node.kubelet.plugin(res)
            _, devs = cl.wait_update(lambda d: len(d) == n_ids, timeout=300)
            ids = [d['id'] for d in devs]
            run_calls(workload, node, cl, ids, n)
        finally:
            rcs = node.stop()
        bad = {k: v for k, v in rcs.items() if v not in (0, None)}
        if bad:
            raise RuntimeError('%s: unclean exit %r' % (workload, bad))
        t = totals(cg)
        if not t:
            raise RuntimeError('%s: no callgrind output in %s' % (workload, cg))
        return t
    finally:
        harness.CALLGRIND_DIR = None
        shutil.rmtree(cg, ignore_errors=True)


def measure_one(build_root, w, log):
    n1, n2 = WORKLOADS[w]
    t1 = one_run(build_root, w, n1)
    t2 = one_run(build_root, w, n2)
    per = {d: (t2.get(d, 0) - t1.get(d, 0)) / float(n2 - n1) for d in sorted(set(t1) | set(t2))}
    log('%-24s %-5s %s' % (w, os.path.basename(os.path.normpath(build_root)),
                           '  '.join('%s %.0f' % (d, v) for d, v in per.items())))
    return per, {str(n1): t1, str(n2): t2}


def measure(trees, workloads, repeat, log):
    """trees: [(name, build)]; each workload runs repeat times per tree, the trees
    alternating; a daemon's figure is the median of its repeats (a hot-plug's or a
    restart's count moves by some percent from run to run: how many udev events and
    ListAndWatch updates coalesce depends on timing)."""
    out = {name: {} for name, _ in trees}
    for w in workloads:
        samples = {name: [] for name, _ in trees}
        for i in range(repeat):
            for name, build in (trees if i % 2 == 0 else trees[::-1]):
                samples[name].append(measure_one(build, w, log))
        for name, _ in trees:
            daemons = sorted(set().union(*[p.keys() for p, _ in samples[name]]))
            out[name][w] = {'per_call': {d: statistics.median(p.get(d, 0.0) for p, _ in samples[name])
                                         for d in daemons},
                            'samples': [{'per_call': p, 'runs': r} for p, r in samples[name]]}
    return out


def main():
    ap = argparse.ArgumentParser(description='instructions per call and daemon, under callgrind')
    ap.add_argument('--build-root', required=True, help='the build to measure (the new tree)')
    ap.add_argument('--base', help='a second build (the tree before) to compare with')
    ap.add_argument('--limit', type=float, default=10.0, help='percent more that fails a row (default 10)')
    ap.add_argument('--repeat', type=int, default=1,
                    help='runs per workload and tree, alternating; the median counts (default 1)')
    ap.add_argument('--workload', action='append', choices=sorted(WORKLOADS),
                    help='only these workloads (repeatable; default all)')
    ap.add_argument('--json', metavar='FILE')
    args = ap.parse_args()
    if os.geteuid() == 0:
        env = dict(os.environ, HOME='/tmp')
        os.execvpe('setpriv', ['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups',
                               sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env)
    if not shutil.which('valgrind'):
        print('kgpu-bench-instructions: valgrind is not installed', file=sys.stderr)
        return 77
    workloads = args.workload or list(WORKLOADS)

    def log(s):
        print(s, flush=True)
    try:
        trees = [(t, os.path.abspath(b)) for t, b in (('base', args.base), ('new', args.build_root)) if b]
        result = measure(trees, workloads, max(1, args.repeat), log)
    except Exception as e:  # a node that did not start or a call that failed
        print('kgpu-bench-instructions: %s' % e, file=sys.stderr)
        return 2

    worse = []
    if args.base:
        print()
        print('instructions per call (callgrind Ir), base -> new')
        print('%-24s %-6s %14s %14s %8s' % ('workload', 'daemon', 'base', 'new', 'change'))
        for w in workloads:
            b, n = result['base'][w]['per_call'], result['new'][w]['per_call']
            for d in sorted(set(b) | set(n)):
                vb, vn = b.get(d, 0.0), n.get(d, 0.0)
                change = (vn / vb - 1.0) if vb > 0 else (0.0 if vn <= 0 else float('inf'))
                # A daemon the call does not reach (a few hundred instructions of noise:
                # one more poll wakeup in one run) is shown, never judged.
                judged = max(vb, vn) >= 10000
                bad = judged and change > args.limit / 100.0
                if bad:
                    worse.append('%s %s' % (w, d))
                print('%-24s %-6s %14.0f %14.0f %+7.1f%%%s' % (w, d, vb, vn, change * 100,
                                                               ' WORSE' if bad else ('' if judged else ' (not reached)')))
        print()
        print('%s' % ('rows more than %.0f%% worse: %s' % (args.limit, ', '.join(worse)) if worse
                      else 'no row more than %.0f%% worse' % args.limit))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'workloads': {w: WORKLOADS[w] for w in workloads}, 'result': result,
                       'worse': worse}, f, indent=1)
    return 1 if worse else 0


if __name__ == '__main__':
    sys.exit(main())
