#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_state_faults.py — the state database corrupt, on a full disk, read-only.
#
# Asserts, each time with a clear error and a refusal to hand out devices, never a
# silent loss:
#   corrupt: kgpu.db replaced by garbage while the broker was down: the restarted broker
#     keeps serving ListAndWatch, answers Allocate with UNAVAILABLE naming the state
#     database, and leaves the file byte for byte as it was;
#   full disk: the state directory is a 160 KiB tmpfs; Allocates of one GPU until the
#     disk is full (each supersedes the previous allocation of the GPU, the WAL fills the
#     disk): the failing ones get UNAVAILABLE "Failed to record the allocation", and after
#     the tmpfs is grown and the broker restarted the last acknowledged allocation is
#     there (none of the failed ones);
#   read-only: the broker started on the state tmpfs remounted read-only keeps serving
#     ListAndWatch and refuses Allocate (UNAVAILABLE naming the state database);
#     remounted read-write and the broker restarted, every acknowledged allocation is
#     there and Allocate works again (replacing the GPU's allocation with a new one). (A remount under the running broker is refused by
#     the kernel while the file is open for writing.)
#   schema v3: the state file a v3 broker wrote (tests/data/store/kgpu-v3.db) is migrated
#     to v4 by the broker at start: ListAllocations lists its five allocations as they
#     were, an Allocate of its Intel GPU supersedes the old allocation with a new id above
#     every id the v3 file ever gave; a file of schema v5 (a newer broker's) is refused:
#     Allocate UNAVAILABLE naming the state database, "newer" in the log, the file kept.

import os
import pwd
import sqlite3
import subprocess
import time

import grpc

import harness
from harness import check, RES_I915, RES_XE, GPU_I915, GPU_XE

ENV = {'KGPU_RECONCILE_GRACE_SEC': '86400', 'KGPU_RECONCILE_INTERVAL_SEC': '0'}


def allocate(node, res, dev):
    """Returns None on success, else (status code, details)."""
    try:
        node.kubelet.plugin(res).allocate([dev], timeout=5)
        return None
    except grpc.RpcError as e:
        return (e.code(), e.details())


def restart_broker(node):
    """Restarts the broker and waits until it serves both resources through grpcd."""
    node.restart_broker()
    node.wait_for(lambda: check(sorted(r[0] for r in node.busctl(
        'call', harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS, 'ListResources')['data'][0])
        == sorted([RES_I915, RES_XE]), 'broker resources'), 10, what='broker inventory')
    node.kubelet.wait_connected([RES_I915, RES_XE], timeout=10)


def db_path(node):
    return os.path.join(node.state_dir, 'kgpu.db')


def clear_state(node):
    for f in os.listdir(node.state_dir):
        os.unlink(os.path.join(node.state_dir, f))


def own_state(node):
    bu = pwd.getpwnam(harness.BROKER_USER)
    os.chown(node.state_dir, bu.pw_uid, bu.pw_gid)
    os.chmod(node.state_dir, 0o700)


def corrupt(node):
    node.daemons['broker'].stop()
    clear_state(node)
    garbage = bytes((i * 7 + 3) % 251 for i in range(16384))
    with open(db_path(node), 'wb') as f:
        f.write(garbage)
    own_state(node)
    restart_broker(node)
    err = allocate(node, RES_I915, GPU_I915)
    check(err is not None and err[0] == grpc.StatusCode.UNAVAILABLE and 'tate database' in err[1],
          'corrupt: Allocate answered %r' % (err,))
    check(len(node.kubelet.plugin(RES_I915).devices() or []) == 1, 'corrupt: ListAndWatch stopped')
    with open(db_path(node), 'rb') as f:
        check(f.read() == garbage, 'corrupt: the database file was modified')
    check('refusing all allocations' in node.daemons['broker'].log_text() or
          'State database unusable' in node.daemons['broker'].log_text(), 'corrupt: not logged')
    r = node.busctl('call', harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS, 'ListAllocations',
                    check=False)
    check(r.returncode != 0 and b'StateUnavailable' in r.stderr or b'tate database' in r.stderr,
          'corrupt: ListAllocations %r' % (r.stderr,))
    node.daemons['broker'].stop()
    clear_state(node)


def full_disk(node):
    r = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=160k,mode=0700', 'kgpu-state', node.state_dir],
                       stderr=subprocess.PIPE)
    if r.returncode != 0:
        print('SKIP full disk and read-only: cannot mount a tmpfs here: %s' % r.stderr.decode().strip())
        return
    try:
        own_state(node)
        restart_broker(node)
        acked, failures, last_sent, failed_sent = 0, [], 0, None
        for i in range(20000):
            sent = time.time_ns() // 1000
            err = allocate(node, RES_I915, GPU_I915)
            if err is None:
                acked += 1
                last_sent, failed_sent = sent, None
            else:
                failed_sent = failed_sent or sent
                failures.append(err)
                if len(failures) >= 5:
                    break
        print('full disk: %d acknowledged before %d failures: %r' % (acked, len(failures), failures[:1]))
        check(acked > 0 and failures, 'full disk: %d acknowledged, failures %r' % (acked, failures[:1]))
        check(all(f[0] == grpc.StatusCode.UNAVAILABLE and 'record' in f[1] for f in failures),
              'full disk: failures %r' % failures)
        check('Failed to record an allocation' in node.daemons['broker'].log_text(), 'full disk: not logged')

        node.daemons['broker'].stop()
        subprocess.run(['mount', '-o', 'remount,size=16m', node.state_dir], check=True)
        restart_broker(node)
        allocs = node.list_allocations()
        check(len(allocs) == 1 and allocs[0][3] >= last_sent and allocs[0][2] == [GPU_I915],
              'full disk: %d acknowledged, the last sent at %d; stored %r' % (acked, last_sent, allocs))
        check(allocs[0][3] < failed_sent, 'full disk: a failed Allocate (first sent at %d) was stored: %r'
              % (failed_sent, allocs))
        check(allocate(node, RES_XE, GPU_XE) is None, 'full disk: Allocate after growing the disk')

        # read-only (the kernel refuses a remount while the broker has the file open for
        # writing, so it happens between two runs of the broker)
        before = sorted(node.list_allocations())
        node.daemons['broker'].stop()
        subprocess.run(['mount', '-o', 'remount,ro', node.state_dir], check=True)
        restart_broker(node)
        errs = [allocate(node, RES_XE, GPU_XE) for _ in range(3)]
        print('read-only: %r' % (errs[0],))
        check(all(e is not None and e[0] == grpc.StatusCode.UNAVAILABLE and 'tate database' in e[1] for e in errs),
              'read-only: Allocate answered %r' % errs)
        check(len(node.kubelet.plugin(RES_XE).devices() or []) == 1, 'read-only: ListAndWatch stopped')
        node.daemons['broker'].stop()
        subprocess.run(['mount', '-o', 'remount,rw', node.state_dir], check=True)
        restart_broker(node)
        check(sorted(node.list_allocations()) == before, 'read-only: stored %r, before %r'
              % (node.list_allocations(), before))
        check(allocate(node, RES_XE, GPU_XE) is None, 'read-only: Allocate after remounting read-write')
        after = node.list_allocations()
        xe = [a for a in after if a[1] == RES_XE]
        check(len(after) == len(before) and len(xe) == 1 and xe[0][0] > max(a[0] for a in before),
              'read-only: the new allocation was not recorded: %r, before %r' % (after, before))
    finally:
        node.daemons['broker'].stop()
        subprocess.run(['umount', node.state_dir], check=False)


def place_v3(node):
    node.daemons['broker'].stop()
    clear_state(node)
    with open(os.path.join(harness.SOURCE_ROOT, 'tests', 'data', 'store', 'kgpu-v3.db'), 'rb') as f:
        data = f.read()
    with open(db_path(node), 'wb') as f:
        f.write(data)
    own_state(node)
    bu = pwd.getpwnam(harness.BROKER_USER)
    os.chown(db_path(node), bu.pw_uid, bu.pw_gid)
    os.chmod(db_path(node), 0o600)


def schema_v3(node):
    # grpcd stopped: its reconciliation at the broker's start would release the file's
    # allocations (another boot, pods the simulated kubelet never ran).
    node.daemons['grpc'].stop()
    place_v3(node)
    node.restart_broker()
    got = sorted((a[0], a[1], list(a[2])) for a in node.list_allocations())
    mig = ['MIG-%df1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0' % i for i in range(3)]
    want = [(1, RES_I915, [GPU_I915]), (3, RES_I915, [GPU_XE]),
            (4, 'nvidia.com/gpu', ['GPU-4a5e1f3c-9d2b-4e8f-a1c7-0b3d5e7f9a11::0',
                                   'GPU-4a5e1f3c-9d2b-4e8f-a1c7-0b3d5e7f9a11::1']),
            (5, 'nvidia.com/gpu', ['GPU-7c8d9e0f-1a2b-4c3d-8e5f-6a7b8c9d0e22::0']),
            (6, 'nvidia.com/mig-1g.10gb', mig)]
    check(got == want, 'schema v3: allocations after the migration %r, expected %r' % (got, want))
    last = max(r.t for r in node.kubelet.registrations)
    node.start_grpcd()
    node.kubelet.wait_registrations([RES_I915, RES_XE], since=last + 1e-6, timeout=10)
    # The new grpcd may register twice (once more when the broker's resources reach it):
    # a call on a channel the kubelet dropped is asked again, as the kubelet would.
    deadline = time.monotonic() + 10
    while True:
        node.kubelet.wait_connected([RES_I915, RES_XE], timeout=10)
        err = allocate(node, RES_I915, GPU_I915)
        if err is None or err[0] != grpc.StatusCode.CANCELLED or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    check(err is None, 'schema v3: Allocate after the migration: %r' % (err,))
    # Ids go on above the v3 file's AUTOINCREMENT sequence (7), whatever was released.
    got = [(a[0], list(a[2])) for a in node.list_allocations() if a[1] == RES_I915 and a[2] == [GPU_I915]]
    check(len(got) == 1 and got[0][0] > 7, 'schema v3: the allocation of %s after an Allocate: %r' % (GPU_I915, got))

    # A newer broker's file: refused, kept.
    node.daemons['broker'].stop()
    c = sqlite3.connect(db_path(node))
    c.execute('PRAGMA user_version = 5')
    c.close()
    with open(db_path(node), 'rb') as f:
        before = f.read()
    restart_broker(node)
    err = allocate(node, RES_I915, GPU_I915)
    check(err is not None and err[0] == grpc.StatusCode.UNAVAILABLE and 'tate database' in err[1],
          'schema v5: Allocate answered %r' % (err,))
    check('newer' in node.daemons['broker'].log_text(), 'schema v5: the refusal does not say "newer"')
    with open(db_path(node), 'rb') as f:
        check(f.read() == before, 'schema v5: the database file was modified')
    node.daemons['broker'].stop()
    clear_state(node)
    restart_broker(node)


def run(node):
    node.kubelet.wait_connected([RES_I915, RES_XE], timeout=10)
    corrupt(node)
    schema_v3(node)
    full_disk(node)


if __name__ == '__main__':
    harness.run_test(run, need_root=True, extra_env=ENV)
