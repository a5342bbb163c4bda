/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-grpc-client.c — libFuzzer target for the gRPC client (grpc/client.c): the
 * input is what a hostile "kubelet" writes back on the socket.
 *
 * Contract: per input, one unary call is made to a listening unix socket owned by the
 * target; the accepted end receives the input and is shut down for writing, then the
 * event loop runs until the reply handler has run (it must run exactly once: a
 * deadline bounds the call). Any crash, leak, sanitizer report or missing callback is
 * a bug.
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "grpc/grpc-h2.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned n_replies;
static char socket_path[108];

static void remove_socket(void) {
        (void) unlink(socket_path);
}

static void on_reply(GrpcStatus status, const char *message, const uint8_t *msg, size_t len, void *userdata) {
        /* Touch what we were given so the sanitizers check it. */
        volatile uint8_t sink = 0;

        if ((unsigned) status > GRPC_STATUS_UNAUTHENTICATED)
                abort();
        if (message)
                sink ^= (uint8_t) strlen(message);
        for (size_t i = 0; i < len; i++)
                sink ^= msg[i];
        (void) sink;
        n_replies++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static sd_event *event;
        static int listen_fd = -1;
        GrpcClientCall *call = NULL;
        int fd;

        if (!event) {
                struct sockaddr_un sa = { .sun_family = AF_UNIX };

                if (sd_event_new(&event) < 0)
                        abort();
                snprintf(socket_path, sizeof socket_path, "/tmp/kgpu-fuzz-client-%d.sock", (int) getpid());
                (void) unlink(socket_path);
                memcpy(sa.sun_path, socket_path, strlen(socket_path) + 1);
                listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *) &sa, sizeof sa) < 0 ||
                    listen(listen_fd, 16) < 0)
                        abort();
                atexit(remove_socket);
        }

        n_replies = 0;
        if (grpc_client_call_unary(event, socket_path, "/v1beta1.Registration/Register", (const uint8_t *) "\x0a\x01v", 3,
                                   2000000, on_reply, NULL, &call) < 0)
                abort();
        fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
                abort();
        /* What does not fit in the socket buffer is dropped; inputs are small. */
        (void) send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void) shutdown(fd, SHUT_WR);

        for (unsigned i = 0; i < 10000 && n_replies == 0; i++) {
                char buf[4096];

                while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
                        ;
                if (sd_event_run(event, 1000) < 0)
                        abort();
        }
        if (n_replies != 1)
                abort();
        close(fd);
        return 0;
}
