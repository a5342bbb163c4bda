#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_allocate.py — what the kubelet sees and gets for each Intel resource.
#
# Asserts, per resource (i915: 0000:03:00.0 card0/renderD128, xe: 0000:04:00.0
# card1/renderD129): ListAndWatch lists exactly one device, that GPU's Id, "Healthy",
# NUMA nodes equal to Broker1.GetDevices; GetPreferredAllocation returns the id (also
# with must_include, and must_include first for size 2 over a list with an unknown
# extra id filtered or kept in order); Allocate returns exactly the card and render
# node specs with container path == host path and "rw", and no envs, mounts,
# annotations or CDI devices; PreStartContainer succeeds; Allocate of an unknown id
# fails with a non-OK status whose message names the id; the one device requested by
# two containers in one Allocate is refused with INVALID_ARGUMENT.

import grpc

import harness
from harness import check, TWO_GPUS


def run(node):
    for res, (gpu, card, render) in TWO_GPUS.items():
        cl = node.kubelet.plugin(res)
        _, devs = cl.wait_update(lambda d: len(d) > 0, timeout=5)
        check(len(devs) == 1, '%s: ListAndWatch %r, expected one device' % (res, devs))
        d = devs[0]
        check(d['id'] == gpu and d['health'] == 'Healthy', '%s: device %r' % (res, d))
        bus = node.busctl('call', harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS,
                          'GetDevices', 's', res)['data'][0]
        check(len(bus) == 1 and bus[0][0] == gpu, '%s: Broker1.GetDevices %r' % (res, bus))
        check(d['numa'] == list(bus[0][2]), '%s: NUMA %r vs broker %r' % (res, d['numa'], bus[0][2]))

        if cl.options['get_preferred_allocation_available']:
            pref = cl.get_preferred_allocation([gpu], [], 1)
            check(pref == [gpu], '%s: preferred %r' % (res, pref))
            pref = cl.get_preferred_allocation([gpu], [gpu], 1)
            check(pref == [gpu], '%s: preferred with must_include %r' % (res, pref))
            multi = cl.get_preferred_allocation_multi([([gpu], [], 1), ([gpu], [gpu], 1)])
            check(multi == [[gpu], [gpu]], '%s: two container requests %r' % (res, multi))

        c = cl.allocate([gpu])
        want = sorted([(card, card, 'rw'), (render, render, 'rw')])
        got = sorted((x['container_path'], x['host_path'], x['permissions']) for x in c['devices'])
        check(got == want, '%s: Allocate devices %r, expected %r' % (res, got, want))
        check(not c['envs'] and not c['mounts'] and not c['annotations'] and not c['cdi_devices'],
              '%s: unexpected extras in Allocate %r' % (res, c))

        # One device, so two containers asking for it in one call is a conflict.
        try:
            cl.allocate_multi([[gpu], [gpu]])
            raise AssertionError('%s: the same device for two containers was granted' % res)
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT,
                  '%s: duplicate id got %s %r' % (res, e.code(), e.details()))

        check(cl.pre_start_container([gpu]), 'PreStartContainer')

        try:
            cl.allocate(['0000:ff:00.0'])
            raise AssertionError('%s: Allocate of an unknown id succeeded' % res)
        except grpc.RpcError as e:
            check(e.code() != grpc.StatusCode.OK, 'status')
            check('0000:ff:00.0' in (e.details() or ''),
                  '%s: error for unknown id does not name it: %s %r' % (res, e.code(), e.details()))


if __name__ == '__main__':
    harness.run_test(run)
