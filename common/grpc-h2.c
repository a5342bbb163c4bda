/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * grpc-h2.c — gRPC over HTTP/2 (nghttp2 session API) driven by sd-event, no threads.
 *
 * Contract: implements common/grpc-h2.h. Ownership: the server owns its connections,
 * each connection holds one reference on each GrpcCall of its open streams; callers
 * may hold more with grpc_call_ref(). All I/O is nghttp2_session_mem_recv()/mem_send()
 * on non-blocking sockets from sd-event I/O handlers or a per-connection defer source,
 * never from inside an nghttp2 callback; the nghttp2 callbacks only record state and
 * submit frames. Method handlers and closed handlers run from their own defer sources
 * (closed handlers run synchronously only inside grpc_server_free(), so callers can
 * drop what they hold before the server is gone). Errors: negative errno; protocol
 * problems of a peer are answered on the wire and never returned to callers.
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

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <string.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/grpc-h2.h"
#include "common/grpc-h2-internal.h"
#include "common/log.h"
#include "common/util.h"

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

/* ---------------------------------------------------------------------------------- */
/* helpers */

static const char *const status_names[] = {
        [GRPC_STATUS_OK] = "OK",
        [GRPC_STATUS_CANCELLED] = "CANCELLED",
        [GRPC_STATUS_UNKNOWN] = "UNKNOWN",
        [GRPC_STATUS_INVALID_ARGUMENT] = "INVALID_ARGUMENT",
        [GRPC_STATUS_DEADLINE_EXCEEDED] = "DEADLINE_EXCEEDED",
        [GRPC_STATUS_NOT_FOUND] = "NOT_FOUND",
        [GRPC_STATUS_ALREADY_EXISTS] = "ALREADY_EXISTS",
        [GRPC_STATUS_PERMISSION_DENIED] = "PERMISSION_DENIED",
        [GRPC_STATUS_RESOURCE_EXHAUSTED] = "RESOURCE_EXHAUSTED",
        [GRPC_STATUS_FAILED_PRECONDITION] = "FAILED_PRECONDITION",
        [GRPC_STATUS_ABORTED] = "ABORTED",
        [GRPC_STATUS_OUT_OF_RANGE] = "OUT_OF_RANGE",
        [GRPC_STATUS_UNIMPLEMENTED] = "UNIMPLEMENTED",
        [GRPC_STATUS_INTERNAL] = "INTERNAL",
        [GRPC_STATUS_UNAVAILABLE] = "UNAVAILABLE",
        [GRPC_STATUS_DATA_LOSS] = "DATA_LOSS",
        [GRPC_STATUS_UNAUTHENTICATED] = "UNAUTHENTICATED",
};

_public_ const char *grpc_status_to_string(GrpcStatus s) {
        if ((unsigned) s >= ELEMENTSOF(status_names))
                return "UNKNOWN";
        return status_names[s];
}

static bool is_unreserved(unsigned char c) {
        /* gRPC: percent-encode everything outside printable ASCII, and '%' itself. */
        return c >= 0x20 && c <= 0x7e && c != '%';
}

char *grpc_percent_encode(const char *s) {
        static const char hex[] = "0123456789ABCDEF";
        size_t n = 0;
        char *out, *p;

        if (!s)
                s = "";
        for (const char *q = s; *q; q++)
                n += is_unreserved((unsigned char) *q) ? 1 : 3;
        out = malloc(n + 1);
        if (!out)
                return NULL;
        p = out;
        for (const char *q = s; *q; q++) {
                unsigned char c = (unsigned char) *q;
                if (is_unreserved(c))
                        *p++ = (char) c;
                else {
                        *p++ = '%';
                        *p++ = hex[c >> 4];
                        *p++ = hex[c & 15];
                }
        }
        *p = 0;
        return out;
}

static int unhex(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

char *grpc_percent_decode(const char *s, size_t len) {
        char *out, *p;

        out = malloc(len + 1);
        if (!out)
                return NULL;
        p = out;
        for (size_t i = 0; i < len; i++) {
                int a, b;

                /* Invalid sequences are kept verbatim, as the gRPC spec asks. */
                if (s[i] == '%' && i + 2 < len && (a = unhex(s[i + 1])) >= 0 &&
                    (b = unhex(s[i + 2])) >= 0) {
                        *p++ = (char) (a << 4 | b);
                        i += 2;
                } else
                        *p++ = s[i];
        }
        *p = 0;
        return out;
}

void grpc_timeout_format(uint64_t usec, char buf[static 10]) {
        /* At most 8 digits; round up so the peer never sees a shorter deadline. */
        static const struct {
                char unit;
                uint64_t usec;
        } units[] = {
                { 'u', 1 },
                { 'm', 1000 },
                { 'S', 1000000 },
                { 'M', 60000000 },
                { 'H', 3600000000ULL },
        };

        for (size_t i = 0; i < ELEMENTSOF(units); i++) {
                uint64_t v = usec / units[i].usec + (usec % units[i].usec != 0);
                if (v <= 99999999ULL) {
                        snprintf(buf, 10, "%" PRIu64 "%c", v, units[i].unit);
                        return;
                }
        }
        snprintf(buf, 10, "99999999H");
}

static uint8_t *grpc_frame_new(const uint8_t *msg, size_t len, size_t *ret_len) {
        uint8_t *f;

        if (len > UINT32_MAX)
                return NULL;
        f = malloc(GRPC_PREFIX_SIZE + len);
        if (!f)
                return NULL;
        f[0] = 0;
        f[1] = (uint8_t) (len >> 24);
        f[2] = (uint8_t) (len >> 16);
        f[3] = (uint8_t) (len >> 8);
        f[4] = (uint8_t) len;
        if (len > 0)
                memcpy(f + GRPC_PREFIX_SIZE, msg, len);
        *ret_len = GRPC_PREFIX_SIZE + len;
        return f;
}

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

static void grpc_reader_done(GrpcReader *r) {
        r->msg = mfree(r->msg);
        r->msg_got = r->msg_alloc = 0;
}

static bool grpc_reader_partial(const GrpcReader *r) {
        return r->prefix_len > 0 || r->in_body;
}

/* Accepts at most one message (both method kinds take one request, and a unary answer
 * is one message). */
static GrpcReadError grpc_reader_feed(GrpcReader *r, const uint8_t *data, size_t len) {
        while (len > 0) {
                if (!r->in_body) {
                        size_t k = MIN(len, GRPC_PREFIX_SIZE - r->prefix_len);

                        if (r->n_msgs > 0)
                                return GRPC_READ_EXTRA_MESSAGE;
                        memcpy(r->prefix + r->prefix_len, data, k);
                        r->prefix_len += k;
                        data += k;
                        len -= k;
                        if (r->prefix_len < GRPC_PREFIX_SIZE)
                                break;
                        if (r->prefix[0] & 1)
                                return GRPC_READ_COMPRESSED;
                        r->msg_len = (uint32_t) r->prefix[1] << 24 | (uint32_t) r->prefix[2] << 16 |
                                     (uint32_t) r->prefix[3] << 8 | r->prefix[4];
                        if (r->msg_len > r->max)
                                return GRPC_READ_TOO_BIG;
                        r->prefix_len = 0;
                        r->in_body = true;
                }

                size_t k = MIN(len, (size_t) r->msg_len - r->msg_got);
                if (r->msg_got + k > r->msg_alloc) {
                        size_t n = MAX(r->msg_alloc * 2, MAX(r->msg_got + k, (size_t) 256));
                        uint8_t *m;

                        n = MIN(n, (size_t) r->msg_len);
                        m = realloc(r->msg, n);
                        if (!m)
                                return GRPC_READ_NOMEM;
                        r->msg = m;
                        r->msg_alloc = n;
                }
                if (k > 0)
                        memcpy(r->msg + r->msg_got, data, k);
                r->msg_got += k;
                data += k;
                len -= k;
                if (r->msg_got == r->msg_len) {
                        r->in_body = false;
                        r->n_msgs++;
                }
        }
        return GRPC_READ_OK;
}

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

static void h2io_done(H2Io *h) {
        h->io = sd_event_source_disable_unref(h->io);
        if (h->session) {
                nghttp2_session_del(h->session);
                h->session = NULL;
        }
        h->fd = safe_close(h->fd);
        h->wbuf = mfree(h->wbuf);
        h->wbuf_len = h->wbuf_off = 0;
}

static int h2io_update_events(H2Io *h) {
        /* While output is stuck, stop reading: the peer must drain what we owe first. */
        uint32_t ev = h->wbuf ? EPOLLOUT : EPOLLIN;
        return sd_event_source_set_io_events(h->io, ev);
}

static int h2io_write(H2Io *h, const uint8_t *p, size_t n, size_t *ret_written) {
        size_t done = 0;

        while (done < n) {
                ssize_t k = send(h->fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        return -errno;
                }
                done += (size_t) k;
        }
        if (done > 0)
                h->last_progress = now_usec(CLOCK_MONOTONIC);
        *ret_written = done;
        return 0;
}

/* Writes what is pending; returns 0 when everything nghttp2 had was written, 1 when the
 * socket is full, negative errno on a write error. */
static int h2io_flush(H2Io *h) {
        size_t w;
        int r;

        if (h->wbuf) {
                r = h2io_write(h, h->wbuf + h->wbuf_off, h->wbuf_len - h->wbuf_off, &w);
                if (r < 0)
                        return r;
                h->wbuf_off += w;
                if (h->wbuf_off < h->wbuf_len)
                        return 1;
                h->wbuf = mfree(h->wbuf);
                h->wbuf_len = h->wbuf_off = 0;
        }

        for (;;) {
                const uint8_t *data;
                ssize_t n = nghttp2_session_mem_send(h->session, &data);

                if (n < 0)
                        return n == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EPROTO;
                if (n == 0)
                        return 0;

                r = h2io_write(h, data, (size_t) n, &w);
                if (r < 0)
                        return r;
                if (w < (size_t) n) {
                        h->wbuf = malloc((size_t) n - w);
                        if (!h->wbuf)
                                return -ENOMEM;
                        memcpy(h->wbuf, data + w, (size_t) n - w);
                        h->wbuf_len = (size_t) n - w;
                        h->wbuf_off = 0;
                        return 1;
                }
        }
}

/* Reads up to the budget and feeds nghttp2. Returns 0, or -ECONNRESET on EOF, -EPROTO
 * when nghttp2 rejected the input (it queued a GOAWAY then), other negative errno. */
static int h2io_read(H2Io *h) {
        uint8_t buf[GRPC_READ_CHUNK];
        size_t total = 0;

        while (total < GRPC_READ_BUDGET) {
                ssize_t n = recv(h->fd, buf, sizeof buf, MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return 0;
                        return -errno;
                }
                if (n == 0) {
                        h->eof = true;
                        return -ECONNRESET;
                }
                total += (size_t) n;
                h->n_read += (uint64_t) n;

                ssize_t k = nghttp2_session_mem_recv(h->session, buf, (size_t) n);
                if (k < 0)
                        return k == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EPROTO;
                if ((size_t) n < sizeof buf)
                        return 0;
        }
        return 0;
}

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

static void connection_free(GrpcConnection *c);
static void connection_schedule_flush(GrpcConnection *c);

static void call_free(GrpcCall *c) {
        c->dispatch_source = sd_event_source_disable_unref(c->dispatch_source);
        c->closed_source = sd_event_source_disable_unref(c->closed_source);
        grpc_reader_done(&c->reader);
        free(c->out);
        free(c->latest);
        free(c->status_message);
        free(c->path);
        free(c);
}

_public_ GrpcCall *grpc_call_ref(GrpcCall *c) {
        if (c)
                c->n_ref++;
        return c;
}

_public_ GrpcCall *grpc_call_unref(GrpcCall *c) {
        if (!c)
                return NULL;
        if (--c->n_ref == 0)
                call_free(c);
        return NULL;
}

_public_ const char *grpc_call_get_method(GrpcCall *c) {
        return c ? c->path : NULL;
}

_public_ bool grpc_call_is_open(GrpcCall *c) {
        return c && c->conn && !c->finished;
}

_public_ void grpc_call_set_closed_handler(GrpcCall *c, GrpcCallClosedHandler cb, void *userdata) {
        if (!c)
                return;
        c->closed_cb = cb;
        c->closed_userdata = userdata;
}

_public_ void *grpc_call_get_userdata(GrpcCall *c) {
        return c ? c->handler_userdata : NULL;
}

static void call_pending_unlink(GrpcCall *c) {
        GrpcServer *s = c->pending_server;

        if (!s)
                return;
        if (c->pending_prev)
                c->pending_prev->pending_next = c->pending_next;
        else
                s->pending_closed = c->pending_next;
        if (c->pending_next)
                c->pending_next->pending_prev = c->pending_prev;
        c->pending_next = c->pending_prev = NULL;
        c->pending_server = NULL;
}

/* Runs a closed handler that was deferred, dropping the pending list's reference. */
static void call_closed_deliver(GrpcCall *c) {
        /* Keeps c alive while the pending reference and the handler go. */
        _cleanup_(grpc_call_unrefp) _unused_ GrpcCall *ref = grpc_call_ref(c);

        c->closed_source = sd_event_source_disable_unref(c->closed_source);
        if (c->pending_server) {
                call_pending_unlink(c);
                grpc_call_unref(c);
        }
        if (c->closed_cb && !c->closed_notified) {
                c->closed_notified = true;
                c->closed_cb(c, c->closed_userdata);
        }
}

static int call_closed_dispatch(sd_event_source *s, void *userdata) {
        call_closed_deliver(userdata);
        return 0;
}

static void call_destroy_userdata(void *userdata) {
        /* Runs when a pending defer source is dropped without firing (event loop freed). */
        GrpcCall *c = userdata;
        grpc_call_unref(c);
}

/* The stream is gone (reset, connection closed, server freed): detach and drop the
 * connection's reference. */
static void call_detach(GrpcCall *c, bool sync_notify) {
        GrpcConnection *conn = c->conn;
        bool notify;

        if (!conn)
                return;

        notify = c->dispatched && !c->finished && !c->closed_notified;
        if (conn->h.session)
                (void) nghttp2_session_set_stream_user_data(conn->h.session, c->stream_id, NULL);
        if (c->prev)
                c->prev->next = c->next;
        else
                conn->calls = c->next;
        if (c->next)
                c->next->prev = c->prev;
        c->next = c->prev = NULL;
        conn->n_calls--;
        c->conn = NULL;
        c->method = NULL;
        /* A handler that never ran has nobody to tell. */
        c->dispatch_source = sd_event_source_disable_unref(c->dispatch_source);

        if (notify) {
                if (sync_notify) {
                        if (c->closed_cb) {
                                c->closed_notified = true;
                                c->closed_cb(c, c->closed_userdata);
                        }
                } else if (!c->pending_server && c->closed_cb) {
                        /* The pending list holds a reference; grpc_server_free()
                         * delivers what the loop did not (also when the defer source
                         * could not be allocated: never call out from here). */
                        grpc_call_ref(c);
                        c->pending_server = conn->server;
                        c->pending_next = conn->server->pending_closed;
                        if (c->pending_next)
                                c->pending_next->pending_prev = c;
                        conn->server->pending_closed = c;
                        if (sd_event_add_defer(conn->server->event, &c->closed_source, call_closed_dispatch, c) >= 0)
                                (void) sd_event_source_set_enabled(c->closed_source, SD_EVENT_ONESHOT);
                }
        }
        grpc_call_unref(c);
}

static int call_dispatch(sd_event_source *s, void *userdata) {
        _cleanup_(grpc_call_unrefp) GrpcCall *c = grpc_call_ref(userdata);
        int r;

        c->dispatch_source = sd_event_source_disable_unref(c->dispatch_source);
        c->dispatched = true;
        if (grpc_call_is_open(c)) {
                r = c->handler(c, c->reader.msg ? c->reader.msg : (const uint8_t *) "", c->reader.msg_got,
                               c->handler_userdata);
                if (r < 0 && grpc_call_is_open(c)) {
                        log_debug_errno(r, "gRPC handler for %s failed: %m", c->path);
                        (void) grpc_call_finish(c, GRPC_STATUS_INTERNAL, "internal error");
                }
        }
        grpc_reader_done(&c->reader);
        return 0;
}

/* Data provider: sends the current message, then the latest queued one, then trailers. */
static ssize_t call_data_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                              uint32_t *data_flags, nghttp2_data_source *source, void *user_data) {
        GrpcCall *c = nghttp2_session_get_stream_user_data(session, stream_id);
        size_t n;

        if (!c)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;

        if (!c->out && c->latest) {
                c->out = TAKE_PTR(c->latest);
                c->out_len = c->latest_len;
                c->out_off = 0;
                c->latest_len = 0;
        }

        if (c->out) {
                n = MIN(length, c->out_len - c->out_off);
                memcpy(buf, c->out + c->out_off, n);
                c->out_off += n;
                if (c->out_off == c->out_len) {
                        c->out = mfree(c->out);
                        c->out_len = c->out_off = 0;
                }
                return (ssize_t) n;
        }

        if (c->trailers_pending) {
                nghttp2_nv nva[2];
                size_t nvlen = 0;
                char code[12];

                snprintf(code, sizeof code, "%d", (int) c->status);
                nva[nvlen++] = MAKE_NV_CS("grpc-status", code);
                if (c->status_message && c->status_message[0])
                        nva[nvlen++] = MAKE_NV_CS("grpc-message", c->status_message);
                *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
                if (nghttp2_submit_trailer(session, stream_id, nva, nvlen) != 0)
                        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
                c->trailers_pending = false;
                return 0;
        }

        c->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
}

static int call_send_headers(GrpcCall *c) {
        nghttp2_data_provider prd = {
                .source.ptr = c,
                .read_callback = call_data_read,
        };
        nghttp2_nv nva[] = {
                MAKE_NV_CS(":status", "200"),
                MAKE_NV_CS("content-type", "application/grpc"),
        };
        int r;

        if (c->headers_sent)
                return 0;
        r = nghttp2_submit_response(c->conn->h.session, c->stream_id, nva, ELEMENTSOF(nva), &prd);
        if (r != 0)
                return r == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EPROTO;
        c->headers_sent = true;
        return 0;
}

static void call_kick(GrpcCall *c) {
        if (c->deferred) {
                c->deferred = false;
                (void) nghttp2_session_resume_data(c->conn->h.session, c->stream_id);
        }
        connection_schedule_flush(c->conn);
}

/* Ends the call: Trailers-Only when nothing was sent yet, else trailers after the
 * queued data. http_status != 200 only for requests we reject before dispatch. */
static int call_finish_full(GrpcCall *c, unsigned http_status, GrpcStatus status, const char *message) {
        _cleanup_free_ char *enc = NULL;
        int r;

        if (!c->conn || c->finished)
                return -ECONNRESET;

        if (message) {
                enc = grpc_percent_encode(message);
                if (!enc)
                        return -ENOMEM;
        }

        if (!c->headers_sent) {
                nghttp2_nv nva[4];
                size_t nvlen = 0;
                char code[12], hs[8];

                snprintf(hs, sizeof hs, "%u", http_status);
                snprintf(code, sizeof code, "%d", (int) status);
                nva[nvlen++] = MAKE_NV_CS(":status", hs);
                nva[nvlen++] = MAKE_NV_CS("content-type", "application/grpc");
                nva[nvlen++] = MAKE_NV_CS("grpc-status", code);
                if (enc && enc[0])
                        nva[nvlen++] = MAKE_NV_CS("grpc-message", enc);
                r = nghttp2_submit_response(c->conn->h.session, c->stream_id, nva, nvlen, NULL);
                if (r != 0)
                        return r == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EPROTO;
                c->headers_sent = true;
                c->finished = true;
                connection_schedule_flush(c->conn);
                return 0;
        }

        c->status = status;
        c->status_message = TAKE_PTR(enc);
        c->trailers_pending = true;
        c->finished = true;
        call_kick(c);
        return 0;
}

_public_ int grpc_call_finish(GrpcCall *c, GrpcStatus status, const char *message) {
        if (!c)
                return -EINVAL;
        if ((unsigned) status > GRPC_STATUS_UNAUTHENTICATED)
                return -EINVAL;
        return call_finish_full(c, 200, status, message);
}

static int call_queue_message(GrpcCall *c, const uint8_t *msg, size_t len) {
        uint8_t *f;
        size_t flen;
        int r;

        if (!msg && len > 0)
                return -EINVAL;
        if (!grpc_call_is_open(c))
                return -ECONNRESET;
        f = grpc_frame_new(msg, len, &flen);
        if (!f)
                return len > UINT32_MAX ? -EMSGSIZE : -ENOMEM;
        r = call_send_headers(c);
        if (r < 0) {
                free(f);
                return r;
        }
        free(c->latest);
        c->latest = f;
        c->latest_len = flen;
        return 0;
}

_public_ int grpc_call_reply(GrpcCall *c, const uint8_t *msg, size_t len) {
        int r;

        if (!c)
                return -EINVAL;
        r = call_queue_message(c, msg, len);
        if (r < 0)
                return r;
        return call_finish_full(c, 200, GRPC_STATUS_OK, NULL);
}

_public_ int grpc_call_send_latest(GrpcCall *c, const uint8_t *msg, size_t len) {
        int r;

        if (!c)
                return -EINVAL;
        r = call_queue_message(c, msg, len);
        if (r < 0)
                return r;
        call_kick(c);
        return 0;
}

/* -- nghttp2 server callbacks: record and submit only -- */

static const GrpcMethod *server_find_method(GrpcServer *s, const uint8_t *path, size_t len) {
        for (size_t i = 0; i < s->n_methods; i++)
                if (strlen(s->methods[i].path) == len && memcmp(s->methods[i].path, path, len) == 0)
                        return &s->methods[i];
        return NULL;
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
        GrpcConnection *conn = user_data;
        GrpcCall *c;

        if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
                return 0;

        if (conn->n_calls >= conn->server->limits.max_streams_per_connection || conn->closing) {
                (void) nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                                 NGHTTP2_REFUSED_STREAM);
                return 0;
        }

        c = calloc(1, sizeof *c);
        if (!c)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        c->n_ref = 1;   /* the connection's */
        c->conn = conn;
        c->stream_id = frame->hd.stream_id;
        c->reader.max = conn->server->limits.max_message_size;
        if (nghttp2_session_set_stream_user_data(session, c->stream_id, c) != 0) {
                free(c);
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        c->next = conn->calls;
        if (conn->calls)
                conn->calls->prev = c;
        conn->calls = c;
        conn->n_calls++;
        return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data) {
        GrpcConnection *conn = user_data;
        GrpcCall *c;

        if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
                return 0;
        c = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (!c || c->headers_done)
                return 0;

        if (namelen == 7 && memcmp(name, ":method", 7) == 0)
                c->saw_post = valuelen == 4 && memcmp(value, "POST", 4) == 0;
        else if (namelen == 5 && memcmp(name, ":path", 5) == 0) {
                c->method = server_find_method(conn->server, value, valuelen);
                if (!c->path && valuelen <= GRPC_MAX_PATH) {
                        /* Kept for grpc_call_get_method() and logs; only a known method
                         * ever reaches a handler. */
                        c->path = strndup((const char *) value, valuelen);
                        if (!c->path)
                                return NGHTTP2_ERR_CALLBACK_FAILURE;
                }
        } else if (namelen == 12 && memcmp(name, "content-type", 12) == 0)
                c->saw_content_type = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
                                      (valuelen == 16 || value[16] == '+' || value[16] == ';');
        return 0;
}

static void call_reject(GrpcCall *c, unsigned http_status, GrpcStatus status, const char *message) {
        c->rejected = true;
        grpc_reader_done(&c->reader);
        (void) call_finish_full(c, http_status, status, message);
}

static void call_end_of_request(GrpcCall *c) {
        sd_event_source *s = NULL;

        if (c->rejected || c->finished || c->dispatch_source || c->dispatched)
                return;
        if (grpc_reader_partial(&c->reader))
                return call_reject(c, 200, GRPC_STATUS_INTERNAL, "truncated message");
        if (c->reader.n_msgs != 1)
                return call_reject(c, 200, GRPC_STATUS_INTERNAL,
                                   c->reader.n_msgs == 0 ? "missing request message" : "too many messages");

        if (sd_event_add_defer(c->conn->server->event, &s, call_dispatch, c) < 0)
                return call_reject(c, 200, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        (void) sd_event_source_set_destroy_callback(s, call_destroy_userdata);
        c->dispatch_source = s;
        grpc_call_ref(c);
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
        GrpcCall *c;

        if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
                return 0;
        c = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (!c)
                return 0;

        if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST &&
            !c->headers_done) {
                /* Called once for the whole header block (CONTINUATIONs included). */
                c->headers_done = true;
                if (!c->saw_post)
                        call_reject(c, 405, GRPC_STATUS_INTERNAL, "method must be POST");
                else if (!c->saw_content_type)
                        call_reject(c, 415, GRPC_STATUS_INTERNAL, "invalid content-type");
                else if (!c->method)
                        call_reject(c, 200, GRPC_STATUS_UNIMPLEMENTED, "unknown method");
                else {
                        c->kind = c->method->kind;
                        c->handler = c->method->handler;
                        c->handler_userdata = c->method->userdata;
                }
                /* Only valid during this mem_recv: the method table may grow later. */
                c->method = NULL;
        }

        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
                call_end_of_request(c);
        return 0;
}

static int on_data_chunk_recv(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data,
                              size_t len, void *user_data) {
        GrpcCall *c = nghttp2_session_get_stream_user_data(session, stream_id);

        if (!c || c->rejected || c->finished || !c->headers_done)
                return 0;
        if (c->dispatch_source || c->dispatched)
                /* Data after END_STREAM cannot happen; after dispatch it is ignored. */
                return 0;

        switch (grpc_reader_feed(&c->reader, data, len)) {
        case GRPC_READ_OK:
                break;
        case GRPC_READ_COMPRESSED:
                call_reject(c, 200, GRPC_STATUS_UNIMPLEMENTED, "compressed messages are not supported");
                break;
        case GRPC_READ_TOO_BIG:
                call_reject(c, 200, GRPC_STATUS_RESOURCE_EXHAUSTED, "message larger than allowed");
                break;
        case GRPC_READ_EXTRA_MESSAGE:
                call_reject(c, 200, GRPC_STATUS_INTERNAL, "too many messages");
                break;
        case GRPC_READ_NOMEM:
                call_reject(c, 200, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
                break;
        }
        return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code, void *user_data) {
        GrpcCall *c = nghttp2_session_get_stream_user_data(session, stream_id);

        if (c)
                call_detach(c, false);
        return 0;
}

/* -- connections -- */

static void connection_free(GrpcConnection *c) {
        GrpcServer *s;

        if (!c)
                return;
        s = c->server;
        while (c->calls)
                call_detach(c->calls, s->freeing);
        c->flush_source = sd_event_source_disable_unref(c->flush_source);
        c->timer = sd_event_source_disable_unref(c->timer);
        h2io_done(&c->h);
        if (c->prev)
                c->prev->next = c->next;
        else
                s->connections = c->next;
        if (c->next)
                c->next->prev = c->prev;
        s->n_connections--;
        free(c);
}

static int connection_update_timer(GrpcConnection *c) {
        GrpcServer *s = c->server;
        uint64_t deadline;
        int r;

        if (c->closing)
                deadline = c->closing_usec + s->drain_timeout_usec;
        else if (!c->preface_seen)
                deadline = c->created_usec + s->handshake_timeout_usec;
        else if (c->h.wbuf)
                deadline = c->h.last_progress + s->stall_timeout_usec;
        else
                return sd_event_source_set_enabled(c->timer, SD_EVENT_OFF);

        r = sd_event_source_set_time(c->timer, deadline);
        if (r < 0)
                return r;
        return sd_event_source_set_enabled(c->timer, SD_EVENT_ONESHOT);
}

/* Flushes and decides whether the connection lives on. Returns 0 if it does,
 * -ECONNRESET if it was freed. */
static int connection_process(GrpcConnection *c, int read_result) {
        int r;

        if (read_result == -EPROTO || read_result == -ENOMEM) {
                /* nghttp2 rejected the input (bad preface, HTTP/1.x, protocol error,
                 * flood): make sure a GOAWAY is queued, send it, then close. */
                (void) nghttp2_session_terminate_session(c->h.session, NGHTTP2_PROTOCOL_ERROR);
                if (!c->closing) {
                        c->closing = true;
                        c->closing_usec = now_usec(CLOCK_MONOTONIC);
                }
        } else if (read_result < 0) {
                connection_free(c);
                return -ECONNRESET;
        }

        if (!c->closing && c->h.n_read >= NGHTTP2_CLIENT_MAGIC_LEN)
                c->preface_seen = true;  /* nghttp2 accepted the client magic */

        r = h2io_flush(&c->h);
        if (r < 0) {
                connection_free(c);
                return -ECONNRESET;
        }
        if (r == 0 && (c->closing || (!nghttp2_session_want_read(c->h.session) &&
                                      !nghttp2_session_want_write(c->h.session)))) {
                connection_free(c);
                return -ECONNRESET;
        }
        if (h2io_update_events(&c->h) < 0 || connection_update_timer(c) < 0) {
                connection_free(c);
                return -ECONNRESET;
        }
        return 0;
}

static int connection_io(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        GrpcConnection *c = userdata;
        int r = 0;

        if (revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                if (!c->h.wbuf)
                        r = h2io_read(&c->h);
                else if (revents & (EPOLLHUP | EPOLLERR))
                        r = -ECONNRESET;
        }
        (void) connection_process(c, r);
        return 0;
}

static int connection_flush_cb(sd_event_source *src, void *userdata) {
        GrpcConnection *c = userdata;

        (void) connection_process(c, 0);
        return 0;
}

static int connection_timer_cb(sd_event_source *src, uint64_t usec, void *userdata) {
        GrpcConnection *c = userdata;

        log_debug("gRPC connection %s timed out, closing.",
                  c->closing ? "drain" : !c->preface_seen ? "handshake" : "write");
        connection_free(c);
        return 0;
}

static void connection_schedule_flush(GrpcConnection *c) {
        if (c && c->flush_source)
                (void) sd_event_source_set_enabled(c->flush_source, SD_EVENT_ONESHOT);
}

static int server_session_new(GrpcConnection *c) {
        nghttp2_session_callbacks *cbs = NULL;
        nghttp2_option *opt = NULL;
        nghttp2_settings_entry iv[] = {
                { NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, c->server->limits.max_streams_per_connection },
                { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, GRPC_WINDOW_SIZE },
                { NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384 },
        };
        int r;

        r = nghttp2_session_callbacks_new(&cbs);
        if (r != 0)
                return -ENOMEM;
        nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk_recv);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);

        r = nghttp2_option_new(&opt);
        if (r != 0) {
                nghttp2_session_callbacks_del(cbs);
                return -ENOMEM;
        }
        /* Kubelets before 1.26 send the socket path as :authority; we validate requests
         * ourselves. nghttp2's flood and rapid-reset protections stay at their defaults. */
        nghttp2_option_set_no_http_messaging(opt, 1);

        r = nghttp2_session_server_new2(&c->h.session, cbs, c, opt);
        nghttp2_option_del(opt);
        nghttp2_session_callbacks_del(cbs);
        if (r != 0)
                return -ENOMEM;

        r = nghttp2_submit_settings(c->h.session, NGHTTP2_FLAG_NONE, iv, ELEMENTSOF(iv));
        if (r != 0)
                return -ENOMEM;
        r = nghttp2_session_set_local_window_size(c->h.session, NGHTTP2_FLAG_NONE, 0, 4 * GRPC_WINDOW_SIZE);
        if (r != 0)
                return -ENOMEM;
        return 0;
}

int grpc_server_add_connection_fd(GrpcServer *s, int fd, GrpcConnection **ret) {
        GrpcConnection *c;
        int r;

        if (!s || fd < 0) {
                safe_close(fd);
                return -EINVAL;
        }

        c = calloc(1, sizeof *c);
        if (!c) {
                safe_close(fd);
                return -ENOMEM;
        }
        c->server = s;
        c->h.fd = fd;
        c->created_usec = c->h.last_progress = now_usec(CLOCK_MONOTONIC);
        c->next = s->connections;
        if (s->connections)
                s->connections->prev = c;
        s->connections = c;
        s->n_connections++;

        r = server_session_new(c);
        if (r < 0)
                goto fail;
        r = sd_event_add_io(s->event, &c->h.io, fd, EPOLLIN, connection_io, c);
        if (r < 0)
                goto fail;
        r = sd_event_add_defer(s->event, &c->flush_source, connection_flush_cb, c);
        if (r < 0)
                goto fail;
        r = sd_event_add_time(s->event, &c->timer, CLOCK_MONOTONIC, c->created_usec + s->handshake_timeout_usec,
                              0, connection_timer_cb, c);
        if (r < 0)
                goto fail;
        /* Our SETTINGS go out at once. */
        r = sd_event_source_set_enabled(c->flush_source, SD_EVENT_ONESHOT);
        if (r < 0)
                goto fail;

        if (ret)
                *ret = c;
        return 0;

fail:
        connection_free(c);
        return r;
}

int grpc_server_connection_feed(GrpcServer *s, GrpcConnection *c, const uint8_t *data, size_t len) {
        ssize_t k;
        int r = 0;

        if (!s || !c)
                return -EINVAL;
        c->h.n_read += len;
        k = nghttp2_session_mem_recv(c->h.session, data, len);
        if (k < 0)
                r = k == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EPROTO;
        return connection_process(c, r);
}

static int server_accept(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        GrpcServer *s = userdata;

        for (unsigned i = 0; i < 16; i++) {
                int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                int r;

                if (cfd < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                log_debug_errno(errno, "gRPC accept failed, ignoring: %m");
                        break;
                }
                if (s->n_connections >= s->limits.max_connections) {
                        log_debug("gRPC connection limit (%u) reached, closing new connection.",
                                  s->limits.max_connections);
                        safe_close(cfd);
                        continue;
                }
                r = grpc_server_add_connection_fd(s, cfd, NULL);
                if (r < 0)
                        log_debug_errno(r, "Failed to set up gRPC connection, ignoring: %m");
        }
        return 0;
}

_public_ int grpc_server_new(sd_event *event, const GrpcServerLimits *limits, GrpcServer **ret) {
        GrpcServer *s;

        if (!event || !ret)
                return -EINVAL;
        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->event = sd_event_ref(event);
        s->listen_fd = -EBADF;
        if (limits)
                s->limits = *limits;
        if (s->limits.max_connections == 0)
                s->limits.max_connections = GRPC_DEFAULT_MAX_CONNECTIONS;
        if (s->limits.max_streams_per_connection == 0)
                s->limits.max_streams_per_connection = GRPC_DEFAULT_MAX_STREAMS;
        if (s->limits.max_message_size == 0)
                s->limits.max_message_size = GRPC_DEFAULT_MAX_MESSAGE;
        s->handshake_timeout_usec = GRPC_HANDSHAKE_TIMEOUT_USEC;
        s->drain_timeout_usec = GRPC_DRAIN_TIMEOUT_USEC;
        s->stall_timeout_usec = GRPC_STALL_TIMEOUT_USEC;
        *ret = s;
        return 0;
}

_public_ int grpc_server_add_method(GrpcServer *s, const char *path, GrpcMethodKind kind,
                                    GrpcMethodHandler handler, void *userdata) {
        GrpcMethod *m;
        char *p;

        if (!s || !path || !handler || path[0] != '/' || strlen(path) > GRPC_MAX_PATH)
                return -EINVAL;
        if (kind != GRPC_METHOD_UNARY && kind != GRPC_METHOD_SERVER_STREAMING)
                return -EINVAL;
        if (server_find_method(s, (const uint8_t *) path, strlen(path)))
                return -EEXIST;

        p = strdup(path);
        if (!p)
                return -ENOMEM;
        m = reallocarray(s->methods, s->n_methods + 1, sizeof *m);
        if (!m) {
                free(p);
                return -ENOMEM;
        }
        s->methods = m;
        s->methods[s->n_methods++] = (GrpcMethod) {
                .path = p,
                .kind = kind,
                .handler = handler,
                .userdata = userdata,
        };
        return 0;
}

_public_ int grpc_server_listen_fd(GrpcServer *s, int fd) {
        int r;

        if (!s || fd < 0)
                return -EINVAL;
        if (s->listen_source)
                return -EBUSY;
        r = fcntl(fd, F_GETFL);
        if (r < 0)
                return -errno;
        if (fcntl(fd, F_SETFL, r | O_NONBLOCK) < 0)
                return -errno;
        r = sd_event_add_io(s->event, &s->listen_source, fd, EPOLLIN, server_accept, s);
        if (r < 0)
                return r;
        s->listen_fd = fd;
        return 0;
}

_public_ int grpc_server_listen_unix(GrpcServer *s, const char *path) {
        _cleanup_close_ int fd = -EBADF;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct stat st;
        size_t l;
        int r;

        if (!s || !path)
                return -EINVAL;
        if (s->listen_source)
                return -EBUSY;
        l = strlen(path);
        if (l == 0 || l >= sizeof sa.sun_path)
                return -EINVAL;
        memcpy(sa.sun_path, path, l);

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        /* Only a stale socket is removed, never another kind of file. */
        if (lstat(path, &st) >= 0) {
                if (!S_ISSOCK(st.st_mode))
                        return -EEXIST;
                if (unlink(path) < 0 && errno != ENOENT)
                        return -errno;
        } else if (errno != ENOENT)
                return -errno;
        /* Linux creates the node from the socket inode's mode minus the umask; chmod
         * afterwards makes the result umask-independent. */
        (void) fchmod(fd, 0660);
        if (bind(fd, (struct sockaddr *) &sa, offsetof(struct sockaddr_un, sun_path) + l + 1) < 0)
                return -errno;
        if (chmod(path, 0660) < 0) {
                r = -errno;
                (void) unlink(path);
                return r;
        }
        if (listen(fd, SOMAXCONN) < 0) {
                r = -errno;
                (void) unlink(path);
                return r;
        }
        r = grpc_server_listen_fd(s, fd);
        if (r < 0) {
                (void) unlink(path);
                return r;
        }
        TAKE_FD(fd);
        return 0;
}

void grpc_server_set_timeouts(GrpcServer *s, uint64_t handshake_usec, uint64_t stall_usec, uint64_t drain_usec) {
        if (!s)
                return;
        if (handshake_usec > 0)
                s->handshake_timeout_usec = handshake_usec;
        if (stall_usec > 0)
                s->stall_timeout_usec = stall_usec;
        if (drain_usec > 0)
                s->drain_timeout_usec = drain_usec;
}

_public_ unsigned grpc_server_n_connections(GrpcServer *s) {
        return s ? s->n_connections : 0;
}

_public_ GrpcServer *grpc_server_free(GrpcServer *s) {
        if (!s || s->freeing)
                return NULL;
        s->freeing = true;
        s->listen_source = sd_event_source_disable_unref(s->listen_source);
        s->listen_fd = safe_close(s->listen_fd);
        while (s->connections)
                connection_free(s->connections);
        /* Closed handlers still waiting for their defer source run now, so no handler
         * runs after the server (and what its users freed with it) is gone. */
        while (s->pending_closed)
                call_closed_deliver(s->pending_closed);
        for (size_t i = 0; i < s->n_methods; i++)
                free(s->methods[i].path);
        free(s->methods);
        sd_event_unref(s->event);
        free(s);
        return NULL;
}

/* ---------------------------------------------------------------------------------- */
/* client */

struct GrpcClientCall {
        sd_event *event;
        H2Io h;
        sd_event_source *timer, *defer;
        int32_t stream_id;
        char *path;

        uint8_t *req;
        size_t req_len, req_off;

        unsigned http_status;
        int grpc_status;        /* -1 until a grpc-status header arrived */
        char *grpc_message;
        bool content_type_ok;
        GrpcReader reader;
        GrpcStatus error_status;        /* set when the answer itself is malformed */
        const char *error_message;

        bool done;              /* result known; deliver and free */
        GrpcStatus status;
        char *message;
        bool in_callback;

        GrpcClientReplyHandler cb;
        void *userdata;
};

static GrpcClientCall *client_call_free(GrpcClientCall *c) {
        if (!c)
                return NULL;
        c->timer = sd_event_source_disable_unref(c->timer);
        c->defer = sd_event_source_disable_unref(c->defer);
        h2io_done(&c->h);
        grpc_reader_done(&c->reader);
        free(c->req);
        free(c->grpc_message);
        free(c->message);
        free(c->path);
        sd_event_unref(c->event);
        free(c);
        return NULL;
}

static void client_call_set_result(GrpcClientCall *c, GrpcStatus status, const char *message) {
        if (c->done)
                return;
        c->done = true;
        c->status = status;
        if (message)
                c->message = strdup(message);   /* NULL on OOM: the status still tells */
}

/* Runs the callback once and frees the call. Only from event source handlers. */
static void client_call_deliver(GrpcClientCall *c) {
        const uint8_t *msg = NULL;
        size_t len = 0;

        if (c->status == GRPC_STATUS_OK) {
                msg = c->reader.msg ? c->reader.msg : (const uint8_t *) "";
                len = c->reader.msg_got;
        }
        c->in_callback = true;
        c->cb(c->status, c->message, msg, len, c->userdata);
        client_call_free(c);
}

static GrpcStatus http_status_to_grpc(unsigned code) {
        switch (code) {
        case 400:
                return GRPC_STATUS_INTERNAL;
        case 401:
                return GRPC_STATUS_UNAUTHENTICATED;
        case 403:
                return GRPC_STATUS_PERMISSION_DENIED;
        case 404:
                return GRPC_STATUS_UNIMPLEMENTED;
        case 429:
        case 502:
        case 503:
        case 504:
                return GRPC_STATUS_UNAVAILABLE;
        default:
                return GRPC_STATUS_UNKNOWN;
        }
}

static void client_call_complete(GrpcClientCall *c, uint32_t error_code) {
        char buf[64];

        if (c->done)
                return;
        if (c->grpc_status < 0 && error_code == NGHTTP2_REFUSED_STREAM)
                return client_call_set_result(c, GRPC_STATUS_UNAVAILABLE, "stream refused");
        if (c->grpc_status < 0 && error_code == NGHTTP2_CANCEL)
                return client_call_set_result(c, GRPC_STATUS_CANCELLED, "stream cancelled");
        if (c->http_status != 200) {
                snprintf(buf, sizeof buf, "HTTP status %u", c->http_status);
                return client_call_set_result(c, c->http_status ? http_status_to_grpc(c->http_status)
                                                                : GRPC_STATUS_UNAVAILABLE,
                                              c->http_status ? buf : "stream closed without answer");
        }
        if (c->grpc_status < 0)
                return client_call_set_result(c, GRPC_STATUS_INTERNAL, "missing grpc-status");
        if (c->grpc_status != GRPC_STATUS_OK)
                return client_call_set_result(c, (GrpcStatus) c->grpc_status, c->grpc_message);
        if (c->error_message)
                return client_call_set_result(c, c->error_status, c->error_message);
        if (!c->content_type_ok)
                return client_call_set_result(c, GRPC_STATUS_INTERNAL, "invalid content-type in answer");
        if (grpc_reader_partial(&c->reader))
                return client_call_set_result(c, GRPC_STATUS_INTERNAL, "truncated message");
        if (c->reader.n_msgs != 1)
                return client_call_set_result(c, GRPC_STATUS_INTERNAL,
                                              c->reader.n_msgs == 0 ? "missing answer message" : "too many messages");
        client_call_set_result(c, GRPC_STATUS_OK, NULL);
}

static int client_on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                            size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data) {
        GrpcClientCall *c = user_data;

        if (frame->hd.type != NGHTTP2_HEADERS || frame->hd.stream_id != c->stream_id)
                return 0;

        if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
                unsigned v = 0;
                if (valuelen == 3)
                        for (size_t i = 0; i < 3; i++)
                                v = v * 10 + (unsigned) (value[i] >= '0' && value[i] <= '9' ? value[i] - '0' : 0);
                c->http_status = v;
        } else if (namelen == 12 && memcmp(name, "content-type", 12) == 0)
                c->content_type_ok = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0;
        else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
                char buf[4];
                uint32_t v;

                if (valuelen == 0 || valuelen >= sizeof buf)
                        v = GRPC_STATUS_UNKNOWN;
                else {
                        memcpy(buf, value, valuelen);
                        buf[valuelen] = 0;
                        if (safe_atou32(buf, &v) < 0 || v > GRPC_STATUS_UNAUTHENTICATED)
                                v = GRPC_STATUS_UNKNOWN;
                }
                c->grpc_status = (int) v;
        } else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
                free(c->grpc_message);
                c->grpc_message = grpc_percent_decode((const char *) value, MIN(valuelen, (size_t) 4096));
        }
        return 0;
}

static int client_on_data_chunk_recv(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                                     const uint8_t *data, size_t len, void *user_data) {
        GrpcClientCall *c = user_data;

        if (stream_id != c->stream_id || c->error_message)
                return 0;
        switch (grpc_reader_feed(&c->reader, data, len)) {
        case GRPC_READ_OK:
                break;
        case GRPC_READ_COMPRESSED:
                c->error_status = GRPC_STATUS_UNIMPLEMENTED;
                c->error_message = "compressed answer not supported";
                break;
        case GRPC_READ_TOO_BIG:
                c->error_status = GRPC_STATUS_RESOURCE_EXHAUSTED;
                c->error_message = "answer larger than allowed";
                break;
        case GRPC_READ_EXTRA_MESSAGE:
                c->error_status = GRPC_STATUS_INTERNAL;
                c->error_message = "too many messages";
                break;
        case GRPC_READ_NOMEM:
                c->error_status = GRPC_STATUS_RESOURCE_EXHAUSTED;
                c->error_message = "out of memory";
                break;
        }
        if (c->error_message) {
                grpc_reader_done(&c->reader);
                (void) nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
                client_call_set_result(c, c->error_status, c->error_message);
        }
        return 0;
}

static int client_on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                                  void *user_data) {
        GrpcClientCall *c = user_data;

        if (stream_id == c->stream_id)
                client_call_complete(c, error_code);
        return 0;
}

static ssize_t client_data_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                                uint32_t *data_flags, nghttp2_data_source *source, void *user_data) {
        GrpcClientCall *c = user_data;
        size_t n = MIN(length, c->req_len - c->req_off);

        memcpy(buf, c->req + c->req_off, n);
        c->req_off += n;
        if (c->req_off == c->req_len)
                *data_flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t) n;
}

/* After I/O: deliver if done, else flush. Always from an event source handler. */
static void client_call_process(GrpcClientCall *c, int read_result) {
        int r;

        if (!c->done && read_result < 0)
                client_call_set_result(c, GRPC_STATUS_UNAVAILABLE,
                                       read_result == -EPROTO ? "HTTP/2 protocol error" : "connection closed");
        if (c->done)
                return client_call_deliver(c);

        r = h2io_flush(&c->h);
        if (r < 0) {
                client_call_set_result(c, GRPC_STATUS_UNAVAILABLE, "connection closed");
                return client_call_deliver(c);
        }
        if (h2io_update_events(&c->h) < 0) {
                client_call_set_result(c, GRPC_STATUS_UNAVAILABLE, "event loop failure");
                return client_call_deliver(c);
        }
}

static int client_io(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        GrpcClientCall *c = userdata;
        int r = 0;

        if (revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                if (!c->h.wbuf)
                        r = h2io_read(&c->h);
                else if (revents & (EPOLLHUP | EPOLLERR))
                        r = -ECONNRESET;
        }
        client_call_process(c, r);
        return 0;
}

static int client_timer(sd_event_source *src, uint64_t usec, void *userdata) {
        GrpcClientCall *c = userdata;

        client_call_set_result(c, GRPC_STATUS_DEADLINE_EXCEEDED, "deadline exceeded");
        client_call_deliver(c);
        return 0;
}

static int client_defer(sd_event_source *src, void *userdata) {
        GrpcClientCall *c = userdata;

        client_call_process(c, 0);
        return 0;
}

static int client_connect(const char *socket_path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        _cleanup_close_ int fd = -EBADF;
        size_t l = strlen(socket_path);

        if (l == 0 || l >= sizeof sa.sun_path)
                return -EINVAL;
        memcpy(sa.sun_path, socket_path, l);

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        /* AF_UNIX connects complete or fail at once, EAGAIN meaning a full backlog. */
        if (connect(fd, (struct sockaddr *) &sa, offsetof(struct sockaddr_un, sun_path) + l + 1) < 0)
                return -errno;
        return TAKE_FD(fd);
}

/* Takes over the connected fd (also on failure). */
static int client_call_start(GrpcClientCall *c, int fd, uint64_t timeout_usec) {
        nghttp2_session_callbacks *cbs = NULL;
        nghttp2_option *opt = NULL;
        nghttp2_data_provider prd = { .read_callback = client_data_read };
        char tmo[10] = "";
        int r;

        if (timeout_usec > 0)
                grpc_timeout_format(timeout_usec, tmo);

        nghttp2_nv nva[] = {
                MAKE_NV_CS(":method", "POST"),
                MAKE_NV_CS(":scheme", "http"),
                MAKE_NV_CS(":path", c->path),
                MAKE_NV_CS(":authority", "localhost"),
                MAKE_NV_CS("content-type", "application/grpc"),
                MAKE_NV_CS("te", "trailers"),
                MAKE_NV_CS("grpc-timeout", tmo),
        };

        c->h.fd = fd;
        /* A descriptor handed over by someone else may be blocking. */
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
                return -errno;

        if (nghttp2_session_callbacks_new(&cbs) != 0)
                return -ENOMEM;
        nghttp2_session_callbacks_set_on_header_callback(cbs, client_on_header);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, client_on_data_chunk_recv);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, client_on_stream_close);
        if (nghttp2_option_new(&opt) != 0) {
                nghttp2_session_callbacks_del(cbs);
                return -ENOMEM;
        }
        nghttp2_option_set_no_http_messaging(opt, 1);
        r = nghttp2_session_client_new2(&c->h.session, cbs, c, opt);
        nghttp2_option_del(opt);
        nghttp2_session_callbacks_del(cbs);
        if (r != 0)
                return -ENOMEM;

        nghttp2_settings_entry iv[] = {
                { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
                { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, GRPC_WINDOW_SIZE },
        };
        if (nghttp2_submit_settings(c->h.session, NGHTTP2_FLAG_NONE, iv, ELEMENTSOF(iv)) != 0)
                return -ENOMEM;
        c->stream_id = nghttp2_submit_request(c->h.session, NULL, nva, ELEMENTSOF(nva) - (timeout_usec == 0),
                                              &prd, NULL);
        if (c->stream_id < 0)
                return -ENOMEM;

        r = sd_event_add_io(c->event, &c->h.io, c->h.fd, EPOLLIN, client_io, c);
        if (r < 0)
                return r;
        return 0;
}

/* fd: a connected socket (taken over), or a negative errno from connecting, reported
 * through the callback as UNAVAILABLE. */
static int client_call_new(sd_event *event, int fd, const char *path,
                           const uint8_t *req, size_t len, uint64_t timeout_usec,
                           GrpcClientReplyHandler cb, void *userdata, GrpcClientCall **ret) {
        GrpcClientCall *c;
        int r;

        if (!event || !path || path[0] != '/' || strlen(path) > GRPC_MAX_PATH || !cb ||
            (!req && len > 0)) {
                safe_close(fd);
                return -EINVAL;
        }
        if (len > UINT32_MAX) {
                safe_close(fd);
                return -EMSGSIZE;
        }

        c = calloc(1, sizeof *c);
        if (!c) {
                safe_close(fd);
                return -ENOMEM;
        }
        c->event = sd_event_ref(event);
        c->h.fd = -EBADF;
        c->grpc_status = -1;
        c->reader.max = GRPC_CLIENT_MAX_MESSAGE;
        c->cb = cb;
        c->userdata = userdata;
        c->path = strdup(path);
        c->req = grpc_frame_new(req, len, &c->req_len);
        if (!c->path || !c->req) {
                safe_close(fd);
                client_call_free(c);
                return -ENOMEM;
        }

        r = sd_event_add_defer(event, &c->defer, client_defer, c);
        if (r < 0) {
                safe_close(fd);
                client_call_free(c);
                return r;
        }

        r = fd < 0 ? fd : client_call_start(c, fd, timeout_usec);
        if (r == -ENOMEM || r == -EINVAL) {
                client_call_free(c);
                return r;
        }
        if (r < 0) {
                /* Unreachable peer: reported from the defer source, never from here. */
                char buf[128];

                snprintf(buf, sizeof buf, "failed to connect: %s", strerror(-r));
                c->h.io = sd_event_source_disable_unref(c->h.io);
                client_call_set_result(c, GRPC_STATUS_UNAVAILABLE, buf);
        }

        if (timeout_usec > 0 && !c->done) {
                r = sd_event_add_time_relative(event, &c->timer, CLOCK_MONOTONIC, timeout_usec, 0, client_timer, c);
                if (r < 0) {
                        client_call_free(c);
                        return r;
                }
        }

        /* Sends the preface and the request (or reports the connect failure). */
        r = sd_event_source_set_enabled(c->defer, SD_EVENT_ONESHOT);
        if (r < 0) {
                client_call_free(c);
                return r;
        }

        if (ret)
                *ret = c;
        return 0;
}

_public_ int grpc_client_call_unary(sd_event *event, const char *socket_path, const char *path,
                                    const uint8_t *req, size_t len, uint64_t timeout_usec,
                                    GrpcClientReplyHandler cb, void *userdata, GrpcClientCall **ret) {
        int fd;

        if (!socket_path)
                return -EINVAL;
        fd = client_connect(socket_path);
        if (fd == -EINVAL)
                return fd;
        return client_call_new(event, fd, path, req, len, timeout_usec, cb, userdata, ret);
}

_public_ int grpc_client_call_unary_fd(sd_event *event, int fd, const char *path,
                                       const uint8_t *req, size_t len, uint64_t timeout_usec,
                                       GrpcClientReplyHandler cb, void *userdata, GrpcClientCall **ret) {
        if (fd < 0)
                return -EBADF;
        return client_call_new(event, fd, path, req, len, timeout_usec, cb, userdata, ret);
}

_public_ GrpcClientCall *grpc_client_call_cancel(GrpcClientCall *c) {
        if (!c || c->in_callback)
                return NULL;
        return client_call_free(c);
}
