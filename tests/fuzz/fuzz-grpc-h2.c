/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-grpc-h2.c — libFuzzer target for the gRPC server framing (grpc/).
 *
 * Contract: each input is fed into a fresh server connection as if read from its socket
 * (the HTTP/2 client magic is prepended unless the input starts with "PRI "), then the
 * event loop runs so handlers answer and output is flushed into a socketpair that is
 * drained; the server is freed at the end. Any crash, leak or sanitizer report is a bug.
 */

#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "grpc/grpc-h2.h"
#include "grpc/grpc-h2-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int h_echo(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        return grpc_call_reply(call, msg, len);
}

static int h_error(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        return grpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "bad\n100%");
}

static int h_fail(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        return -EIO;
}

static void on_closed(GrpcCall *call, void *userdata) {
        GrpcCall **held = userdata;

        if (*held == call)
                *held = grpc_call_unref(*held);
}

static GrpcCall *held_stream;

static int h_watch(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        int r;

        r = grpc_call_send_latest(call, msg, len);
        if (r < 0)
                return r;
        r = grpc_call_send_latest(call, (const uint8_t *) "second", 6);
        if (r < 0)
                return r;
        if (!held_stream) {
                /* Keep one stream open so the connection dies with a call in flight. */
                held_stream = grpc_call_ref(call);
                grpc_call_set_closed_handler(call, on_closed, &held_stream);
                return 0;
        }
        return grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

static void drain(int fd) {
        uint8_t buf[65536];

        while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
                ;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static sd_event *event;
        GrpcServerLimits limits = {
                .max_connections = 4,
                .max_streams_per_connection = 8,
                .max_message_size = 65536,
        };
        GrpcServer *s = NULL;
        GrpcConnection *c = NULL;
        int sp[2], r;

        if (!event && sd_event_new(&event) < 0)
                abort();
        if (grpc_server_new(event, &limits, &s) < 0)
                abort();
        if (grpc_server_add_method(s, "/v1beta1.DevicePlugin/Allocate", GRPC_METHOD_UNARY, h_echo, NULL) < 0 ||
            grpc_server_add_method(s, "/v1beta1.DevicePlugin/GetPreferredAllocation", GRPC_METHOD_UNARY, h_error,
                                   NULL) < 0 ||
            grpc_server_add_method(s, "/v1beta1.DevicePlugin/PreStartContainer", GRPC_METHOD_UNARY, h_fail, NULL) < 0 ||
            grpc_server_add_method(s, "/v1beta1.DevicePlugin/ListAndWatch", GRPC_METHOD_SERVER_STREAMING, h_watch,
                                   NULL) < 0)
                abort();

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sp) < 0)
                abort();
        if (grpc_server_add_connection_fd(s, sp[0], &c) < 0)
                abort();

        r = 0;
        if (size < 4 || memcmp(data, "PRI ", 4) != 0)
                r = grpc_server_connection_feed(s, c, (const uint8_t *) NGHTTP2_CLIENT_MAGIC,
                                                NGHTTP2_CLIENT_MAGIC_LEN);
        if (r == 0)
                r = grpc_server_connection_feed(s, c, data, size);
        /* Let handlers run and answers flow; the peer end is drained in between. */
        for (unsigned i = 0; i < 8; i++) {
                drain(sp[1]);
                if (sd_event_run(event, 0) < 0)
                        abort();
        }
        drain(sp[1]);

        held_stream = grpc_call_unref(held_stream);
        s = grpc_server_free(s);
        /* Pending sources of freed calls are gone with the server; run once more so
         * nothing is left between inputs. */
        (void) sd_event_run(event, 0);
        close(sp[1]);
        return 0;
}
