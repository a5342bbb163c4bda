/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * grpc-h2.h — a small gRPC-over-HTTP/2 layer on nghttp2, driven by sd-event, no threads.
 *
 * Server: unary and server-streaming methods on a unix socket. Client: one-shot unary
 * calls with a deadline. Messages are opaque bytes (protobuf-c encodes/decodes them in
 * the callers).
 *
 * Contract:
 *  - Every function returns 0/positive or a negative errno; ret_* is written on success only.
 *  - Callbacks are never invoked from inside the function that caused them (a client
 *    call that fails at once reports through a deferred event source), and nghttp2
 *    send/recv is never called from inside an nghttp2 callback.
 *  - Request validation is ours (nghttp2_option_set_no_http_messaging): POST only,
 *    :path must name a registered method (else UNIMPLEMENTED), content-type must start
 *    with "application/grpc" (else HTTP 415), compressed messages get UNIMPLEMENTED,
 *    messages over max_message_size get RESOURCE_EXHAUSTED before any allocation,
 *    a unary call with more than one message gets INTERNAL (so does a truncated
 *    message at end of stream). Garbage or HTTP/1.x on the socket gets a GOAWAY and the
 *    connection closed. The server keeps serving other connections in every case.
 *  - A server-streaming call keeps at most one unsent message: a new
 *    grpc_call_send_latest() replaces a message the peer has not taken yet.
 *  - max_connections and max_streams_per_connection are enforced (extra connections are
 *    closed at accept, extra streams refused with REFUSED_STREAM).
 *
 * Details callers may rely on:
 *  - A handler runs once the request stream has ended (END_STREAM), for both kinds.
 *    It must answer (reply/finish) or keep a reference and answer later; a call it
 *    drops unanswered stays open until the peer gives up.
 *  - grpc_call_set_closed_handler(c, NULL, NULL) disarms a pending closed handler.
 *  - A finished call never gets its closed handler.
 *  - Client: timeout_usec 0 means no deadline (and no grpc-timeout header); answers
 *    up to 16 MiB are accepted (the kubelet's PodResources limit).
 *  - While a peer does not take our output, its connection is not read either, so a
 *    flooding peer cannot make us queue without bound; a peer whose pending output
 *    does not move for 30 s, that sends no client preface within 10 s, or that does
 *    not take our GOAWAY within 5 s is disconnected (open calls get their closed
 *    handler as for any disconnect).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "common/cleanup.h"

typedef enum GrpcStatus {
        GRPC_STATUS_OK = 0,
        GRPC_STATUS_CANCELLED = 1,
        GRPC_STATUS_UNKNOWN = 2,
        GRPC_STATUS_INVALID_ARGUMENT = 3,
        GRPC_STATUS_DEADLINE_EXCEEDED = 4,
        GRPC_STATUS_NOT_FOUND = 5,
        GRPC_STATUS_ALREADY_EXISTS = 6,
        GRPC_STATUS_PERMISSION_DENIED = 7,
        GRPC_STATUS_RESOURCE_EXHAUSTED = 8,
        GRPC_STATUS_FAILED_PRECONDITION = 9,
        GRPC_STATUS_ABORTED = 10,
        GRPC_STATUS_OUT_OF_RANGE = 11,
        GRPC_STATUS_UNIMPLEMENTED = 12,
        GRPC_STATUS_INTERNAL = 13,
        GRPC_STATUS_UNAVAILABLE = 14,
        GRPC_STATUS_DATA_LOSS = 15,
        GRPC_STATUS_UNAUTHENTICATED = 16,
} GrpcStatus;

const char *grpc_status_to_string(GrpcStatus s);

typedef enum GrpcMethodKind {
        GRPC_METHOD_UNARY,
        GRPC_METHOD_SERVER_STREAMING,
} GrpcMethodKind;

typedef struct GrpcServerLimits {
        uint32_t max_connections;            /* 0: default 64 */
        uint32_t max_streams_per_connection; /* 0: default 32 */
        uint32_t max_message_size;           /* 0: default 4 MiB */
} GrpcServerLimits;

typedef struct GrpcServer GrpcServer;
typedef struct GrpcCall GrpcCall;
typedef struct GrpcClientCall GrpcClientCall;

/*
 * Called once per call, when its complete request message has arrived (for a
 * server-streaming method too). msg is valid only during the callback. The call is
 * borrowed: take grpc_call_ref() to answer later (e.g. after an async D-Bus call).
 * Returning a negative errno finishes the call with INTERNAL if it is still open.
 */
typedef int (*GrpcMethodHandler)(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata);

/* Called once when an open call ends without grpc_call_finish(): the peer reset the
 * stream or closed the connection, or the server is being freed. */
typedef void (*GrpcCallClosedHandler)(GrpcCall *call, void *userdata);

int grpc_server_new(sd_event *event, const GrpcServerLimits *limits, GrpcServer **ret);
/* path: "/package.Service/Method". */
int grpc_server_add_method(GrpcServer *s, const char *path, GrpcMethodKind kind,
                           GrpcMethodHandler handler, void *userdata);
/* Removes a stale socket file at path, binds, listens (mode 0660 via umask-independent fchmod). */
int grpc_server_listen_unix(GrpcServer *s, const char *path);
/* Takes ownership of an already listening socket. */
int grpc_server_listen_fd(GrpcServer *s, int fd);
unsigned grpc_server_n_connections(GrpcServer *s);
/* Closes the listener and every connection; open calls get their closed handler. */
GrpcServer *grpc_server_free(GrpcServer *s);
DEFINE_CLEANUP_FUNC(GrpcServer, grpc_server_free);

GrpcCall *grpc_call_ref(GrpcCall *c);
GrpcCall *grpc_call_unref(GrpcCall *c);
DEFINE_CLEANUP_FUNC(GrpcCall, grpc_call_unref);
const char *grpc_call_get_method(GrpcCall *c);
/* False once finished or closed; sending then returns -ECONNRESET. */
bool grpc_call_is_open(GrpcCall *c);
void grpc_call_set_closed_handler(GrpcCall *c, GrpcCallClosedHandler cb, void *userdata);
void *grpc_call_get_userdata(GrpcCall *c);

/* Unary: send the one response message and status OK; finishes the call. */
int grpc_call_reply(GrpcCall *c, const uint8_t *msg, size_t len);
/* Server streaming: queue a message, replacing one not yet taken by the peer. */
int grpc_call_send_latest(GrpcCall *c, const uint8_t *msg, size_t len);
/* Ends the call with a status; message (may be NULL) is percent-encoded in grpc-message. */
int grpc_call_finish(GrpcCall *c, GrpcStatus status, const char *message);

/*
 * Client. status is GRPC_STATUS_OK with the response message, or an error status with
 * a message (UNAVAILABLE when the socket cannot be reached or the connection dies,
 * DEADLINE_EXCEEDED when timeout_usec passes). The callback runs exactly once unless the
 * call is cancelled first; the GrpcClientCall is freed after it returns.
 */
typedef void (*GrpcClientReplyHandler)(GrpcStatus status, const char *message,
                                       const uint8_t *msg, size_t len, void *userdata);

int grpc_client_call_unary(sd_event *event, const char *socket_path, const char *path,
                           const uint8_t *req, size_t len, uint64_t timeout_usec,
                           GrpcClientReplyHandler cb, void *userdata, GrpcClientCall **ret);
/* The same on a socket already connected (taken over, also on failure; made
 * non-blocking): for a peer reached through a descriptor another process passed on. */
int grpc_client_call_unary_fd(sd_event *event, int fd, const char *path,
                              const uint8_t *req, size_t len, uint64_t timeout_usec,
                              GrpcClientReplyHandler cb, void *userdata, GrpcClientCall **ret);
/* Aborts a pending call; its callback is not run. Accepts NULL. */
GrpcClientCall *grpc_client_call_cancel(GrpcClientCall *c);
