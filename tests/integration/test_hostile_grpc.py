#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# test_hostile_grpc.py — malformed input at a device plugin socket is refused cleanly.
#
# Asserts, at the i915 plugin socket, each followed by a normal Allocate through the
# kubelet simulator that must still succeed (and grpcd still running):
#  - garbage bytes instead of the HTTP/2 preface: connection closed within 3 s;
#  - an HTTP/1.1 request: connection closed within 3 s;
#  - an unknown method (grpcio generic call, also an unknown service): UNIMPLEMENTED;
#  - a gRPC message prefix declaring 0xFFFFFFFF bytes (hand-made HTTP/2): grpc-status 8
#    RESOURCE_EXHAUSTED, answered without waiting for the body;
#  - a truncated message (prefix says 100 bytes, 10 sent, END_STREAM): grpc-status 13
#    INTERNAL;
#  - a compressed-flag message: grpc-status 12 UNIMPLEMENTED;
#  - content-type text/plain: HTTP :status 415;
#  - two messages in one unary call: grpc-status 13 INTERNAL.

import os

import grpc

import harness
import h2raw
from harness import check, RES_I915, GPU_I915

ALLOCATE = '/v1beta1.DevicePlugin/Allocate'


def still_works(node, what):
    check(node.daemons['grpc'].alive(), 'grpcd died after %s' % what)
    c = node.kubelet.plugin(RES_I915).allocate([GPU_I915])
    check(len(c['devices']) == 2, 'Allocate after %s: %r' % (what, c))


def valid_allocate_body(node):
    p = node.kubelet.p
    req = p.dp.AllocateRequest()
    req.container_requests.add().devices_ids.append(GPU_I915)
    return req.SerializeToString()


def run(node):
    sock = os.path.join(node.plugin_dir, 'kgpu-gpu.intel.com-i915.sock')

    # Sanity of the hand-made HTTP/2 itself: a valid Allocate is answered with status 0.
    c = h2raw.H2Conn(sock)
    sid = c.request(ALLOCATE, h2raw.grpc_message(valid_allocate_body(node)))
    r = c.read_result(sid)
    c.close()
    check(r.status == 200 and r.grpc_status == 0 and len(r.data) > 5,
          'hand-made valid Allocate: %r' % r)

    c = h2raw.H2Conn(sock, preface=False)
    c.send(b'\x16\x03\x01\x00\xa5garbage\x00\xff' * 64)
    check(c.wait_closed(3), 'garbage: connection not closed')
    c.close()
    still_works(node, 'garbage')

    c = h2raw.H2Conn(sock, preface=False)
    c.send(b'POST /v1beta1.DevicePlugin/Allocate HTTP/1.1\r\nHost: localhost\r\n'
           b'Content-Type: application/grpc\r\nContent-Length: 5\r\n\r\n\x00\x00\x00\x00\x00')
    check(c.wait_closed(3), 'HTTP/1.1: connection not closed')
    c.close()
    still_works(node, 'HTTP/1.1')

    ch = grpc.insecure_channel('unix:' + sock)
    for method in ('/v1beta1.DevicePlugin/NoSuchMethod', '/no.Such/Service'):
        try:
            ch.unary_unary(method)(b'', timeout=5)
            raise AssertionError('%s answered OK' % method)
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNIMPLEMENTED, '%s: %s' % (method, e.code()))
    ch.close()
    still_works(node, 'unknown method')

    c = h2raw.H2Conn(sock)
    sid = c.request(ALLOCATE, h2raw.grpc_message(b'', declared_len=0xFFFFFFFF), end_stream=False)
    r = c.read_result(sid, timeout=3)
    c.close()
    check(r.grpc_status == 8, '4 GiB message: %r, expected grpc-status 8' % r)
    still_works(node, '4 GiB prefix')

    c = h2raw.H2Conn(sock)
    sid = c.request(ALLOCATE, h2raw.grpc_message(b'0123456789', declared_len=100))
    r = c.read_result(sid, timeout=3)
    c.close()
    check(r.grpc_status == 13, 'truncated message: %r, expected grpc-status 13' % r)
    still_works(node, 'truncated message')

    c = h2raw.H2Conn(sock)
    sid = c.request(ALLOCATE, h2raw.grpc_message(valid_allocate_body(node), compressed=True))
    r = c.read_result(sid, timeout=3)
    c.close()
    check(r.grpc_status == 12, 'compressed message: %r, expected grpc-status 12' % r)
    still_works(node, 'compressed message')

    c = h2raw.H2Conn(sock)
    sid = c.request(ALLOCATE, h2raw.grpc_message(valid_allocate_body(node)), content_type='text/plain')
    r = c.read_result(sid, timeout=3)
    c.close()
    check(r.status == 415, 'content-type text/plain: %r, expected :status 415' % r)
    still_works(node, 'wrong content-type')

    body = valid_allocate_body(node)
    c = h2raw.H2Conn(sock)
    sid = c.request(ALLOCATE, h2raw.grpc_message(body) + h2raw.grpc_message(body))
    r = c.read_result(sid, timeout=3)
    c.close()
    check(r.grpc_status == 13, 'two messages in a unary call: %r, expected grpc-status 13' % r)
    still_works(node, 'two messages')


if __name__ == '__main__':
    harness.run_test(run)
