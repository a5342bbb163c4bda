#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# grpc-peer.py — an independent gRPC peer (python3-grpcio) for test-grpc-h2.
#
# Contract: messages are raw bytes (identity serializers), given and printed as hex.
# Output is line based so the C test can compare it (messages over 256 bytes are
# printed as "len<N>:<first byte hex>"):
#   client SOCKET METHOD HEX [TIMEOUT_S]   -> "OK <hex>" | "ERR <CODE> <details>"
#   stream SOCKET METHOD HEX [N_CANCEL]    -> "MSG <hex>" per message, then
#                                             "END OK" | "END <CODE> <details>";
#                                             with N_CANCEL, cancels after that many
#                                             messages and prints "CANCELLED"
#   server SOCKET                          -> "READY" once serving; runs until killed.
#                                             Methods of /test.Echo: Echo (echoes),
#                                             Fail (INVALID_ARGUMENT, details = request
#                                             as UTF-8), Slow (answers after 5 s), Big
#                                             (answers 1 MiB of 'x'), Deadline (answers
#                                             the milliseconds left of the caller's
#                                             grpc-timeout as text, or "none")
import sys
import time
from concurrent import futures

import grpc


def _hex(b):
    # Long messages are summarized so the pipe to the test stays small.
    if len(b) > 256:
        return "len%d:%s" % (len(b), b[:1].hex())
    return b.hex() if b else "-"


def _unhex(s):
    return b"" if s == "-" else bytes.fromhex(s)


def client(sock, method, req, timeout=None):
    with grpc.insecure_channel("unix:" + sock) as ch:
        call = ch.unary_unary(method)
        try:
            resp = call(_unhex(req), timeout=float(timeout) if timeout else 10.0)
            print("OK", _hex(resp), flush=True)
        except grpc.RpcError as e:
            print("ERR", e.code().name, e.details(), flush=True)


def stream(sock, method, req, n_cancel=None):
    with grpc.insecure_channel("unix:" + sock) as ch:
        call = ch.unary_stream(method)(_unhex(req), timeout=10.0)
        n = 0
        try:
            for msg in call:
                print("MSG", _hex(msg), flush=True)
                n += 1
                if n_cancel is not None and n >= int(n_cancel):
                    call.cancel()
                    print("CANCELLED", flush=True)
                    # Give the transport time to send the RST_STREAM before exiting.
                    time.sleep(0.3)
                    return
            print("END OK", flush=True)
        except grpc.RpcError as e:
            print("END", e.code().name, e.details(), flush=True)


def server(sock):
    def echo(req, ctx):
        return req

    def fail(req, ctx):
        ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, req.decode("utf-8"))

    def slow(req, ctx):
        time.sleep(5)
        return req

    def big(req, ctx):
        return b"x" * (1 << 20)

    def deadline(req, ctx):
        # Milliseconds left of the caller's deadline (grpc-timeout), or "none".
        left = ctx.time_remaining()
        return b"none" if left is None else str(int(left * 1000)).encode()

    handlers = {
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
        "Big": grpc.unary_unary_rpc_method_handler(big),
        "Deadline": grpc.unary_unary_rpc_method_handler(deadline),
    }
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", handlers),))
    srv.add_insecure_port("unix:" + sock)
    srv.start()
    print("READY", flush=True)
    srv.wait_for_termination()


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {"client": client, "stream": stream, "server": server}[mode](*args)
