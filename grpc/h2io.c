/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * h2io.c — connection I/O of grpc-h2: a non-blocking socket feeding one nghttp2 session.
 *
 * Contract: H2Io owns its fd, event source, session and pending output; h2io_done()
 * releases them all. h2io_flush() returns 0 when everything nghttp2 had was written,
 * 1 when the socket is full (the rest is kept in wbuf), negative errno on error.
 * h2io_read() returns 0, -ECONNRESET on EOF, -EPROTO when nghttp2 rejected the input.
 */

#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#include "grpc/grpc-h2.h"
#include "grpc/grpc-h2-internal.h"
#include "grpc/grpc-h2-private.h"
#include "common/log.h"
#include "common/util.h"

void h2io_done(H2Io *h) {
        h->io = sd_event_source_disable_unref(h->io);
        if (h->session) {
                nghttp2_session_del(h->session);
                h->session = NULL;
        }
        h->fd = safe_close(h->fd);
        h->wbuf = mfree(h->wbuf);
        h->wbuf_len = h->wbuf_off = 0;
}

int h2io_update_events(H2Io *h) {
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
int h2io_flush(H2Io *h) {
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
int h2io_read(H2Io *h) {
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

int h2io_on_events(H2Io *h, uint32_t revents) {
        if (!(revents & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                return 0;
        if (!h->wbuf)
                return h2io_read(h);
        /* Output pending: nothing is read (see h2io_update_events()), only a hang-up counts. */
        if (revents & (EPOLLHUP | EPOLLERR))
                return -ECONNRESET;
        return 0;
}
