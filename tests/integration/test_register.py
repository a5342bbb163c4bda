#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_register.py — both Intel resources register with the kubelet, correctly.
#
# Asserts: each daemon sent READY=1 via sd_notify; gpu.intel.com/i915 and
# gpu.intel.com/xe each register once, version "v1beta1", endpoint = the socket's file
# name (kgpu-gpu.intel.com-<driver>.sock, not a path) which exists as a socket in the
# device-plugins directory; the options in RegisterRequest equal Broker1.ListResources
# and GetDevicePluginOptions; every daemon exits 0 on SIGTERM.

import os
import stat

import harness
from harness import check, TWO_GPUS


def run(node):
    for name in ('probe', 'broker', 'grpc'):
        node.daemons[name].wait_notify('READY', '1', timeout=5)

    regs = node.kubelet.wait_registrations(TWO_GPUS.keys(), timeout=5)
    listed = {r[0]: (bool(r[1]), bool(r[2])) for r in
              node.busctl('call', harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS,
                          'ListResources')['data'][0]}
    check(set(listed) == set(TWO_GPUS), 'ListResources %r, expected %r' % (listed, sorted(TWO_GPUS)))

    for res, reg in regs.items():
        check(reg.version == 'v1beta1', '%s: version %r' % (res, reg.version))
        want = 'kgpu-%s.sock' % res.replace('/', '-')
        check(reg.endpoint == want, '%s: endpoint %r, expected %r' % (res, reg.endpoint, want))
        path = os.path.join(node.plugin_dir, reg.endpoint)
        check(stat.S_ISSOCK(os.lstat(path).st_mode), '%s is not a socket' % path)
        opts = (reg.pre_start_required, reg.get_preferred_allocation_available)
        check(opts == listed[res], '%s: registered options %r, broker says %r' % (res, opts, listed[res]))
        cl = node.kubelet.plugin(res)
        o = cl.get_options()
        check((o['pre_start_required'], o['get_preferred_allocation_available']) == opts,
              '%s: GetDevicePluginOptions %r differs from RegisterRequest %r' % (res, o, opts))
    n = {}
    for r in node.kubelet.registrations:
        n[r.resource_name] = n.get(r.resource_name, 0) + 1
    check(all(v == 1 for v in n.values()), 'duplicate registrations at start: %r' % n)

    rcs = node.stop(dump_on_unclean=True)
    check(rcs == {'grpc': 0, 'broker': 0, 'probe': 0}, 'exit codes on SIGTERM: %r' % rcs)


if __name__ == '__main__':
    harness.run_test(run)
