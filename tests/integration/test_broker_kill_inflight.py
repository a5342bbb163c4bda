#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_broker_kill_inflight.py — kill -9 of the broker while Allocates are in flight.
#
# Asserts, 5 rounds: a thread calls Allocate of one GPU through grpcd back to back; the
# broker is killed with SIGKILL at a random instant (20-120 ms into the loop); the
# restarted broker lists one allocation of the GPU (each Allocate of it supersedes the
# previous one), made no earlier than the last acknowledged call was sent: the last
# acknowledged allocation or the call in flight, which may have committed without its
# reply arriving. So nothing acknowledged is lost and nothing is half-written
# (ListAllocations parses and the record names the resource and device asked for);
# calls made while the broker was down (started after the kill was seen) fail with
# UNAVAILABLE, never hang past 2 s.

import random
import signal
import threading
import time

import grpc

import harness
from harness import check, RES_I915, GPU_I915

ROUNDS = 5


def run(node):
    rnd = random.Random(1234)
    acked_total = 0
    last_acked_sent = [0]           # CLOCK_REALTIME usec when the last acknowledged call was sent
    for i in range(ROUNDS):
        node.kubelet.wait_connected([RES_I915], timeout=10)
        stop = threading.Event()
        acked = []
        failures = []

        killed = [None]

        def loop():
            while not stop.is_set():
                t0 = time.monotonic()
                sent = time.time_ns() // 1000
                try:
                    # the current registration, as the kubelet would use
                    node.kubelet.plugin(RES_I915).allocate([GPU_I915], timeout=10)
                    acked.append(1)
                    last_acked_sent[0] = sent
                except (grpc.RpcError, ValueError) as e:
                    if killed[0] is not None and t0 > killed[0]:
                        code = e.code() if isinstance(e, grpc.RpcError) else e
                        failures.append((code, time.monotonic() - t0))
                    time.sleep(0.005)

        th = threading.Thread(target=loop)
        th.start()
        time.sleep(rnd.uniform(0.02, 0.12))
        node.daemons['broker'].send_signal(signal.SIGKILL)
        node.daemons['broker'].proc.wait(5)
        killed[0] = time.monotonic()
        n_acked_at_kill = len(acked)
        time.sleep(0.2)
        stop.set()
        th.join(15)
        check(not th.is_alive(), 'round %d: Allocate hung while the broker was down' % i)
        acked_total += len(acked)
        check(len(acked) <= n_acked_at_kill + 1,
              'round %d: %d Allocates acknowledged after the broker died' % (i, len(acked) - n_acked_at_kill))
        slow = [f for f in failures if f[1] >= 2.0]
        check(not slow, 'round %d: failures that took >= 2 s: %r' % (i, slow))
        check(failures and all(f[0] == grpc.StatusCode.UNAVAILABLE for f in failures),
              'round %d: calls while down: %r' % (i, failures[:5]))

        node.restart_broker()
        # grpcd may re-register its resources when the broker comes back; let it settle
        time.sleep(0.3)
        allocs = node.list_allocations()
        check(len(allocs) == (1 if acked_total else len(allocs)) and len(allocs) <= 1,
              'round %d: %d acknowledged so far, broker lists %r' % (i, acked_total, allocs))
        for a in allocs:
            check(a[1] == RES_I915 and list(a[2]) == [GPU_I915] and a[3] > 0,
                  'round %d: malformed record %r' % (i, a))
            check(a[3] >= last_acked_sent[0], 'round %d: the last acknowledged allocation (sent at %d) is lost, '
                  'the broker lists one made at %d' % (i, last_acked_sent[0], a[3]))
        print('round %d: %d acknowledged (total %d), %d listed after restart' % (
            i, len(acked), acked_total, len(allocs)))


if __name__ == '__main__':
    harness.run_test(run)
