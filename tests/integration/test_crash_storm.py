#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_crash_storm.py — SIGKILL the broker at random instants during a storm of Allocates.
#
# Three kubelet-simulator threads call Allocate back to back through grpcd on two shared
# resources (intel.sharedDevNum 4: ids <gpu>-0..3), each time a random id of the device
# list, as the kubelet would for a new container. At a random instant (5-150 ms into the
# storm) the broker gets SIGKILL; the threads pause once their call in flight is over
# (a call to a dead broker must fail within 2 s), the broker is restarted, and its state
# is compared with what the kubelet had acknowledged:
#   - 0 lost: for every (resource, id) acknowledged, the state database holds the
#     allocation of the last acknowledged call or a newer one (created no earlier than
#     that call was sent). An id allocated again supersedes its older allocation (the
#     kubelet hands an id to a new container only once the old one is gone), so that is
#     the only one of the id that must survive;
#   - nothing invented: every stored allocation is of an id some thread asked for;
#   - 0 over the sharing limit: at most one stored allocation per id, every allocated id
#     one the broker advertised, so no GPU has more than sharedDevNum holders; and the
#     broker's ListAllocations parses and agrees with the file.
# Kills: KGPU_CRASH_KILLS (default 100; CI). The closing line prints the totals.
# Reconciliation is kept out of the way (grace 1 day): this test is about crashes.

import os
import random
import signal
import sqlite3
import sys
import threading
import time
from collections import Counter

import grpc

import harness
from harness import check, RES_I915, RES_XE

KILLS = int(os.environ.get('KGPU_CRASH_KILLS', '100'))
THREADS = 3
SHARE = 4
ENV = {'KGPU_RECONCILE_GRACE_SEC': '86400', 'KGPU_RECONCILE_INTERVAL_SEC': '0'}


def db_counts(node):
    """(allocations per (resource, id), their created_usec, allocations, device rows)."""
    c = sqlite3.connect('file:%s?mode=ro' % os.path.join(node.state_dir, 'kgpu.db'), uri=True)
    try:
        c.execute('PRAGMA busy_timeout = 5000')
        # Schema v4: an allocation's device ids in one column, joined by line breaks.
        rows = [(a, res, dev, created) for a, res, ids, created in
                c.execute('SELECT id, resource, device_ids, created_usec FROM allocations').fetchall()
                for dev in ids.split('\n')]
        n_allocs = c.execute('SELECT count(*) FROM allocations').fetchone()[0]
    finally:
        c.close()
    created = {}
    for r in rows:
        created.setdefault((r[1], r[2]), []).append(r[3])
    return Counter((r[1], r[2]) for r in rows), created, n_allocs, len(rows)


class Storm:
    def __init__(self, node, ids):
        self.node = node
        self.ids = ids                  # [(resource, id)]
        self.lock = threading.Condition()
        self.acked = Counter()
        self.acked_sent = {}            # (resource, id) -> CLOCK_REALTIME usec the last acked call was sent
        self.asked = set()
        self.running = False
        self.busy = 0
        self.stop = False
        self.calls = 0
        self.slow = []
        self.errors = Counter()
        self.threads = [threading.Thread(target=self.loop, args=(i,), daemon=True) for i in range(THREADS)]

    def start(self):
        for t in self.threads:
            t.start()

    def loop(self, i):
        rnd = random.Random(1000 + i)
        while True:
            with self.lock:
                while not self.running and not self.stop:
                    self.lock.wait()
                if self.stop:
                    return
                self.busy += 1
            res, dev = rnd.choice(self.ids)
            t0 = time.monotonic()
            sent_usec = time.time_ns() // 1000
            with self.lock:
                self.asked.add((res, dev))
            ok = False
            try:
                self.node.kubelet.plugin(res, timeout=5).allocate([dev], timeout=5)
                ok = True
            except (grpc.RpcError, ValueError, TimeoutError) as e:
                code = e.code() if isinstance(e, grpc.RpcError) else type(e).__name__
                dt = time.monotonic() - t0
                with self.lock:
                    self.errors[str(code)] += 1
                    if dt >= 2.0:
                        self.slow.append((str(code), dt))
            with self.lock:
                self.calls += 1
                if ok:
                    self.acked[(res, dev)] += 1
                    self.acked_sent[(res, dev)] = max(self.acked_sent.get((res, dev), 0), sent_usec)
                self.busy -= 1
                self.lock.notify_all()
            if not ok:
                time.sleep(0.005)

    def pause(self):
        with self.lock:
            self.running = False
            ok = self.lock.wait_for(lambda: self.busy == 0, timeout=10)
        check(ok, 'Allocate calls still in flight 10 s after the broker died')

    def resume(self):
        with self.lock:
            self.running = True
            self.lock.notify_all()

    def finish(self):
        with self.lock:
            self.stop = True
            self.running = False
            self.lock.notify_all()
        for t in self.threads:
            t.join(10)


def run(node):
    if harness.VALGRIND:
        # SIGKILLed brokers are never leak-checked, and the storm's pace is the point.
        raise harness.Skip('not under valgrind (KGPU_VALGRIND=1)')
    node.kubelet.wait_connected([RES_I915, RES_XE], timeout=10)
    ids = []
    for res in (RES_I915, RES_XE):
        _, devs = node.kubelet.plugin(res).wait_update(lambda d: len(d) == SHARE, timeout=10)
        ids += [(res, d['id']) for d in devs]
    advertised = set(ids)
    check(len(advertised) == 2 * SHARE, 'advertised %r' % ids)

    rnd = random.Random(int(os.environ.get('KGPU_CRASH_SEED', '5')))
    storm = Storm(node, ids)
    storm.start()
    t_start = time.monotonic()
    restart_s = []
    try:
        for k in range(KILLS):
            storm.resume()
            time.sleep(rnd.uniform(0.005, 0.15))
            node.daemons['broker'].send_signal(signal.SIGKILL)
            node.daemons['broker'].proc.wait(5)
            storm.pause()
            t0 = time.monotonic()
            node.restart_broker()
            restart_s.append(time.monotonic() - t0)

            counts, created, n_allocs, n_rows = db_counts(node)
            with storm.lock:
                acked = Counter(storm.acked)
                acked_sent = dict(storm.acked_sent)
                asked = set(storm.asked)
            lost = {key: (sent, created.get(key, [])) for key, sent in acked_sent.items()
                    if not any(c >= sent for c in created.get(key, []))}
            check(not lost, 'kill %d: acknowledged allocations lost (last acked call sent at, stored created_usec): %r'
                  % (k, lost))
            stacked = {key: n for key, n in counts.items() if n > 1}
            check(not stacked, 'kill %d: ids held by more than one stored allocation: %r' % (k, stacked))
            invented = set(counts) - asked
            check(not invented, 'kill %d: stored allocations of ids nobody asked for: %r' % (k, invented))
            check(n_rows == n_allocs, 'kill %d: %d device rows for %d allocations' % (k, n_rows, n_allocs))
            unknown = set(counts) - advertised
            check(not unknown, 'kill %d: ids never advertised (over the limit): %r' % (k, unknown))
            for res in (RES_I915, RES_XE):
                holders = sum(n for (r, d), n in counts.items() if r == res)
                check(holders <= SHARE, 'kill %d: %s held by %d > %d' % (k, res, holders, SHARE))
            extra = len(set(counts) - set(acked))
            if k % 25 == 0 or k == KILLS - 1:
                listed = node.list_allocations()
                check(len(listed) == min(n_allocs, 65536), 'kill %d: ListAllocations %d vs file %d'
                      % (k, len(listed), n_allocs))
                print('kill %d: %d acknowledged, %d stored (%d ids committed without any reply), %d calls, '
                      'errors %r' % (k, sum(acked.values()), n_allocs, extra, storm.calls, dict(storm.errors)))
                sys.stdout.flush()
    finally:
        storm.finish()

    check(not storm.slow, 'calls that took >= 2 s to fail: %r' % storm.slow[:5])
    check(sum(storm.acked.values()) > KILLS, 'the storm acknowledged only %d allocations'
          % sum(storm.acked.values()))
    restart_s.sort()
    print('RESULT kills=%d acknowledged=%d stored=%d lost=0 over_limit=0 calls=%d duration=%.1fs '
          'restart_p50=%.3fs restart_max=%.3fs' % (
              KILLS, sum(storm.acked.values()), db_counts(node)[2], storm.calls, time.monotonic() - t_start,
              restart_s[len(restart_s) // 2], restart_s[-1]))


if __name__ == '__main__':
    harness.run_test(run, extra_env=ENV, config_extra='intel:\n  sharedDevNum: %d\n' % SHARE)
