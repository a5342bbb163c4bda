/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * grpc-h2-private.h — what the files of the gRPC layer share; not for its users.
 *
 * Contract: the limits and defaults, the message reader (frame.c), the socket and
 * nghttp2 plumbing (h2io.c), and the server's records, shared by call.c (one call)
 * and server.c (connections and the server). Ownership as in each file's contract.
 */
#pragma once

#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "grpc/grpc-h2.h"
#include "grpc/grpc-h2-internal.h"

#define GRPC_DEFAULT_MAX_CONNECTIONS 64U
#define GRPC_DEFAULT_MAX_STREAMS 32U
#define GRPC_DEFAULT_MAX_MESSAGE (4U * 1024U * 1024U)
/* The kubelet's PodResources server allows answers up to 16 MiB. */
#define GRPC_CLIENT_MAX_MESSAGE (16U * 1024U * 1024U)
#define GRPC_PREFIX_SIZE 5U
#define GRPC_READ_CHUNK 16384U
/* Bytes read per wakeup before yielding to other sources (epoll is level-triggered). */
#define GRPC_READ_BUDGET (16U * GRPC_READ_CHUNK)
#define GRPC_MAX_PATH 256U
#define GRPC_WINDOW_SIZE (1U << 20)
/* A peer must send the HTTP/2 client preface within this time, and a connection we
 * are closing (GOAWAY sent) must take what is left within the drain time, so idle or
 * stuck sockets cannot hold connection slots for ever. */
#define GRPC_HANDSHAKE_TIMEOUT_USEC (10ULL * 1000000ULL)
#define GRPC_DRAIN_TIMEOUT_USEC (5ULL * 1000000ULL)
/* A peer that takes none of our pending output for this long is dropped (we do not read
 * from it meanwhile, see h2io_update_events()). */
#define GRPC_STALL_TIMEOUT_USEC (30ULL * 1000000ULL)

#define MAKE_NV(n, v, vl)                                                               \
        ((nghttp2_nv) { .name = (uint8_t *) (n), .value = (uint8_t *) (v),             \
                        .namelen = sizeof(n) - 1, .valuelen = (vl),                     \
                        .flags = NGHTTP2_NV_FLAG_NONE })
#define MAKE_NV_CS(n, v) MAKE_NV(n, v, strlen(v))

/* Incremental parser of length-prefixed gRPC messages; bodies grow as bytes arrive, so
 * a declared length allocates nothing up front. */
typedef struct GrpcReader {
        uint8_t prefix[GRPC_PREFIX_SIZE];
        size_t prefix_len;
        uint32_t msg_len;
        uint8_t *msg;
        size_t msg_got, msg_alloc;
        bool in_body;
        unsigned n_msgs;
        uint32_t max;
} GrpcReader;

typedef enum GrpcReadError {
        GRPC_READ_OK,
        GRPC_READ_COMPRESSED,
        GRPC_READ_TOO_BIG,
        GRPC_READ_EXTRA_MESSAGE,
        GRPC_READ_NOMEM,
} GrpcReadError;

/* Non-blocking socket plumbing shared by server connections and client calls. */
typedef struct H2Io {
        int fd;
        sd_event_source *io;
        nghttp2_session *session;
        uint8_t *wbuf;          /* bytes nghttp2 produced that the socket did not take yet */
        size_t wbuf_len, wbuf_off;
        uint64_t n_read;        /* bytes fed to nghttp2 so far */
        uint64_t last_progress; /* CLOCK_MONOTONIC of the last write that moved bytes */
        bool eof;
} H2Io;

/* ---------------------------------------------------------------------------------- */
/* server */

typedef struct GrpcMethod {
        char *path;
        GrpcMethodKind kind;
        GrpcMethodHandler handler;
        void *userdata;
} GrpcMethod;

struct GrpcServer {
        sd_event *event;
        GrpcServerLimits limits;
        GrpcMethod *methods;
        size_t n_methods;
        int listen_fd;
        sd_event_source *listen_source;
        GrpcConnection *connections;
        unsigned n_connections;
        GrpcCall *pending_closed;       /* detached calls whose closed handler is deferred */
        uint64_t handshake_timeout_usec, drain_timeout_usec, stall_timeout_usec;
        bool freeing;
};

struct GrpcConnection {
        GrpcServer *server;
        H2Io h;
        sd_event_source *flush_source;
        sd_event_source *timer; /* handshake, stall or drain deadline */
        uint64_t created_usec, closing_usec;
        GrpcCall *calls;        /* open streams, each holding one call reference */
        unsigned n_calls;
        bool preface_seen;
        bool closing;           /* GOAWAY queued: write what is left, then close */
        GrpcConnection *next, *prev;
};

struct GrpcCall {
        unsigned n_ref;
        GrpcConnection *conn;   /* NULL once the stream is gone */
        int32_t stream_id;
        const GrpcMethod *method;       /* set during header processing only */
        char *path;
        GrpcMethodKind kind;
        GrpcMethodHandler handler;
        void *handler_userdata;

        /* request */
        bool saw_post, saw_content_type, headers_done, rejected;
        GrpcReader reader;

        /* answer */
        bool finished;          /* status decided (grpc_call_finish or an error of ours) */
        bool headers_sent;
        bool deferred;          /* data provider returned NGHTTP2_ERR_DEFERRED */
        uint8_t *out;           /* framed message being transmitted */
        size_t out_len, out_off;
        uint8_t *latest;        /* the next message, replaceable until taken */
        size_t latest_len;
        bool trailers_pending;
        GrpcStatus status;
        char *status_message;   /* percent-encoded */

        bool dispatched, closed_notified;
        sd_event_source *dispatch_source, *closed_source;
        GrpcCallClosedHandler closed_cb;
        void *closed_userdata;
        GrpcServer *pending_server;     /* set while linked in pending_closed */

        GrpcCall *next, *prev;
        GrpcCall *pending_next, *pending_prev;
};

/* frame.c */
uint8_t *grpc_frame_new(const uint8_t *msg, size_t len, size_t *ret_len);
void grpc_reader_done(GrpcReader *r);
bool grpc_reader_partial(const GrpcReader *r);
/* Accepts at most one message (both method kinds take one request, and a unary answer
 * is one message). */
GrpcReadError grpc_reader_feed(GrpcReader *r, const uint8_t *data, size_t len);

/* h2io.c */
void h2io_done(H2Io *h);
int h2io_update_events(H2Io *h);
int h2io_flush(H2Io *h);
int h2io_read(H2Io *h);
/* An I/O event of h's socket: h2io_read() when no output is pending, -ECONNRESET on a
 * hang-up while output is pending, else 0. */
int h2io_on_events(H2Io *h, uint32_t revents);

/* call.c */
void grpc_server_callbacks_set(nghttp2_session_callbacks *cbs);
const GrpcMethod *grpc_server_find_method(GrpcServer *s, const uint8_t *path, size_t len);
void grpc_call_detach(GrpcCall *c, bool sync_notify);
void grpc_call_closed_deliver(GrpcCall *c);

/* server.c */
void grpc_connection_free(GrpcConnection *c);
void grpc_connection_schedule_flush(GrpcConnection *c);
