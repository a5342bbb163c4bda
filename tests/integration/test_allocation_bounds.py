#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_allocation_bounds.py — what one caller of Broker1.Allocate can make the broker
# keep: a bounded number of allocations, flat memory, a bounded WAL, and a clear refusal
# at broker.maxAllocations.
#
# Asserts, on a whole node with no reconciliation (kubelet.reconcileIntervalSec 0, so
# nothing but Allocate itself removes a record):
#   flood: KGPU_FLOOD_ALLOCATES (default 5000) Allocates of one exclusive GPU, made
#     directly on the bus as root (a front end that never reconciles, as a compromised
#     kgpu-grpcd would), all accepted; afterwards the database and ListAllocations hold
#     exactly one allocation of the GPU, the newest; the broker's VmRSS, sampled 50 times,
#     grows by at most RSS_SLACK_KB after the first tenth of the calls (not checked when
#     the broker is built with ASan, whose quarantine holds freed memory); kgpu.db-wal,
#     sampled every 25 calls, never exceeds the store's bound (STORE_WAL_SIZE_MAX plus one
#     transaction, read from daemons/broker/store.h);
#   cap: broker.maxAllocations lowered to 1 by a reload: an Allocate of the other GPU is
#     refused on the bus with io.kgpu.Error.TooManyAllocations naming the key and the
#     numbers, and nothing is stored; allocating the stored GPU again is admitted
#     (it replaces its allocation); through grpcd the kubelet gets RESOURCE_EXHAUSTED
#     after exactly one PodResources List (the stored allocation is young and never
#     reported, so it is kept); once PodResources has reported that allocation's pod and
#     then no longer does, the refused Allocate is reconciled, the gone pod's allocation
#     released and the Allocate asked again is admitted.

import os
import re
import signal
import sqlite3
import time

import dbus
import grpc

import harness
from harness import check, RES_I915, RES_XE, GPU_I915, GPU_XE

FLOOD = int(os.environ.get('KGPU_FLOOD_ALLOCATES', '5000'))
# Allowed RSS growth over the flood after its first tenth: the allocator's and SQLite's
# page cache settling. Storing every call (540 B each) grows it by over 2 MB in 5000.
RSS_SLACK_KB = 256
ENV = {'KGPU_RECONCILE_INTERVAL_SEC': '0', 'KGPU_LOG_LEVEL': 'info'}


def wal_bound():
    """STORE_WAL_SIZE_MAX plus one 16-frame transaction, as store.h defines them."""
    with open(os.path.join(harness.SOURCE_ROOT, 'daemons', 'broker', 'store.h')) as f:
        text = f.read()
    frames = int(re.search(r'#define STORE_WAL_CHECKPOINT_FRAMES (\d+)', text).group(1))
    check('#define STORE_WAL_FRAMES_MAX (2 * STORE_WAL_CHECKPOINT_FRAMES)' in text and
          '#define STORE_WAL_SIZE_MAX (STORE_WAL_FRAMES_MAX * (4096 + 24) + 32)' in text,
          'store.h: the WAL bound is defined differently now; update this test')
    return 2 * frames * (4096 + 24) + 32 + 16 * (4096 + 24)


# Schema v4: an allocation's device ids in one column, joined by line breaks.
HOLDS = "instr(char(10) || device_ids || char(10), char(10) || ? || char(10)) > 0"


def db_rows(node, resource, device):
    c = sqlite3.connect('file:%s?mode=ro' % os.path.join(node.state_dir, 'kgpu.db'), uri=True)
    try:
        c.execute('PRAGMA busy_timeout = 2000')
        return c.execute('SELECT id, created_usec FROM allocations WHERE resource = ? AND ' + HOLDS,
                         (resource, device)).fetchall()
    finally:
        c.close()


def holder(node, resource, device):
    c = sqlite3.connect('file:%s?mode=ro' % os.path.join(node.state_dir, 'kgpu.db'), uri=True)
    try:
        c.execute('PRAGMA busy_timeout = 2000')
        rows = c.execute('SELECT pod_name FROM allocations WHERE resource = ? AND ' + HOLDS,
                         (resource, device)).fetchall()
    finally:
        c.close()
    return rows[0][0] if len(rows) == 1 else rows


def allocate(bus, resource, device):
    """Broker1.Allocate on the bus; None or (error name, message)."""
    try:
        bus.call_blocking(harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS, 'Allocate', 'saas',
                          [resource, [[device]]], timeout=10)
        return None
    except dbus.exceptions.DBusException as e:
        return (e.get_dbus_name(), e.get_dbus_message() or '')


def flood(node, bus):
    broker = node.daemons['broker']
    wal = os.path.join(node.state_dir, 'kgpu.db-wal')
    bound = wal_bound()
    warm = max(FLOOD // 10, 1)
    rss, wal_max, t0 = [], 0, time.monotonic()
    for i in range(FLOOD):
        if i == FLOOD - 1:
            last_sent = time.time_ns() // 1000
        err = allocate(bus, RES_I915, GPU_I915)
        check(err is None, 'Allocate %d of %s refused: %r' % (i, GPU_I915, err))
        if i % 25 == 0 or i == FLOOD - 1:
            try:
                wal_max = max(wal_max, os.stat(wal).st_size)
            except FileNotFoundError:
                pass
            check(wal_max <= bound, 'after %d Allocates kgpu.db-wal is %d bytes, over the bound %d'
                  % (i + 1, wal_max, bound))
        if i + 1 >= warm and (i + 1 - warm) % max((FLOOD - warm) // 50, 1) == 0 or i == FLOOD - 1:
            rss.append(harness.rss_kb(broker.pid))
    dt = time.monotonic() - t0
    check(broker.alive(), 'the broker died during the flood')

    rows = db_rows(node, RES_I915, GPU_I915)
    listed = [a for a in node.list_allocations() if a[1] == RES_I915]
    growth = max(rss) - rss[0]
    print('flood: %d Allocates of %s in %.1f s (%.0f/s); stored allocations of it: %d; broker VmRSS '
          'after the first tenth %d kB, max %d kB, at the end %d kB (growth %d kB, bound %d); kgpu.db-wal max %d '
          'bytes (bound %d)' % (FLOOD, GPU_I915, dt, FLOOD / dt, len(rows), rss[0], max(rss), rss[-1], growth,
                                RSS_SLACK_KB, wal_max, bound))
    if asan(broker.pid):
        print('flood: VmRSS not checked: the broker runs with ASan (its quarantine keeps freed memory)')
    else:
        check(growth <= RSS_SLACK_KB, 'broker VmRSS grew by %d kB during the flood: %r' % (growth, rss))
    check(len(rows) == 1, '%d stored allocations of %s after %d Allocates, expected 1' % (len(rows), GPU_I915, FLOOD))
    check(len(listed) == 1 and listed[0][0] == rows[0][0] and listed[0][3] >= last_sent,
          'ListAllocations %r, database %r: not the newest allocation' % (listed, rows))
    check('(supersedes %d, ' % (rows[0][0] - 1) in broker.log_text(), 'superseding not logged')


def asan(pid):
    with open('/proc/%d/maps' % pid) as f:
        return 'libasan' in f.read()


def reload_broker(node):
    broker = node.daemons['broker']
    n = broker.log_text().count('Reloaded the configuration')
    broker.send_signal(signal.SIGHUP)
    node.wait_for(lambda: check(broker.log_text().count('Reloaded the configuration') > n, 'not reloaded'), 5,
                  what='broker reload')


def cap(node, bus):
    node.write_config_extra('broker:\n  maxAllocations: 1\n')
    reload_broker(node)
    before = node.list_allocations()
    check(len(before) == 1, 'allocations before the cap test: %r' % before)

    err = allocate(bus, RES_XE, GPU_XE)
    check(err is not None and err[0] == 'io.kgpu.Error.TooManyAllocations', 'Allocate over the cap: %r' % (err,))
    check('at most 1 allocations (broker.maxAllocations) and 1 are recorded' in err[1], 'message %r' % err[1])
    print('cap on the bus: %s: %s' % err)
    check(node.list_allocations() == before, 'a refused Allocate changed the allocations: %r'
          % node.list_allocations())
    check(not db_rows(node, RES_XE, GPU_XE), 'a refused Allocate was stored')
    check('Refusing Allocate of %s' % RES_XE in node.daemons['broker'].log_text(), 'refusal not logged')

    # The stored GPU again: it replaces its own allocation, so it fits.
    check(allocate(bus, RES_I915, GPU_I915) is None, 'allocating the stored GPU again at the cap was refused')
    after = node.list_allocations()
    check(len(after) == 1 and after[0][0] > before[0][0], 'after allocating it again: %r' % after)

    # Through grpcd: one reconciliation (nothing released: young, never reported), then
    # the kubelet's answer.
    node.kubelet.wait_connected([RES_I915, RES_XE], timeout=10)
    xe = node.kubelet.plugin(RES_XE)
    n = node.kubelet.list_calls
    try:
        xe.allocate([GPU_XE])
        raise AssertionError('Allocate of %s through grpcd admitted over the cap' % GPU_XE)
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and 'broker.maxAllocations' in e.details(),
              'through grpcd: %s %r' % (e.code(), e.details()))
        print('cap through grpcd: %s: %s' % (e.code().name, e.details()))
    check(node.kubelet.list_calls == n + 1, 'refused after %d List calls, expected 1' % (node.kubelet.list_calls - n))

    # Its pod is reported once, then gone: the refused Allocate's reconciliation releases
    # it and the Allocate asked again is admitted.
    node.kubelet.set_pods([('p1', 'ns', [('c', [(RES_I915, [GPU_I915])])])])
    node.daemons['grpc'].send_signal(signal.SIGHUP)
    node.wait_for(lambda: check(node.kubelet.list_calls > n + 1, 'no List after SIGHUP'), 5, what='List')
    node.wait_for(lambda: check(holder(node, RES_I915, GPU_I915) == 'p1', 'holder %r' % holder(node, RES_I915, GPU_I915)),
                  5, what='the holder recorded')
    node.kubelet.set_pods([])
    try:
        xe.allocate([GPU_XE])
    except grpc.RpcError as e:
        raise AssertionError('refused although the only stored allocation\'s pod is gone: %s %r'
                             % (e.code(), e.details()))
    now = node.list_allocations()
    check([(a[1], a[2]) for a in now] == [(RES_XE, [GPU_XE])], 'after the release: %r' % now)


def run(node):
    if harness.VALGRIND:
        raise harness.Skip('not under valgrind (KGPU_VALGRIND=1): the flood is the point')
    node.kubelet.wait_connected([RES_I915, RES_XE], timeout=10)
    bus = dbus.bus.BusConnection(node.bus_address)
    try:
        flood(node, bus)
        cap(node, bus)
    finally:
        bus.close()


if __name__ == '__main__':
    harness.run_test(run, need_root=True, extra_env=ENV)
