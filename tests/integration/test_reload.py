#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_reload.py — SIGHUP and Broker1.Reload re-read kgpu.yaml without dropping allocations.
#
# Asserts: with one allocation held, kgpu.yaml gets intel.sharedDevNum 2 and the broker
# gets SIGHUP: ListAndWatch of gpu.intel.com/i915 turns into the two share ids (both Intel
# resources announced as changed), the allocation is still listed; an invalid file
# (sharedDevNum: many) sent through Broker1.Reload is refused with
# io.kgpu.Error.InvalidConfig naming file:line:key, the devices stay as they were and a
# new Allocate still works; the same file with SIGHUP is logged and refused, the broker
# keeps running; Broker1.Reload back to the original file restores the plain ids, and
# again with the same file announces nothing; Reload from another user is denied.
# grpcd: SIGHUP re-reads the file and reconciles at once (a PodResources List); an invalid
# file is logged with its key and refused, grpcd keeps serving. probe: SIGHUP applies
# intel.memoryReserved (the NFD label memory.max drops by it per GPU); a bad byte count is
# refused and changes nothing.

import signal
import time

import harness
from harness import check, RES_I915, RES_XE, GPU_I915


def write_config(node, extra):
    with open(node.config_file) as f:
        base = f.read().split('# --- test_reload ---\n')[0]
    with open(node.config_file, 'w') as f:
        f.write(base + '# --- test_reload ---\n' + extra)


def reload(node, user=None):
    return node.busctl('call', harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS, 'Reload',
                       user=user, check=False)


def memory_max(node):
    with open(node.feature_file) as f:
        for line in f:
            if line.startswith('gpu.intel.com/memory.max='):
                return int(line.split('=', 1)[1])
    return None


def ids(devs):
    return sorted(d['id'] for d in devs)


def run(node):
    node.kubelet.wait_connected([RES_I915, RES_XE], timeout=10)
    i915 = node.kubelet.plugin(RES_I915)
    xe = node.kubelet.plugin(RES_XE)
    i915.wait_update(lambda d: ids(d) == [GPU_I915], timeout=5)
    _, xe_before = xe.wait_update(lambda d: len(d) == 1, timeout=5)
    i915.allocate([GPU_I915])
    check(len(node.list_allocations()) == 1, 'allocation not recorded')

    write_config(node, 'intel:\n  sharedDevNum: 2\n')
    t0 = time.monotonic()
    node.daemons['broker'].send_signal(signal.SIGHUP)
    i915.wait_update(lambda d: ids(d) == [GPU_I915 + '-0', GPU_I915 + '-1'], after=t0, timeout=5)
    check(len(node.list_allocations()) == 1, 'allocations dropped by the reload: %r' % node.list_allocations())
    node.wait_for(lambda: check('2 resource(s) changed: %s %s;' % (RES_I915, RES_XE) in node.daemons['broker'].log_text(),
                                'reload did not name the changed resources'), 3, what='reload log')
    check(node.daemons['broker'].notified('RELOADING'), 'no RELOADING=1 sent')

    write_config(node, 'intel:\n  sharedDevNum: many\n')
    r = reload(node)
    err = r.stderr.decode()
    check(r.returncode != 0 and 'kgpu.yaml:' in err and 'sharedDevNum' in err,
          'invalid config not refused with file:line:key: rc %d %r' % (r.returncode, err))
    time.sleep(0.3)
    check(ids(i915.devices()) == [GPU_I915 + '-0', GPU_I915 + '-1'], 'devices changed by a refused reload: %r'
          % i915.devices())
    i915.allocate([GPU_I915 + '-1'])
    check(len(node.list_allocations()) == 2, 'Allocate after a refused reload')

    refusals = node.daemons['broker'].log_text().count('Refusing to reload')
    node.daemons['broker'].send_signal(signal.SIGHUP)
    node.wait_for(lambda: check(node.daemons['broker'].log_text().count('Refusing to reload') > refusals,
                                'no refusal logged'), 5, what='SIGHUP refusal')
    check(node.daemons['broker'].alive(), 'broker died on an invalid config at SIGHUP')

    write_config(node, '')
    t0 = time.monotonic()
    r = reload(node)
    check(r.returncode == 0, 'Reload of a valid config failed: %r' % r.stderr)
    i915.wait_update(lambda d: ids(d) == [GPU_I915], after=t0, timeout=5)
    xe.wait_update(lambda d: d == xe_before, after=t0, timeout=5)
    # the same file again: nothing announced
    r = reload(node)
    check(r.returncode == 0, 'second Reload failed: %r' % r.stderr)
    node.wait_for(lambda: check('0 resource(s) changed;' in node.daemons['broker'].log_text(),
                                'an unchanged reload announced changes'), 3, what='reload log')
    check(len(node.list_allocations()) == 2, 'allocations dropped')

    r = reload(node, user='nobody')
    check(r.returncode != 0 and b'ccess denied' in r.stderr, 'Reload as nobody: %r' % r.stderr)

    # grpcd: SIGHUP re-reads the file, lists the resources again and reconciles at once
    grpcd = node.daemons['grpc']
    calls = node.kubelet.list_calls
    grpcd.send_signal(signal.SIGHUP)
    node.wait_for(lambda: check(node.kubelet.list_calls > calls, 'no PodResources List'), 5,
                  what='reconcile after SIGHUP')
    node.wait_for(lambda: check('Reloaded the configuration' in grpcd.log_text(), 'grpcd did not reload'), 3,
                  what='grpcd reload log')
    write_config(node, 'intel:\n  sharedDevNum: many\n')
    grpcd.send_signal(signal.SIGHUP)
    node.wait_for(lambda: check('sharedDevNum' in grpcd.log_text() and 'Refusing to reload' in grpcd.log_text(),
                                'grpcd did not refuse'), 5, what='grpcd refusal')
    check(grpcd.alive(), 'grpcd died on an invalid config at SIGHUP')
    xe.allocate([xe_before[0]['id']])

    # probe: SIGHUP applies intel.memoryReserved (labels rewritten); a bad value is refused
    probe = node.daemons['probe']
    before = memory_max(node)
    write_config(node, 'intel:\n  memoryReserved: 1073741824\n')
    probe.send_signal(signal.SIGHUP)
    node.wait_for(lambda: check(memory_max(node) == before - 2 * 1073741824,
                                'memory.max %r, was %r' % (memory_max(node), before)), 5, what='probe reload')
    write_config(node, 'intel:\n  memoryReserved: lots\n')
    probe.send_signal(signal.SIGHUP)
    node.wait_for(lambda: check('Refusing to reload' in probe.log_text(), 'probe did not refuse'), 5,
                  what='probe refusal')
    check(probe.alive() and memory_max(node) == before - 2 * 1073741824, 'probe changed by a refused reload')


if __name__ == '__main__':
    harness.run_test(run, need_root=True)
