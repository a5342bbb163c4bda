#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_slow_reader.py — a ListAndWatch reader that does not read gets only the latest list.
#
# Asserts: a hand-made HTTP/2 client opens ListAndWatch on the i915 socket with a
# stream flow-control window of 0 (so grpcd can queue but not send); while it is
# blocked, 10 udev remove/add rounds and a final remove happen, and the kubelet
# simulator's own connection keeps working (its ListAndWatch sees the final Unhealthy,
# Allocate of the xe GPU succeeds); when the window is opened, the blocked stream
# delivers at most 3 messages (not one per change: no unbounded queue) and the last
# one lists the GPU "Unhealthy", the current state.

import os
import time

import harness
import h2raw
from harness import check, RES_I915, RES_XE, GPU_I915, GPU_XE

LAW = '/v1beta1.DevicePlugin/ListAndWatch'


def run(node):
    p = node.kubelet.p
    sock = os.path.join(node.plugin_dir, 'kgpu-gpu.intel.com-i915.sock')
    c = h2raw.H2Conn(sock, settings=[(h2raw.SETTINGS_INITIAL_WINDOW_SIZE, 0)])
    sid = c.request(LAW, h2raw.grpc_message(p.dp.Empty().SerializeToString()))
    early = c.read_data(sid, 0.3)
    check(early == b'', 'grpcd sent %d DATA bytes into a zero window' % len(early))

    i915 = node.kubelet.plugin(RES_I915)
    for _ in range(10):
        t = node.testbed_cmd('remove ' + GPU_I915)
        i915.wait_update(lambda d: d and d[0]['health'] == 'Unhealthy', after=t, timeout=5)
        t = node.testbed_cmd('add ' + GPU_I915)
        i915.wait_update(lambda d: d and d[0]['health'] == 'Healthy', after=t, timeout=5)
    t = node.testbed_cmd('remove ' + GPU_I915)
    i915.wait_update(lambda d: d and d[0]['health'] == 'Unhealthy', after=t, timeout=5)
    cx = node.kubelet.plugin(RES_XE).allocate([GPU_XE])
    check(len(cx['devices']) == 2, 'xe Allocate while a reader is blocked: %r' % cx)
    time.sleep(0.2)

    c.send(h2raw.window_update(sid, 1 << 20))
    data = c.read_data(sid, 1.0)
    c.close()
    msgs, rest = h2raw.grpc_messages(data)
    check(rest == b'', '%d trailing bytes of a partial message' % len(rest))
    check(1 <= len(msgs) <= 3, 'blocked reader got %d messages for 21 changes' % len(msgs))
    last = p.dp.ListAndWatchResponse.FromString(msgs[-1])
    got = [(d.ID, d.health) for d in last.devices]
    check(got == [(GPU_I915, 'Unhealthy')], 'latest message lists %r' % got)
    print('blocked reader received %d message(s) for 21 changes' % len(msgs))


if __name__ == '__main__':
    harness.run_test(run)
