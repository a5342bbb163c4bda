/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * call.c — the server side of one gRPC call in grpc-h2: reference counting, the
 * request checks done by the nghttp2 callbacks, handler dispatch and the answer
 * (headers, messages, trailers), and the closed handler.
 *
 * Contract: implements the grpc_call_* part of grpc/grpc-h2.h. The connection holds
 * one reference on each call of its open streams; grpc_call_detach() drops it. The
 * nghttp2 callbacks set by grpc_server_callbacks_set() only record state and submit
 * frames; handlers and closed handlers run from defer sources.
 */

#include <errno.h>
#include <inttypes.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/grpc-h2.h"
#include "grpc/grpc-h2-internal.h"
#include "grpc/grpc-h2-private.h"
#include "common/log.h"
#include "common/util.h"

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
void grpc_call_closed_deliver(GrpcCall *c) {
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
        grpc_call_closed_deliver(userdata);
        return 0;
}

static void call_destroy_userdata(void *userdata) {
        /* Runs when a pending defer source is dropped without firing (event loop freed). */
        GrpcCall *c = userdata;
        grpc_call_unref(c);
}

/* The stream is gone (reset, connection closed, server freed): detach and drop the
 * connection's reference. */
void grpc_call_detach(GrpcCall *c, bool sync_notify) {
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
        grpc_connection_schedule_flush(c->conn);
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
                grpc_connection_schedule_flush(c->conn);
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

const GrpcMethod *grpc_server_find_method(GrpcServer *s, const uint8_t *path, size_t len) {
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
                c->method = grpc_server_find_method(conn->server, value, valuelen);
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
                grpc_call_detach(c, false);
        return 0;
}



void grpc_server_callbacks_set(nghttp2_session_callbacks *cbs) {
        nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk_recv);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
}
