/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * server.c — gRPC server of grpc-h2: listening sockets, accepted connections (their
 * deadlines and flushing) and the method table.
 *
 * Contract: implements the grpc_server_* part of grpc/grpc-h2.h and the test entry
 * points of grpc/grpc-h2-internal.h. The server owns its connections; a connection
 * owns its H2Io and one reference on each open call. Protocol problems of a peer are
 * answered on the wire and never returned to callers; errors are negative errno.
 */

#include <errno.h>
#include <fcntl.h>
#include <nghttp2/nghttp2.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "grpc/grpc-h2.h"
#include "grpc/grpc-h2-internal.h"
#include "grpc/grpc-h2-private.h"
#include "common/log.h"
#include "common/util.h"

void grpc_connection_free(GrpcConnection *c) {
        GrpcServer *s;

        if (!c)
                return;
        s = c->server;
        while (c->calls)
                grpc_call_detach(c->calls, s->freeing);
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
                grpc_connection_free(c);
                return -ECONNRESET;
        }

        if (!c->closing && c->h.n_read >= NGHTTP2_CLIENT_MAGIC_LEN)
                c->preface_seen = true;  /* nghttp2 accepted the client magic */

        r = h2io_flush(&c->h);
        if (r < 0) {
                grpc_connection_free(c);
                return -ECONNRESET;
        }
        if (r == 0 && (c->closing || (!nghttp2_session_want_read(c->h.session) &&
                                      !nghttp2_session_want_write(c->h.session)))) {
                grpc_connection_free(c);
                return -ECONNRESET;
        }
        if (h2io_update_events(&c->h) < 0 || connection_update_timer(c) < 0) {
                grpc_connection_free(c);
                return -ECONNRESET;
        }
        return 0;
}

static int connection_io(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        GrpcConnection *c = userdata;
        int r = h2io_on_events(&c->h, revents);
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
        grpc_connection_free(c);
        return 0;
}

void grpc_connection_schedule_flush(GrpcConnection *c) {
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
        grpc_server_callbacks_set(cbs);

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
        grpc_connection_free(c);
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
        if (grpc_server_find_method(s, (const uint8_t *) path, strlen(path)))
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
                grpc_connection_free(s->connections);
        /* Closed handlers still waiting for their defer source run now, so no handler
         * runs after the server (and what its users freed with it) is gone. */
        while (s->pending_closed)
                grpc_call_closed_deliver(s->pending_closed);
        for (size_t i = 0; i < s->n_methods; i++)
                free(s->methods[i].path);
        free(s->methods);
        sd_event_unref(s->event);
        free(s);
        return NULL;
}
