/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * grpc-h2-internal.h — test and fuzzing entry points of the gRPC layer; not for daemons.
 *
 * Contract: grpc_server_add_connection_fd() adopts a connected stream socket as if it
 * had just been accepted (the fd is owned by the server from the call on, also on
 * failure). grpc_server_connection_feed() pushes bytes into that connection as if they
 * had been read from its socket, processes them, runs nothing of the caller's (method
 * handlers still run from deferred event sources) and writes what nghttp2 produced to
 * the socket. It returns 0 while the connection lives, -ECONNRESET once it was closed
 * (after which the connection is gone), or another negative errno.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "grpc/grpc-h2.h"

typedef struct GrpcConnection GrpcConnection;

int grpc_server_add_connection_fd(GrpcServer *s, int fd, GrpcConnection **ret);
int grpc_server_connection_feed(GrpcServer *s, GrpcConnection *c, const uint8_t *data, size_t len);

/* Deadlines of a connection: the client preface must arrive within handshake_usec
 * (default 10 s); pending output must move within stall_usec (30 s); after our GOAWAY
 * the rest must be taken within drain_usec (5 s). 0 keeps the current value. */
void grpc_server_set_timeouts(GrpcServer *s, uint64_t handshake_usec, uint64_t stall_usec, uint64_t drain_usec);

/* Percent-encoding of grpc-message (exposed for unit tests). Both return NULL on OOM. */
char *grpc_percent_encode(const char *s);
char *grpc_percent_decode(const char *s, size_t len);
/* Formats a grpc-timeout header value (at most 8 digits + unit) into buf (>= 10 bytes). */
void grpc_timeout_format(uint64_t usec, char buf[static 10]);
