#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_intel_gas.py — the Intel resource manager (intel.resourceManager) with GPU Aware
# Scheduling's pod annotations, delivered through Broker1.SetGasPods on the real bus by the
# user kgpu-cluster (standing in for kgpu-clusterd). Two i915 GPUs of layout eight-gpus:
# 0000:18:00.0 (card0/renderD128) and 0000:28:00.0 (card1/renderD129), sharedDevNum 2.
#
# Asserts:
#  - before any SetGasPods, Allocate is refused (FAILED_PRECONDITION) with the reason
#    naming the request and kgpu-clusterd;
#  - SetGasPods from a user the bus lets through but who is neither root nor kgpu-cluster
#    is refused by the broker (io.kgpu.Error.AccessDenied); from kgpu (the bus policy) too;
#  - malformed input (a bad cards annotation, a negative count, 4097 pods) is
#    io.kgpu.Error.InvalidArgs and the set in force stays (the next pods are still served);
#  - pods whose annotations name different cards get exactly those cards' device nodes:
#    pod "a" (oldest gas-ts) card1 with ZE_AFFINITY_MASK=0.0,0.1; pod "b", its first
#    container card0 with ZE_AFFINITY_MASK=0.1, its second (2 devices) card0 and card1 and
#    no mask; GetPreferredAllocation names a share of exactly those cards;
#  - a pod without GAS annotations, and a request size no pending container has, are
#    refused with the reason;
#  - across a broker restart (the pods sent again, as kgpu-clusterd does), containers the
#    kubelet's PodResources reported are not served twice: pod a is done, b's next
#    container is its second one.

import os
import pwd
import subprocess
import time

import dbus
import grpc

import harness
import intel_devmgr
from harness import check, RES_I915, BROKER_BUS, BROKER_PATH

CLUSTER_USER = 'kgpu-cluster'
OUTSIDER = 'nobody'
CARD = {
    'card0': ('0000:18:00.0', '/dev/dri/card0', '/dev/dri/renderD128'),
    'card1': ('0000:28:00.0', '/dev/dri/card1', '/dev/dri/renderD129'),
}
SIG = 'a(ssssssaa{sx})'
# Lets OUTSIDER reach SetGasPods on the bus, so that the broker's own uid check is what
# answers it (the shipped policy already stops it at the bus).
OUTSIDER_POLICY = ('  <policy user="%s">\n    <allow send_destination="io.kgpu.Broker1"'
                   ' send_interface="io.kgpu.Broker1" send_member="SetGasPods"/>\n  </policy>\n' % OUTSIDER)


def pod(uid, name, ts, cards, tiles, counts):
    return [uid, 'default', name, ts, cards, tiles,
            [{RES_I915: c, 'gpu.intel.com/millicores': 100 * c} if c else {'gpu.intel.com/millicores': 10}
             for c in counts]]


PODS = [
    # b is younger than a; its middle container asks no i915 (no cards segment of its own).
    pod('uid-b', 'b', '1700000000000000002', 'card0|card0,card1', 'card0:gt1', [1, 0, 2]),
    pod('uid-a', 'a', '1700000000000000001', 'card1', 'card1:gt0+gt1', [1]),
    # gas-ts set, the scheduler's card choice not (yet) written: never served.
    pod('uid-d', 'd', '1700000000000000000', '', '', [1]),
]


def set_gas_pods(node, user, pods):
    if user == 'root':
        # In-process (this test runs as root): 4097 pods do not fit a command line.
        bus = dbus.bus.BusConnection(node.bus_address)
        try:
            bus.call_blocking(BROKER_BUS, BROKER_PATH, BROKER_BUS, 'SetGasPods', SIG, [pods], timeout=15)
            return ('ok', [])
        except dbus.exceptions.DBusException as e:
            return ('error', e.get_dbus_name(), e.get_dbus_message() or '')
        finally:
            bus.close()
    return node.call_as(user, BROKER_BUS, BROKER_PATH, BROKER_BUS, 'SetGasPods', SIG, [pods])


def expect_refused(dm, ids, words):
    try:
        dm.cl.allocate(ids)
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, '%r: %s %r' % (ids, e.code(), e.details()))
        for w in words:
            check(w in e.details(), '%r: %r lacks %r' % (ids, e.details(), w))
        return e.details()
    raise AssertionError('Allocate of %r was not refused' % ids)


def check_answer(what, answer, cards, mask):
    want = sorted((n, n, 'rw') for c in cards for n in CARD[c][1:])
    got = sorted((d['container_path'], d['host_path'], d['permissions']) for d in answer['devices'])
    check(got == want, '%s: devices %r, expected %r' % (what, got, want))
    envs = answer.get('envs', {})
    if mask is None:
        check('ZE_AFFINITY_MASK' not in envs, '%s: envs %r' % (what, envs))
    else:
        check(envs.get('ZE_AFFINITY_MASK') == mask, '%s: envs %r, expected mask %r' % (what, envs, mask))


def admit(dm, name, size, cards, mask):
    ids, answer = dm.admit(name, size)
    check(sorted(intel_devmgr.gpu_of(i) for i in ids) == sorted(CARD[c][0] for c in cards),
          '%s: preferred/allocated %r, GAS chose %r' % (name, ids, cards))
    check_answer(name, answer, cards, mask)
    return ids


def run(node):
    dm = intel_devmgr.DeviceManager(node)
    check(len(dm.all_ids) == 4, 'ids %r' % dm.all_ids)
    log = node.daemons['broker'].log_text()
    check('not supported' not in log and 'intel.resourceManager (-resource-manager): Allocate of' in log,
          'the broker does not say resource manager mode is on')

    # Nothing from kgpu-clusterd yet.
    expect_refused(dm, [dm.free[0]], ['resource manager: no pending pod on this node has GAS annotations '
                                      'for a container requesting 1 gpu.intel.com/i915', 'kgpu-clusterd'])

    # Who may call SetGasPods.
    r = set_gas_pods(node, OUTSIDER, PODS)
    check(r[0] == 'error' and r[1] == 'io.kgpu.Error.AccessDenied' and CLUSTER_USER in r[2], 'as %s: %r' % (OUTSIDER, r))
    r = set_gas_pods(node, harness.GRPC_USER, PODS)
    check(r[0] == 'error' and 'AccessDenied' in r[1], 'as %s: %r' % (harness.GRPC_USER, r))
    expect_refused(dm, [dm.free[0]], ['no pending pod'])

    r = set_gas_pods(node, CLUSTER_USER, PODS)
    check(r[0] == 'ok', 'SetGasPods as %s: %r' % (CLUSTER_USER, r))

    # Malformed input, as root and as kgpu-cluster: refused, the set above stays.
    bad_cards = [pod('uid-x', 'x', '1', 'card0,,card1', '', [1])]
    bad_count = [pod('uid-y', 'y', '1', 'card0', '', [1])]
    bad_count[0][6] = [{RES_I915: -1}]
    too_many = [pod('uid-%d' % i, 'p%d' % i, '1', 'card0', '', [1]) for i in range(4097)]
    many_containers = [pod('uid-z', 'z', '1', 'card0', '', [1] * 65)]
    many_limits = [pod('uid-l', 'l', '1', 'card0', '', [1])]
    many_limits[0][6] = [{'gpu.intel.com/r%d' % i: 1 for i in range(65)}]
    long_name = [pod('uid-n', 'n' * 5000, '1', 'card0', '', [1])]
    for user, pods, word in (('root', bad_cards, 'gas-container-cards'), (CLUSTER_USER, bad_count, 'limit'),
                             ('root', too_many, '4096'), ('root', many_containers, '64 containers'),
                             ('root', many_limits, '64 limits'), ('root', long_name, '4096 bytes')):
        r = set_gas_pods(node, user, pods)
        check(r[0] == 'error' and r[1] == 'io.kgpu.Error.InvalidArgs' and word in r[2],
              'malformed (%s) as %s: %r' % (word, user, r[:2]))

    # A size no pending container asks for.
    expect_refused(dm, dm.free[:3], ['requesting 3 gpu.intel.com/i915'])

    # The oldest pod first, each container its own cards and tiles.
    ids_a = admit(dm, 'a', 1, ['card1'], '0.0,0.1')
    ids_b0 = admit(dm, 'b-0', 1, ['card0'], '0.1')

    # The kubelet's PodResources shows both containers (pod and container names as GAS's
    # pods have them); the broker restarts and kgpu-clusterd sends the pods again (it does
    # on every new owner of io.kgpu.Broker1). The containers served before the restart
    # are not served again: one device fits no pod now, b's next container is its second.
    node.kubelet.set_pods([('a', 'default', [('main', [(RES_I915, ids_a)])]),
                           ('b', 'default', [('c0', [(RES_I915, ids_b0)])])])
    time.sleep(3)   # reconciliation every second records the holders
    node.restart_broker()
    r = set_gas_pods(node, CLUSTER_USER, PODS)
    check(r[0] == 'ok', 'SetGasPods after the restart: %r' % (r,))
    expect_refused(dm, [i for i in dm.free if intel_devmgr.gpu_of(i) == CARD['card1'][0]][:1],
                   ['no pending pod on this node has GAS annotations for a container requesting 1'])
    admit(dm, 'b-2', 2, ['card0', 'card1'], None)

    # Every annotated container is served; "d" has no cards: refused with the reason.
    expect_refused(dm, [dm.all_ids[0]], ['no pending pod on this node has GAS annotations for a container '
                                         'requesting 1 gpu.intel.com/i915; is kgpu-clusterd running?'])
    pref = dm.cl.get_preferred_allocation(list(dm.all_ids), [], 1)
    check(pref == [], 'GetPreferredAllocation with no pod that fits: %r, expected no preference' % (pref,))
    allocs = node.list_allocations()
    check(len(allocs) == 3, 'allocations %r' % (allocs,))


def ensure_cluster_user():
    try:
        pwd.getpwnam(CLUSTER_USER)
    except KeyError:
        subprocess.run(['useradd', '--system', '--no-create-home', '--shell', '/usr/sbin/nologin', CLUSTER_USER],
                       check=True)


def main():
    if not harness.is_root():
        print('SKIP %s: needs root (other uids on the bus)' % os.path.basename(__file__))
        raise SystemExit(77)
    # Before the bus starts: dbus-daemon ignores the policy of a user that does not exist.
    ensure_cluster_user()
    tmp = os.environ.get('TMPDIR', '/tmp')
    layout = intel_devmgr.layout_subset('eight-gpus', [g for g, _, _ in CARD.values()], os.path.join(
        tmp, 'kgpu-intel-gas-%d.umockdev' % os.getpid()))
    try:
        harness.run_test(run, need_root=True, layout=layout, resources=[RES_I915], bus_policy=OUTSIDER_POLICY,
                         extra_env={'KGPU_RECONCILE_INTERVAL_SEC': '1', 'KGPU_RECONCILE_GRACE_SEC': '60'},
                         config_extra='intel:\n  sharedDevNum: 2\n  resourceManager: true\n')
    finally:
        os.unlink(layout)


if __name__ == '__main__':
    main()
