#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_broker_errors.py — Broker1's D-Bus errors, as the contract names them.
#
# Asserts, calling io.kgpu.Broker1 directly with gdbus (as root, which the policy and
# the broker's uid check allow; gdbus prints the D-Bus error name, busctl does not): Allocate of an unknown device id fails with
# io.kgpu.Error.UnknownDevice and a message naming the id; GetDevices of an unknown
# resource fails with io.kgpu.Error.UnknownResource; after a udev remove of the i915 GPU,
# GetDevices reports it "Unhealthy" and Allocate of it fails with
# io.kgpu.Error.Unhealthy; after add it allocates again; the failed calls left no
# allocation behind (ListAllocations).

import shutil
import subprocess
import time

import harness
from harness import check, RES_I915, GPU_I915

B = (harness.BROKER_BUS, harness.BROKER_PATH, harness.BROKER_BUS)


def gdbus_error(node, method, *args):
    """Calls Broker1.<method> with gdbus (GVariant text arguments); it must fail.
    Returns gdbus's message, "GDBus.Error:<error name>: <text>" (busctl prints only the
    text, not the name)."""
    argv = ['gdbus', 'call', '--address', node.bus_address, '--dest', harness.BROKER_BUS,
            '--object-path', harness.BROKER_PATH, '--method',
            harness.BROKER_BUS + '.' + method] + list(args)
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
    check(r.returncode != 0, '%s%r succeeded: %s' % (method, args, r.stdout))
    return r.stderr.decode(errors='replace').strip()


def health(node):
    devs = node.busctl('call', *B, 'GetDevices', 's', RES_I915)['data'][0]
    return {d[0]: d[1] for d in devs}.get(GPU_I915)


def run(node):
    if not shutil.which('gdbus'):
        raise harness.Skip('gdbus (libglib2.0-bin) not installed')
    n0 = len(node.list_allocations())

    err = gdbus_error(node, 'Allocate', RES_I915, "[['0000:ff:00.0']]")
    check('io.kgpu.Error.UnknownDevice' in err and '0000:ff:00.0' in err,
          'unknown device: %r' % err)

    err = gdbus_error(node, 'GetDevices', 'example.com/none')
    check('io.kgpu.Error.UnknownResource' in err, 'unknown resource: %r' % err)

    node.testbed_cmd('remove ' + GPU_I915)
    node.wait_for(lambda: check(health(node) == 'Unhealthy', 'still healthy'), 5,
                  node.daemons['broker'], 'GetDevices to show Unhealthy')
    err = gdbus_error(node, 'Allocate', RES_I915, "[['%s']]" % GPU_I915)
    check('io.kgpu.Error.Unhealthy' in err, 'unhealthy device: %r' % err)
    check(len(node.list_allocations()) == n0, 'failed Allocates left records behind')

    node.testbed_cmd('add ' + GPU_I915)
    node.wait_for(lambda: check(health(node) == 'Healthy', 'still unhealthy'), 5,
                  node.daemons['broker'], 'GetDevices to show Healthy')
    deadline = time.monotonic() + 2
    while True:
        r = node.busctl('call', *B, 'Allocate', 'saas', RES_I915, '1', '1', GPU_I915, check=False)
        if r.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    check(r.returncode == 0, 'Allocate after add: %s' % r.stderr.decode(errors='replace'))
    check(len(node.list_allocations()) == n0 + 1, 'Allocate after add not recorded')


if __name__ == '__main__':
    harness.run_test(run)
