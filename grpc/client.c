/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * client.c — one-shot unary gRPC client calls of grpc-h2, with a deadline.
 *
 * Contract: implements grpc_client_call_* of grpc/grpc-h2.h. A call owns its socket,
 * session and buffers until its reply handler ran or it was cancelled; the handler
 * never runs from inside grpc_client_call_unary*(). timeout_usec 0 means no deadline
 * (and no grpc-timeout header); answers up to 16 MiB are accepted (the kubelet's
 * PodResources limit).
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "grpc/grpc-h2.h"
#include "grpc/grpc-h2-internal.h"
#include "grpc/grpc-h2-private.h"
#include "common/log.h"
#include "common/util.h"

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
        int r = h2io_on_events(&c->h, revents);
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
