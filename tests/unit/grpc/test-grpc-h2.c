/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-grpc-h2.c — the gRPC layer against independent peers.
 *
 * Contract: the server is exercised by python3-grpcio clients (tests/unit/grpc-peer.py)
 * and by a raw nghttp2 client session driven here, for the malformed cases grpcio
 * cannot produce; the client is exercised against a python3-grpcio server. Every
 * malformed case ends with a good call on the same server. Tests needing grpcio are
 * skipped when /usr/bin/python3 cannot import grpc.
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <systemd/sd-event.h>

#include "grpc/grpc-h2.h"
#include "grpc/grpc-h2-internal.h"
#include "common/util.h"
#include "tests/unit/test-main.h"

#define PYTHON "/usr/bin/python3"
#define TIMEOUT_USEC (10ULL * 1000000ULL)

static char tmpdir[64];
static char sock_path[100];
static sd_event *event;
static GrpcServer *server;

/* ---------------------------------------------------------------------------------- */
/* generic helpers */

static uint64_t now_mono(void) {
        return now_usec(CLOCK_MONOTONIC);
}

static void run_for(uint64_t usec) {
        uint64_t end = now_mono() + usec;
        while (now_mono() < end)
                ck_assert_int_ge(sd_event_run(event, 5000), 0);
}

#define RUN_UNTIL(cond)                                                                 \
        do {                                                                            \
                uint64_t _end = now_mono() + TIMEOUT_USEC;                              \
                while (!(cond)) {                                                       \
                        ck_assert_msg(now_mono() < _end, "timeout waiting for " #cond); \
                        ck_assert_int_ge(sd_event_run(event, 5000), 0);                 \
                }                                                                       \
        } while (0)

static char *script_path(void) {
        const char *root = getenv("KGPU_SOURCE_ROOT");
        char *p = NULL;

        ck_assert_int_gt(asprintf(&p, "%s/tests/unit/grpc-peer.py", root ? root : "."), 0);
        return p;
}

/* Starts the python peer with stdout on a non-blocking pipe. */
static pid_t peer_spawn(const char *const *args, int *ret_fd) {
        _cleanup_free_ char *script = script_path();
        const char *argv[16] = { PYTHON, script };
        int p[2];
        pid_t pid;
        size_t n = 2;

        for (const char *const *a = args; *a && n < ELEMENTSOF(argv) - 1; a++)
                argv[n++] = *a;
        argv[n] = NULL;

        ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                dup2(p[1], STDOUT_FILENO);
                execv(PYTHON, (char **) argv);
                _exit(127);
        }
        close(p[1]);
        ck_assert_int_eq(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
        *ret_fd = p[0];
        return pid;
}

/* Runs the event loop while collecting the peer's output, until EOF (until == NULL) or
 * until a line containing until appears. */
static char *peer_collect(int fd, const char *until) {
        char *out = calloc(1, 1);
        size_t len = 0;
        uint64_t end = now_mono() + TIMEOUT_USEC * 2;

        for (;;) {
                char buf[4096];
                ssize_t n = read(fd, buf, sizeof buf);

                if (n > 0) {
                        out = realloc(out, len + (size_t) n + 1);
                        ck_assert_ptr_nonnull(out);
                        memcpy(out + len, buf, (size_t) n);
                        len += (size_t) n;
                        out[len] = 0;
                        if (until && strstr(out, until))
                                break;
                        continue;
                }
                if (n == 0)
                        break;
                ck_assert_int_eq(errno, EAGAIN);
                ck_assert_msg(now_mono() < end, "peer output timeout, got so far: %s", out);
                if (event)
                        ck_assert_int_ge(sd_event_run(event, 2000), 0);
                else
                        (void) poll(&(struct pollfd) { .fd = fd, .events = POLLIN }, 1, 5);
        }
        return out;
}

static char *peer_run(const char *const *args) {
        int fd, st;
        pid_t pid = peer_spawn(args, &fd);
        char *out = peer_collect(fd, NULL);

        close(fd);
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "peer failed: %s", out);
        return out;
}

static bool have_grpcio(void) {
        int st;
        pid_t pid = fork();

        if (pid < 0)
                return false;
        if (pid == 0) {
                int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
                dup2(null, STDOUT_FILENO);
                dup2(null, STDERR_FILENO);
                execl(PYTHON, PYTHON, "-c", "import grpc", (char *) NULL);
                _exit(127);
        }
        return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void make_tmpdir(void) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/kgpu-test-grpc-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(tmpdir));
        snprintf(sock_path, sizeof sock_path, "%s/s.sock", tmpdir);
}

static void remove_tmpdir(void) {
        char p[160];

        snprintf(p, sizeof p, "%s/s.sock", tmpdir);
        (void) unlink(p);
        (void) rmdir(tmpdir);
}

/* ---------------------------------------------------------------------------------- */
/* the server under test */

static unsigned n_closed;       /* closed handler calls */
static unsigned n_handled;
static GrpcCall *held;          /* a streaming call kept open by the test */

static int h_echo(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        n_handled++;
        ck_assert_str_eq(grpc_call_get_method(call), "/test.Svc/Echo");
        ck_assert_ptr_eq(grpc_call_get_userdata(call), &n_handled);
        return grpc_call_reply(call, msg, len);
}

static int h_fail(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        return -EIO;
}

static const char error_text[] = "bad \"thing\" 100% \xc3\xbc\nend";

static int h_error(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        return grpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, error_text);
}

static int h_big(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        size_t n = 3U << 20;
        _cleanup_free_ uint8_t *b = malloc(n);

        ck_assert_ptr_nonnull(b);
        memset(b, 'y', n);
        return grpc_call_reply(call, b, n);
}

static int deferred_reply(sd_event_source *s, uint64_t usec, void *userdata) {
        GrpcCall *call = userdata;

        ck_assert(grpc_call_is_open(call));
        ck_assert_int_eq(grpc_call_reply(call, (const uint8_t *) "later", 5), 0);
        ck_assert(!grpc_call_is_open(call));
        ck_assert_int_eq(grpc_call_reply(call, (const uint8_t *) "again", 5), -ECONNRESET);
        grpc_call_unref(call);
        sd_event_source_unref(s);
        return 0;
}

static int h_deferred(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        ck_assert_int_ge(sd_event_add_time_relative(event, NULL, CLOCK_MONOTONIC, 50000, 0, deferred_reply,
                                                    grpc_call_ref(call)), 0);
        return 0;
}

static void on_closed(GrpcCall *call, void *userdata) {
        n_closed++;
        ck_assert(!grpc_call_is_open(call));
        ck_assert_int_eq(grpc_call_send_latest(call, (const uint8_t *) "x", 1), -ECONNRESET);
        if (call == held)
                held = grpc_call_unref(held);
}

static int watch_step(sd_event_source *s, uint64_t usec, void *userdata) {
        GrpcCall *call = held;
        unsigned step = (unsigned) (uintptr_t) userdata;

        sd_event_source_unref(s);
        if (!call)
                return 0;
        if (step == 1) {
                /* Three updates before the connection is flushed: only the last one
                 * may reach the peer. */
                ck_assert_int_eq(grpc_call_send_latest(call, (const uint8_t *) "A", 1), 0);
                ck_assert_int_eq(grpc_call_send_latest(call, (const uint8_t *) "B", 1), 0);
                ck_assert_int_eq(grpc_call_send_latest(call, (const uint8_t *) "C", 1), 0);
        } else {
                ck_assert_int_eq(grpc_call_send_latest(call, (const uint8_t *) "D", 1), 0);
                ck_assert_int_eq(grpc_call_finish(call, GRPC_STATUS_OK, NULL), 0);
                ck_assert_int_eq(grpc_call_finish(call, GRPC_STATUS_OK, NULL), -ECONNRESET);
                held = grpc_call_unref(held);
        }
        return 0;
}

static int h_watch(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        ck_assert_ptr_null(held);
        held = grpc_call_ref(call);
        grpc_call_set_closed_handler(call, on_closed, NULL);
        ck_assert_int_eq(grpc_call_send_latest(call, (const uint8_t *) "first", 5), 0);
        ck_assert_int_ge(sd_event_add_time_relative(event, NULL, CLOCK_MONOTONIC, 200000, 0, watch_step,
                                                    (void *) (uintptr_t) 1), 0);
        ck_assert_int_ge(sd_event_add_time_relative(event, NULL, CLOCK_MONOTONIC, 400000, 0, watch_step,
                                                    (void *) (uintptr_t) 2), 0);
        return 0;
}

static int h_hold(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        /* Kept open until the peer goes away; every call gets the closed handler. */
        grpc_call_set_closed_handler(call, on_closed, NULL);
        return grpc_call_send_latest(call, (const uint8_t *) "first", 5);
}

static void server_setup(void) {
        GrpcServerLimits limits = {
                .max_connections = 3,
                .max_streams_per_connection = 4,
                .max_message_size = 8U << 20,
        };

        signal(SIGPIPE, SIG_IGN);
        make_tmpdir();
        n_closed = n_handled = 0;
        held = NULL;
        ck_assert_int_eq(sd_event_new(&event), 0);
        ck_assert_int_eq(grpc_server_new(event, &limits, &server), 0);
        ck_assert_int_eq(grpc_server_add_method(server, "/test.Svc/Echo", GRPC_METHOD_UNARY, h_echo, &n_handled), 0);
        ck_assert_int_eq(grpc_server_add_method(server, "/test.Svc/Echo", GRPC_METHOD_UNARY, h_echo, NULL), -EEXIST);
        ck_assert_int_eq(grpc_server_add_method(server, "nope", GRPC_METHOD_UNARY, h_echo, NULL), -EINVAL);
        ck_assert_int_eq(grpc_server_add_method(server, "/test.Svc/Fail", GRPC_METHOD_UNARY, h_fail, NULL), 0);
        ck_assert_int_eq(grpc_server_add_method(server, "/test.Svc/Error", GRPC_METHOD_UNARY, h_error, NULL), 0);
        ck_assert_int_eq(grpc_server_add_method(server, "/test.Svc/Big", GRPC_METHOD_UNARY, h_big, NULL), 0);
        ck_assert_int_eq(grpc_server_add_method(server, "/test.Svc/Deferred", GRPC_METHOD_UNARY, h_deferred, NULL), 0);
        ck_assert_int_eq(grpc_server_add_method(server, "/test.Svc/Watch", GRPC_METHOD_SERVER_STREAMING, h_watch, NULL), 0);
        ck_assert_int_eq(grpc_server_add_method(server, "/test.Svc/Hold", GRPC_METHOD_SERVER_STREAMING, h_hold, NULL), 0);
        ck_assert_int_eq(grpc_server_listen_unix(server, sock_path), 0);
        ck_assert_int_eq(grpc_server_listen_unix(server, sock_path), -EBUSY);
}

static void server_teardown(void) {
        held = grpc_call_unref(held);
        server = grpc_server_free(server);
        event = sd_event_unref(event);
        remove_tmpdir();
}

/* ---------------------------------------------------------------------------------- */
/* raw HTTP/2 client for malformed requests */

typedef struct RawStream {
        int32_t id;
        int http_status;
        int grpc_status;
        char grpc_message[256];
        uint8_t data[512];
        size_t data_len;
        bool closed;
        uint32_t error_code;
        const uint8_t *body;
        size_t body_len, body_off;
        bool end_stream;
        /* gRPC framing of what arrived: message count and the last message's tag
         * (its first byte). */
        uint8_t pfx[5];
        size_t pfx_len;
        uint32_t remaining;
        bool tag_pending;
        unsigned n_msgs;
        uint8_t last_tag;
} RawStream;

typedef struct RawClient {
        int fd;
        nghttp2_session *session;
        RawStream streams[8];
        size_t n_streams;
        bool goaway;
        bool eof;
} RawClient;

static RawStream *raw_stream(RawClient *rc, int32_t id) {
        for (size_t i = 0; i < rc->n_streams; i++)
                if (rc->streams[i].id == id)
                        return &rc->streams[i];
        return NULL;
}

static int raw_on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                         size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data) {
        RawStream *st = raw_stream(user_data, frame->hd.stream_id);
        char v[256];

        if (!st)
                return 0;
        snprintf(v, sizeof v, "%.*s", (int) valuelen, value);
        if (namelen == 7 && memcmp(name, ":status", 7) == 0)
                st->http_status = atoi(v);
        else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
                st->grpc_status = atoi(v);
        else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0)
                snprintf(st->grpc_message, sizeof st->grpc_message, "%s", v);
        return 0;
}

static int raw_on_data(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data,
                       size_t len, void *user_data) {
        RawStream *st = raw_stream(user_data, stream_id);
        size_t k;

        if (!st)
                return 0;
        k = MIN(len, sizeof st->data - st->data_len);
        memcpy(st->data + st->data_len, data, k);
        st->data_len += k;

        for (size_t i = 0; i < len;) {
                if (st->remaining == 0 && !st->tag_pending) {
                        st->pfx[st->pfx_len++] = data[i++];
                        if (st->pfx_len == 5) {
                                st->remaining = (uint32_t) st->pfx[1] << 24 | (uint32_t) st->pfx[2] << 16 |
                                                (uint32_t) st->pfx[3] << 8 | st->pfx[4];
                                st->pfx_len = 0;
                                st->n_msgs++;
                                st->tag_pending = st->remaining > 0;
                        }
                        continue;
                }
                if (st->tag_pending) {
                        st->last_tag = data[i];
                        st->tag_pending = false;
                }
                k = MIN(len - i, (size_t) st->remaining);
                st->remaining -= (uint32_t) k;
                i += k;
        }
        return 0;
}

static int raw_on_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code, void *user_data) {
        RawStream *st = raw_stream(user_data, stream_id);

        if (st) {
                st->closed = true;
                st->error_code = error_code;
        }
        return 0;
}

static int raw_on_frame(nghttp2_session *session, const nghttp2_frame *frame, void *user_data) {
        RawClient *rc = user_data;

        if (frame->hd.type == NGHTTP2_GOAWAY)
                rc->goaway = true;
        return 0;
}

static ssize_t raw_read_body(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                             uint32_t *data_flags, nghttp2_data_source *source, void *user_data) {
        RawStream *st = source->ptr;
        size_t n = MIN(length, st->body_len - st->body_off);

        if (n > 0)
                memcpy(buf, st->body + st->body_off, n);
        st->body_off += n;
        if (st->body_off == st->body_len) {
                *data_flags |= NGHTTP2_DATA_FLAG_EOF;
                if (!st->end_stream)
                        *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        }
        return (ssize_t) n;
}

static int raw_connect(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

        ck_assert_int_ge(fd, 0);
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock_path);
        ck_assert_int_eq(connect(fd, (struct sockaddr *) &sa, sizeof sa), 0);
        return fd;
}

static void raw_client_init(RawClient *rc) {
        nghttp2_session_callbacks *cbs;

        *rc = (RawClient) { .fd = raw_connect() };
        ck_assert_int_eq(nghttp2_session_callbacks_new(&cbs), 0);
        nghttp2_session_callbacks_set_on_header_callback(cbs, raw_on_header);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, raw_on_data);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, raw_on_close);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, raw_on_frame);
        ck_assert_int_eq(nghttp2_session_client_new(&rc->session, cbs, rc), 0);
        nghttp2_session_callbacks_del(cbs);
        ck_assert_int_eq(nghttp2_submit_settings(rc->session, NGHTTP2_FLAG_NONE, NULL, 0), 0);
}

static void raw_client_done(RawClient *rc) {
        nghttp2_session_del(rc->session);
        close(rc->fd);
}

#define NV(n, v) { (uint8_t *) (n), (uint8_t *) (v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE }

static RawStream *raw_submit(RawClient *rc, const char *method, const char *path, const char *content_type,
                             const uint8_t *body, size_t body_len, bool end_stream) {
        nghttp2_nv nva[] = {
                NV(":method", method),
                NV(":scheme", "http"),
                NV(":path", path),
                NV(":authority", "/var/lib/kubelet/device-plugins/kgpu.sock"),
                NV("content-type", content_type),
                NV("te", "trailers"),
        };
        RawStream *st;

        ck_assert_uint_lt(rc->n_streams, ELEMENTSOF(rc->streams));
        st = &rc->streams[rc->n_streams++];
        *st = (RawStream) { .grpc_status = -1, .body = body, .body_len = body_len, .end_stream = end_stream };
        nghttp2_data_provider prd = { .source.ptr = st, .read_callback = raw_read_body };
        st->id = nghttp2_submit_request(rc->session, NULL, nva, ELEMENTSOF(nva), &prd, NULL);
        ck_assert_int_gt(st->id, 0);
        return st;
}

/* Appends what the socket has to *buf; returns false on EOF or a socket error. */
static bool raw_recv_all(RawClient *rc, uint8_t **buf, size_t *len) {
        for (;;) {
                uint8_t tmp[16384];
                ssize_t n = recv(rc->fd, tmp, sizeof tmp, MSG_DONTWAIT);

                if (n < 0 && errno == EAGAIN)
                        return true;
                if (n <= 0) {
                        rc->eof = true;
                        return false;
                }
                *buf = realloc(*buf, *len + (size_t) n);
                ck_assert_ptr_nonnull(*buf);
                memcpy(*buf + *len, tmp, (size_t) n);
                *len += (size_t) n;
        }
}

/* Appends everything nghttp2 wants to send to *buf. */
static void raw_collect(RawClient *rc, uint8_t **buf, size_t *len) {
        for (;;) {
                const uint8_t *d;
                ssize_t n = nghttp2_session_mem_send(rc->session, &d);

                ck_assert_int_ge(n, 0);
                if (n == 0)
                        return;
                *buf = realloc(*buf, *len + (size_t) n);
                ck_assert_ptr_nonnull(*buf);
                memcpy(*buf + *len, d, (size_t) n);
                *len += (size_t) n;
        }
}

/* Writes out[], then feeds what came back to nghttp2; returns false once the server
 * closed the connection. Reads while writing, as the server stops reading a peer that
 * does not take its answers. */
static bool raw_exchange(RawClient *rc, const uint8_t *out, size_t n_out) {
        _cleanup_free_ uint8_t *in = NULL;
        size_t n_in = 0;
        bool alive = true;

        for (size_t off = 0; off < n_out && alive;) {
                ssize_t k = send(rc->fd, out + off, n_out - off, MSG_NOSIGNAL);
                if (k < 0 && errno == EAGAIN) {
                        ck_assert_int_ge(sd_event_run(event, 1000), 0);
                        alive = raw_recv_all(rc, &in, &n_in);
                        continue;
                }
                if (k < 0)
                        alive = false;  /* EPIPE: the server is gone */
                else
                        off += (size_t) k;
        }
        ck_assert_int_ge(sd_event_run(event, 2000), 0);
        if (alive)
                alive = raw_recv_all(rc, &in, &n_in);
        if (n_in > 0)
                ck_assert_int_eq(nghttp2_session_mem_recv(rc->session, in, n_in), (ssize_t) n_in);
        return alive;
}

/* One round of I/O. */
static bool raw_pump(RawClient *rc) {
        _cleanup_free_ uint8_t *out = NULL;
        size_t n_out = 0;

        raw_collect(rc, &out, &n_out);
        return raw_exchange(rc, out, n_out);
}

static void raw_wait_closed(RawClient *rc, RawStream *st) {
        uint64_t end = now_mono() + TIMEOUT_USEC;

        while (!st->closed) {
                ck_assert_msg(now_mono() < end, "stream %d not closed", st->id);
                if (!raw_pump(rc))
                        break;
        }
}

/* A good unary call on a fresh raw connection. */
static void assert_server_serves(void) {
        static const uint8_t body[] = { 0, 0, 0, 0, 3, 'a', 'b', 'c' };
        RawClient rc;
        RawStream *st;

        raw_client_init(&rc);
        st = raw_submit(&rc, "POST", "/test.Svc/Echo", "application/grpc", body, sizeof body, true);
        raw_wait_closed(&rc, st);
        ck_assert(st->closed);
        ck_assert_int_eq(st->http_status, 200);
        ck_assert_int_eq(st->grpc_status, 0);
        ck_assert_uint_eq(st->data_len, sizeof body);
        ck_assert_mem_eq(st->data, body, sizeof body);
        raw_client_done(&rc);
}

static void assert_raw_status(const char *method, const char *path, const char *ct, const uint8_t *body,
                              size_t len, int http_status, int grpc_status) {
        RawClient rc;
        RawStream *st;

        raw_client_init(&rc);
        st = raw_submit(&rc, method, path, ct, body, len, true);
        raw_wait_closed(&rc, st);
        ck_assert_msg(st->closed, "stream not closed");
        ck_assert_int_eq(st->http_status, http_status);
        ck_assert_int_eq(st->grpc_status, grpc_status);
        ck_assert_msg(st->grpc_message[0], "no grpc-message");
        ck_assert_uint_eq(st->data_len, 0);
        raw_client_done(&rc);
        assert_server_serves();
}

/* Writes bytes on a plain socket and expects a GOAWAY frame, then EOF. */
static void assert_goaway_and_close(const void *data, size_t len) {
        int fd = raw_connect();
        uint8_t got[4096];
        size_t n_got = 0;
        bool saw_goaway = false;
        uint64_t end = now_mono() + TIMEOUT_USEC;

        ck_assert_int_eq(send(fd, data, len, MSG_NOSIGNAL), (ssize_t) len);
        for (;;) {
                ssize_t n = recv(fd, got + n_got, sizeof got - n_got, MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno == ECONNRESET))
                        break;
                if (n > 0) {
                        n_got += (size_t) n;
                        continue;
                }
                ck_assert_int_eq(errno, EAGAIN);
                ck_assert_msg(now_mono() < end, "server did not close the connection");
                ck_assert_int_ge(sd_event_run(event, 2000), 0);
        }
        /* Walk the frames: 3-byte length, type, flags, stream id. */
        for (size_t off = 0; off + 9 <= n_got;) {
                size_t flen = (size_t) got[off] << 16 | (size_t) got[off + 1] << 8 | got[off + 2];
                if (got[off + 3] == NGHTTP2_GOAWAY)
                        saw_goaway = true;
                off += 9 + flen;
        }
        ck_assert_msg(saw_goaway, "no GOAWAY in %zu bytes", n_got);
        close(fd);
        RUN_UNTIL(grpc_server_n_connections(server) == 0);
        assert_server_serves();
}

/* ---------------------------------------------------------------------------------- */
/* server tests */

START_TEST(test_status_strings) {
        char buf[10];
        _cleanup_free_ char *e = NULL, *d = NULL, *bad = NULL;

        ck_assert_str_eq(grpc_status_to_string(GRPC_STATUS_OK), "OK");
        ck_assert_str_eq(grpc_status_to_string(GRPC_STATUS_UNAVAILABLE), "UNAVAILABLE");
        ck_assert_str_eq(grpc_status_to_string(99), "UNKNOWN");

        e = grpc_percent_encode("a b%c\xc3\xbc\n");
        ck_assert_str_eq(e, "a b%25c%C3%BC%0A");
        d = grpc_percent_decode(e, strlen(e));
        ck_assert_str_eq(d, "a b%c\xc3\xbc\n");
        bad = grpc_percent_decode("100%zz%4", 8);
        ck_assert_str_eq(bad, "100%zz%4");

        grpc_timeout_format(1, buf);
        ck_assert_str_eq(buf, "1u");
        grpc_timeout_format(5ULL * 1000000ULL, buf);
        ck_assert_str_eq(buf, "5000000u");
        grpc_timeout_format(200ULL * 1000000ULL, buf);
        ck_assert_str_eq(buf, "200000m");
        grpc_timeout_format(UINT64_MAX, buf);
        ck_assert_uint_le(strlen(buf), 9);
}
END_TEST

START_TEST(test_server_unary_grpcio) {
        const char *echo[] = { "client", sock_path, "/test.Svc/Echo", "68656c6c6f", NULL };
        const char *empty[] = { "client", sock_path, "/test.Svc/Echo", "-", NULL };
        const char *deferred[] = { "client", sock_path, "/test.Svc/Deferred", "00", NULL };
        const char *fail[] = { "client", sock_path, "/test.Svc/Fail", "00", NULL };
        const char *error[] = { "client", sock_path, "/test.Svc/Error", "00", NULL };
        const char *unknown[] = { "client", sock_path, "/test.Svc/Nope", "00", NULL };
        const char *big[] = { "client", sock_path, "/test.Svc/Big", "00", NULL };
        _cleanup_free_ char *o1 = NULL, *o2 = NULL, *o3 = NULL, *o4 = NULL, *o5 = NULL, *o6 = NULL, *o7 = NULL;

        o1 = peer_run(echo);
        ck_assert_str_eq(o1, "OK 68656c6c6f\n");
        ck_assert_uint_eq(n_handled, 1);
        o2 = peer_run(empty);
        ck_assert_str_eq(o2, "OK -\n");
        o3 = peer_run(deferred);
        ck_assert_str_eq(o3, "OK 6c61746572\n");
        o4 = peer_run(fail);
        ck_assert_str_eq(o4, "ERR INTERNAL internal error\n");
        o5 = peer_run(error);
        ck_assert_str_eq(o5, "ERR INVALID_ARGUMENT bad \"thing\" 100% \xc3\xbc\nend\n");
        o6 = peer_run(unknown);
        ck_assert_str_eq(o6, "ERR UNIMPLEMENTED unknown method\n");
        /* 3 MiB through 1 MiB stream windows: flow control must be honoured. */
        o7 = peer_run(big);
        ck_assert_str_eq(o7, "OK len3145728:79\n");
        RUN_UNTIL(grpc_server_n_connections(server) == 0);
}
END_TEST

START_TEST(test_server_streaming_latest_only) {
        const char *watch[] = { "stream", sock_path, "/test.Svc/Watch", "-", NULL };
        _cleanup_free_ char *o = NULL;

        o = peer_run(watch);
        /* A and B were replaced by C before the peer could take them. */
        ck_assert_str_eq(o, "MSG 6669727374\nMSG 43\nMSG 44\nEND OK\n");
        ck_assert_ptr_null(held);
        ck_assert_uint_eq(n_closed, 0);
}
END_TEST

START_TEST(test_server_streaming_cancel) {
        const char *hold[] = { "stream", sock_path, "/test.Svc/Hold", "-", "1", NULL };
        _cleanup_free_ char *o = NULL;

        o = peer_run(hold);
        ck_assert_str_eq(o, "MSG 6669727374\nCANCELLED\n");
        RUN_UNTIL(n_closed == 1);
        run_for(100000);
        ck_assert_uint_eq(n_closed, 1);
}
END_TEST

START_TEST(test_server_slow_reader_latest_only) {
        /* A ListAndWatch reader that does not read: 200 updates of 32 KiB are queued,
         * memory stays bounded, and once the peer reads it gets a few early ones and
         * the last one, never the whole backlog. */
        const size_t size = 32768;
        _cleanup_free_ uint8_t *msg = malloc(size);
        RawClient rc;
        RawStream *st;
        GrpcCall *call;

        ck_assert_ptr_nonnull(msg);
        memset(msg, 0, size);
        raw_client_init(&rc);
        st = raw_submit(&rc, "POST", "/test.Svc/Watch", "application/grpc", (const uint8_t *) "\0\0\0\0\0", 5, true);
        while (st->n_msgs < 1)
                ck_assert(raw_pump(&rc));
        ck_assert_ptr_nonnull(held);
        call = grpc_call_ref(held);
        /* The test drives this stream itself; the timers of h_watch see held == NULL. */
        held = grpc_call_unref(held);

        for (unsigned i = 1; i <= 200; i++) {
                msg[0] = (uint8_t) i;
                ck_assert_int_eq(grpc_call_send_latest(call, msg, size), 0);
                for (unsigned k = 0; k < 4; k++)
                        ck_assert_int_ge(sd_event_run(event, 0), 0);
        }
        ck_assert_int_eq(grpc_call_finish(call, GRPC_STATUS_OK, NULL), 0);
        grpc_call_unref(call);

        raw_wait_closed(&rc, st);
        ck_assert(st->closed);
        ck_assert_int_eq(st->grpc_status, 0);
        ck_assert_uint_eq(st->last_tag, 200);
        ck_assert_msg(st->n_msgs < 20, "got %u messages, expected only a few", st->n_msgs);
        raw_client_done(&rc);
        assert_server_serves();
}
END_TEST

START_TEST(test_server_connection_dies_mid_call) {
        RawClient rc;
        RawStream *st;

        raw_client_init(&rc);
        st = raw_submit(&rc, "POST", "/test.Svc/Hold", "application/grpc", (const uint8_t *) "\0\0\0\0\0", 5, true);
        while (st->data_len < 10)
                ck_assert(raw_pump(&rc));
        ck_assert_mem_eq(st->data, "\0\0\0\0\5first", 10);
        ck_assert_uint_eq(n_closed, 0);
        raw_client_done(&rc);
        RUN_UNTIL(n_closed == 1 && grpc_server_n_connections(server) == 0);
        assert_server_serves();
}
END_TEST

START_TEST(test_server_stream_limit) {
        RawClient rc;
        RawStream *st[6];
        unsigned refused = 0, served = 0;

        raw_client_init(&rc);
        for (size_t i = 0; i < ELEMENTSOF(st); i++)
                st[i] = raw_submit(&rc, "POST", "/test.Svc/Hold", "application/grpc", (const uint8_t *) "\0\0\0\0\0",
                                   5, true);
        uint64_t end = now_mono() + TIMEOUT_USEC;
        while (refused + served < ELEMENTSOF(st)) {
                ck_assert(now_mono() < end);
                ck_assert(raw_pump(&rc));
                refused = served = 0;
                for (size_t i = 0; i < ELEMENTSOF(st); i++) {
                        if (st[i]->closed && st[i]->error_code == NGHTTP2_REFUSED_STREAM)
                                refused++;
                        else if (st[i]->data_len >= 10)
                                served++;
                }
        }
        ck_assert_uint_eq(served, 4);
        ck_assert_uint_eq(refused, 2);
        raw_client_done(&rc);
        RUN_UNTIL(n_closed == 4);
        assert_server_serves();
}
END_TEST

START_TEST(test_server_garbage) {
        static const char garbage[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 this is not HTTP/2 at all";
        assert_goaway_and_close(garbage, sizeof garbage - 1);
}
END_TEST

START_TEST(test_server_http1) {
        static const char get[] = "GET / HTTP/1.1\r\n\r\n";
        assert_goaway_and_close(get, sizeof get - 1);
}
END_TEST

START_TEST(test_server_huge_length) {
        static const uint8_t body[] = { 0, 0xff, 0xff, 0xff, 0xff };
        assert_raw_status("POST", "/test.Svc/Echo", "application/grpc", body, sizeof body, 200,
                          GRPC_STATUS_RESOURCE_EXHAUSTED);
}
END_TEST

START_TEST(test_server_truncated) {
        static const uint8_t body[] = { 0, 0, 0, 0, 10, 'a', 'b', 'c' };
        static const uint8_t prefix_only[] = { 0, 0, 0 };
        assert_raw_status("POST", "/test.Svc/Echo", "application/grpc", body, sizeof body, 200, GRPC_STATUS_INTERNAL);
        assert_raw_status("POST", "/test.Svc/Echo", "application/grpc", prefix_only, sizeof prefix_only, 200,
                          GRPC_STATUS_INTERNAL);
}
END_TEST

START_TEST(test_server_two_messages) {
        static const uint8_t body[] = { 0, 0, 0, 0, 1, 'a', 0, 0, 0, 0, 1, 'b' };
        assert_raw_status("POST", "/test.Svc/Echo", "application/grpc", body, sizeof body, 200, GRPC_STATUS_INTERNAL);
        /* No message at all is as wrong as two. */
        assert_raw_status("POST", "/test.Svc/Echo", "application/grpc", NULL, 0, 200, GRPC_STATUS_INTERNAL);
        /* Only the two good calls of assert_server_serves() reached the handler. */
        ck_assert_uint_eq(n_handled, 2);
}
END_TEST

START_TEST(test_server_compressed) {
        static const uint8_t body[] = { 1, 0, 0, 0, 1, 'a' };
        assert_raw_status("POST", "/test.Svc/Echo", "application/grpc", body, sizeof body, 200,
                          GRPC_STATUS_UNIMPLEMENTED);
}
END_TEST

START_TEST(test_server_bad_headers) {
        static const uint8_t body[] = { 0, 0, 0, 0, 1, 'a' };
        assert_raw_status("POST", "/test.Svc/Nope", "application/grpc", body, sizeof body, 200,
                          GRPC_STATUS_UNIMPLEMENTED);
        assert_raw_status("POST", "/test.Svc/Echo", "text/plain", body, sizeof body, 415, GRPC_STATUS_INTERNAL);
        assert_raw_status("POST", "/test.Svc/Echo", "application/grpcx", body, sizeof body, 415,
                          GRPC_STATUS_INTERNAL);
        assert_raw_status("GET", "/test.Svc/Echo", "application/grpc", body, sizeof body, 405, GRPC_STATUS_INTERNAL);
        /* A suffixed content type is fine. */
        assert_raw_status("POST", "/test.Svc/Error", "application/grpc+proto", body, sizeof body, 200,
                          GRPC_STATUS_INVALID_ARGUMENT);
        /* Only the five good calls of assert_server_serves() reached the handler. */
        ck_assert_uint_eq(n_handled, 5);
}
END_TEST

START_TEST(test_server_too_many_connections) {
        int fds[3], extra;
        char c;
        uint64_t end;

        for (size_t i = 0; i < ELEMENTSOF(fds); i++)
                fds[i] = raw_connect();
        RUN_UNTIL(grpc_server_n_connections(server) == 3);

        extra = raw_connect();
        end = now_mono() + TIMEOUT_USEC;
        for (;;) {
                ssize_t n = recv(extra, &c, 1, MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno == ECONNRESET))
                        break;
                ck_assert_int_lt(n, 0);
                ck_assert_int_eq(errno, EAGAIN);
                ck_assert(now_mono() < end);
                ck_assert_int_ge(sd_event_run(event, 2000), 0);
        }
        close(extra);
        ck_assert_uint_eq(grpc_server_n_connections(server), 3);

        for (size_t i = 0; i < ELEMENTSOF(fds); i++)
                close(fds[i]);
        RUN_UNTIL(grpc_server_n_connections(server) == 0);
        assert_server_serves();
}
END_TEST

START_TEST(test_server_free_before_closed_handler_ran) {
        /* The peer is gone and its closed handler is still deferred when the server is
         * freed: the handler runs inside grpc_server_free(), never after it. */
        RawClient rc;
        RawStream *st;

        raw_client_init(&rc);
        st = raw_submit(&rc, "POST", "/test.Svc/Hold", "application/grpc", (const uint8_t *) "\0\0\0\0\0", 5, true);
        while (st->data_len < 10)
                ck_assert(raw_pump(&rc));
        raw_client_done(&rc);
        RUN_UNTIL(grpc_server_n_connections(server) == 0);
        ck_assert_uint_eq(n_closed, 0);
        server = grpc_server_free(server);
        ck_assert_uint_eq(n_closed, 1);
        run_for(50000);
        ck_assert_uint_eq(n_closed, 1);
}
END_TEST

START_TEST(test_server_rapid_reset) {
        /* Open and reset streams as fast as possible (CVE-2023-44487): nghttp2's
         * built-in limit must end the connection with a GOAWAY, and the server must
         * keep serving others. */
        RawClient rc;
        nghttp2_nv nva[] = {
                NV(":method", "POST"), NV(":scheme", "http"), NV(":path", "/test.Svc/Hold"),
                NV(":authority", "x"), NV("content-type", "application/grpc"),
        };
        unsigned i;

        raw_client_init(&rc);
        for (i = 0; i < 20000 && !rc.goaway && !rc.eof;) {
                _cleanup_free_ uint8_t *out = NULL;
                size_t n_out = 0;

                for (unsigned j = 0; j < 256; j++, i++) {
                        int32_t id = nghttp2_submit_headers(rc.session, NGHTTP2_FLAG_NONE, -1, NULL, nva,
                                                            ELEMENTSOF(nva), NULL);
                        ck_assert_int_gt(id, 0);
                        raw_collect(&rc, &out, &n_out);
                        ck_assert_int_eq(nghttp2_submit_rst_stream(rc.session, NGHTTP2_FLAG_NONE, id,
                                                                   NGHTTP2_CANCEL), 0);
                        raw_collect(&rc, &out, &n_out);
                }
                if (!raw_exchange(&rc, out, n_out))
                        break;
        }
        for (unsigned k = 0; k < 100 && !rc.goaway && raw_pump(&rc); k++)
                ;
        ck_assert_msg(rc.goaway || rc.eof, "no GOAWAY after %u resets", i);
        ck_assert_uint_lt(i, 20000);
        raw_client_done(&rc);
        RUN_UNTIL(grpc_server_n_connections(server) == 0);
        ck_assert_uint_eq(n_handled, 0);
        assert_server_serves();
}
END_TEST

START_TEST(test_server_listen_unix) {
        GrpcServer *other = NULL;
        char path[160];
        int fd;

        /* A regular file is never replaced; a stale socket is. */
        snprintf(path, sizeof path, "%s/file", tmpdir);
        fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        close(fd);
        ck_assert_int_eq(grpc_server_new(event, NULL, &other), 0);
        ck_assert_int_eq(grpc_server_listen_unix(other, path), -EEXIST);
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(grpc_server_listen_unix(other, sock_path), 0);
        ck_assert_int_eq(access(sock_path, F_OK), 0);
        other = grpc_server_free(other);
        /* The first server's listener is gone with the file; a new call reaches the
         * second server until it is freed — and nothing leaked. */
}
END_TEST

static void assert_closed_by_server(int fd) {
        uint64_t end = now_mono() + TIMEOUT_USEC;
        char buf[4096];

        for (;;) {
                ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno == ECONNRESET))
                        return;
                ck_assert(n > 0 || errno == EAGAIN);
                ck_assert_msg(now_mono() < end, "server did not close the connection");
                ck_assert_int_ge(sd_event_run(event, 2000), 0);
        }
}

START_TEST(test_server_handshake_timeout) {
        /* Sockets that never complete the client preface do not keep their slot. */
        RawClient rc;
        int silent, partial;
        uint64_t t0 = now_mono();

        grpc_server_set_timeouts(server, 200000, 0, 0);
        silent = raw_connect();
        partial = raw_connect();
        ck_assert_int_eq(send(partial, NGHTTP2_CLIENT_MAGIC, 10, MSG_NOSIGNAL), 10);
        raw_client_init(&rc);
        ck_assert(raw_pump(&rc));

        assert_closed_by_server(silent);
        assert_closed_by_server(partial);
        ck_assert_uint_ge(now_mono() - t0, 190000);
        close(silent);
        close(partial);

        /* The client that sent its preface is still served on the same connection. */
        run_for(300000);
        ck_assert_uint_eq(grpc_server_n_connections(server), 1);
        static const uint8_t body[] = { 0, 0, 0, 0, 1, 'z' };
        RawStream *st = raw_submit(&rc, "POST", "/test.Svc/Echo", "application/grpc", body, sizeof body, true);
        raw_wait_closed(&rc, st);
        ck_assert_int_eq(st->grpc_status, 0);
        ck_assert_mem_eq(st->data, body, sizeof body);
        raw_client_done(&rc);
}
END_TEST

START_TEST(test_server_stall_timeout) {
        /* A peer that opens a big window, asks for 3 MiB and never reads is dropped
         * once the output has not moved for the stall time. */
        nghttp2_settings_entry iv[] = { { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1U << 30 } };
        static const uint8_t body[] = { 0, 0, 0, 0, 0 };
        RawClient rc;

        grpc_server_set_timeouts(server, 0, 300000, 0);
        raw_client_init(&rc);
        ck_assert_int_eq(nghttp2_submit_settings(rc.session, NGHTTP2_FLAG_NONE, iv, ELEMENTSOF(iv)), 0);
        ck_assert_int_eq(nghttp2_submit_window_update(rc.session, NGHTTP2_FLAG_NONE, 0, 1 << 30), 0);
        (void) raw_submit(&rc, "POST", "/test.Svc/Big", "application/grpc", body, sizeof body, true);
        {
                _cleanup_free_ uint8_t *out = NULL;
                size_t n_out = 0;

                raw_collect(&rc, &out, &n_out);
                ck_assert_int_eq(send(rc.fd, out, n_out, MSG_NOSIGNAL), (ssize_t) n_out);
        }
        RUN_UNTIL(grpc_server_n_connections(server) == 1);
        /* Never read: the server's writes block, then it gives up. */
        uint64_t t0 = now_mono();
        RUN_UNTIL(grpc_server_n_connections(server) == 0);
        ck_assert_uint_ge(now_mono() - t0, 250000);
        raw_client_done(&rc);
        assert_server_serves();
}
END_TEST

START_TEST(test_server_free_with_open_calls) {
        RawClient rc;
        RawStream *st;

        raw_client_init(&rc);
        st = raw_submit(&rc, "POST", "/test.Svc/Hold", "application/grpc", (const uint8_t *) "\0\0\0\0\0", 5, true);
        while (st->data_len < 10)
                ck_assert(raw_pump(&rc));
        /* Closed handlers run inside grpc_server_free(). */
        server = grpc_server_free(server);
        ck_assert_uint_eq(n_closed, 1);
        while (raw_pump(&rc))
                ;
        ck_assert(rc.eof);
        raw_client_done(&rc);
}
END_TEST

START_TEST(test_server_feed) {
        /* The fuzzing entry point: bytes in, frames out, connection closed on garbage. */
        int sp[2];
        GrpcConnection *c;

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sp), 0);
        ck_assert_int_eq(grpc_server_add_connection_fd(server, sp[0], &c), 0);
        ck_assert_uint_eq(grpc_server_n_connections(server), 1);
        ck_assert_int_eq(grpc_server_connection_feed(server, c, (const uint8_t *) NGHTTP2_CLIENT_MAGIC,
                                                     NGHTTP2_CLIENT_MAGIC_LEN), 0);
        ck_assert_int_eq(grpc_server_connection_feed(server, c, (const uint8_t *) "xxxxxxxxxxxxxxxxxxxx", 20),
                         -ECONNRESET);
        ck_assert_uint_eq(grpc_server_n_connections(server), 0);
        close(sp[1]);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* client tests, against a grpcio server */

static pid_t peer_server_pid;
static int peer_server_fd = -1;

typedef struct Reply {
        bool called;
        GrpcStatus status;
        char message[256];
        size_t len;
        uint8_t first;
        char text[32];          /* short answers, as text */
} Reply;

static void on_reply(GrpcStatus status, const char *message, const uint8_t *msg, size_t len, void *userdata) {
        Reply *r = userdata;

        ck_assert(!r->called);
        r->called = true;
        r->status = status;
        snprintf(r->message, sizeof r->message, "%s", message ?: "");
        r->len = len;
        if (status == GRPC_STATUS_OK) {
                ck_assert_ptr_nonnull(msg);
                r->first = len > 0 ? msg[0] : 0;
                if (len < sizeof r->text)
                        memcpy(r->text, msg, len);
        }
}

static void client_setup(void) {
        const char *args[] = { "server", NULL, NULL };
        _cleanup_free_ char *out = NULL;

        signal(SIGPIPE, SIG_IGN);
        make_tmpdir();
        args[1] = sock_path;
        ck_assert_int_eq(sd_event_new(&event), 0);
        peer_server_pid = peer_spawn(args, &peer_server_fd);
        out = peer_collect(peer_server_fd, "READY");
        ck_assert_msg(strstr(out, "READY"), "grpcio server did not start: %s", out);
}

static void client_teardown(void) {
        int st;

        if (peer_server_pid > 0) {
                kill(peer_server_pid, SIGKILL);
                (void) waitpid(peer_server_pid, &st, 0);
                peer_server_pid = 0;
        }
        if (peer_server_fd >= 0)
                peer_server_fd = safe_close(peer_server_fd);
        event = sd_event_unref(event);
        remove_tmpdir();
}

static Reply client_call(const char *path, const char *req, uint64_t timeout) {
        Reply r = {};
        GrpcClientCall *c = NULL;

        ck_assert_int_eq(grpc_client_call_unary(event, sock_path, path, (const uint8_t *) req, strlen(req), timeout,
                                                on_reply, &r, &c), 0);
        ck_assert_ptr_nonnull(c);
        ck_assert(!r.called);
        RUN_UNTIL(r.called);
        return r;
}

START_TEST(test_client_unary) {
        Reply r;

        r = client_call("/test.Echo/Echo", "hello", 5000000);
        ck_assert_int_eq(r.status, GRPC_STATUS_OK);
        ck_assert_uint_eq(r.len, 5);
        ck_assert_int_eq(r.first, 'h');

        r = client_call("/test.Echo/Echo", "", 0);
        ck_assert_int_eq(r.status, GRPC_STATUS_OK);
        ck_assert_uint_eq(r.len, 0);

        r = client_call("/test.Echo/Big", "x", 5000000);
        ck_assert_int_eq(r.status, GRPC_STATUS_OK);
        ck_assert_uint_eq(r.len, 1U << 20);
        ck_assert_int_eq(r.first, 'x');
}
END_TEST

START_TEST(test_client_errors) {
        Reply r;

        r = client_call("/test.Echo/Fail", "bad 100% \xc3\xbc \"quoted\"", 5000000);
        ck_assert_int_eq(r.status, GRPC_STATUS_INVALID_ARGUMENT);
        ck_assert_str_eq(r.message, "bad 100% \xc3\xbc \"quoted\"");

        r = client_call("/test.Echo/Nope", "x", 5000000);
        ck_assert_int_eq(r.status, GRPC_STATUS_UNIMPLEMENTED);
}
END_TEST

START_TEST(test_client_deadline) {
        Reply r;
        uint64_t t0;
        int left;

        /* The deadline travels as grpc-timeout; the server sees it. */
        r = client_call("/test.Echo/Deadline", "x", 3000000);
        ck_assert_int_eq(r.status, GRPC_STATUS_OK);
        left = atoi(r.text);
        ck_assert_msg(left > 1000 && left <= 3000, "server saw %s ms left", r.text);
        /* No deadline: grpcio reports None or a practically infinite time. */
        r = client_call("/test.Echo/Deadline", "x", 0);
        ck_assert_msg(streq(r.text, "none") || strlen(r.text) > 9, "server saw %s ms left", r.text);

        t0 = now_mono();
        r = client_call("/test.Echo/Slow", "x", 300000);
        ck_assert_int_eq(r.status, GRPC_STATUS_DEADLINE_EXCEEDED);
        ck_assert_uint_ge(now_mono() - t0, 290000);
        ck_assert_uint_lt(now_mono() - t0, 3000000);
}
END_TEST

START_TEST(test_client_unavailable) {
        Reply r = {};
        char missing[160];

        snprintf(missing, sizeof missing, "%s/missing.sock", tmpdir);
        ck_assert_int_eq(grpc_client_call_unary(event, missing, "/test.Echo/Echo", (const uint8_t *) "x", 1, 1000000,
                                                on_reply, &r, NULL), 0);
        /* Never reported from inside the call that failed. */
        ck_assert(!r.called);
        RUN_UNTIL(r.called);
        ck_assert_int_eq(r.status, GRPC_STATUS_UNAVAILABLE);
        ck_assert_msg(strstr(r.message, "connect"), "%s", r.message);

        ck_assert_int_eq(grpc_client_call_unary(event, missing, "no-slash", NULL, 0, 0, on_reply, &r, NULL), -EINVAL);
}
END_TEST

/* A socket connected by someone else (as the probe hands one over), blocking as passed. */
START_TEST(test_client_unary_fd) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        Reply r = {};
        int fd;

        ck_assert_uint_lt(strlen(sock_path), sizeof(sa.sun_path));
        memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(connect(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ck_assert_int_eq(grpc_client_call_unary_fd(event, fd, "/test.Echo/Echo", (const uint8_t *) "hi", 2, 5000000,
                                                   on_reply, &r, NULL), 0);
        ck_assert(fcntl(fd, F_GETFL) & O_NONBLOCK);
        RUN_UNTIL(r.called);
        ck_assert_int_eq(r.status, GRPC_STATUS_OK);
        ck_assert_uint_eq(r.len, 2);
        ck_assert_int_eq(r.first, 'h');
        /* The call owned the fd and closed it. */
        ck_assert_int_eq(fcntl(fd, F_GETFD), -1);

        ck_assert_int_eq(grpc_client_call_unary_fd(event, -1, "/test.Echo/Echo", NULL, 0, 0, on_reply, &r, NULL),
                         -EBADF);
        /* Invalid arguments: the fd is still taken over (closed). */
        fd = socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0);
        ck_assert_int_eq(grpc_client_call_unary_fd(event, fd, "no-slash", NULL, 0, 0, on_reply, &r, NULL), -EINVAL);
        ck_assert_int_eq(fcntl(fd, F_GETFD), -1);
}
END_TEST

START_TEST(test_client_cancel) {
        Reply r = {};
        GrpcClientCall *c = NULL;

        ck_assert_int_eq(grpc_client_call_unary(event, sock_path, "/test.Echo/Slow", (const uint8_t *) "x", 1,
                                                10000000, on_reply, &r, &c), 0);
        run_for(100000);
        ck_assert_ptr_null(grpc_client_call_cancel(c));
        ck_assert_ptr_null(grpc_client_call_cancel(NULL));
        run_for(300000);
        ck_assert(!r.called);
}
END_TEST

START_TEST(test_client_server_dies) {
        Reply r = {};
        GrpcClientCall *c = NULL;
        int st;

        ck_assert_int_eq(grpc_client_call_unary(event, sock_path, "/test.Echo/Slow", (const uint8_t *) "x", 1,
                                                10000000, on_reply, &r, &c), 0);
        run_for(300000);
        kill(peer_server_pid, SIGKILL);
        (void) waitpid(peer_server_pid, &st, 0);
        peer_server_pid = 0;
        RUN_UNTIL(r.called);
        ck_assert_int_eq(r.status, GRPC_STATUS_UNAVAILABLE);
}
END_TEST

/* ---------------------------------------------------------------------------------- */

static Suite *grpc_suite(bool grpcio) {
        Suite *s = suite_create("grpc-h2");
        TCase *tc;

        tc = tcase_create("helpers");
        tcase_add_test(tc, test_status_strings);
        suite_add_tcase(s, tc);

        tc = tcase_create("server-raw");
        tcase_add_checked_fixture(tc, server_setup, server_teardown);
        tcase_add_test(tc, test_server_connection_dies_mid_call);
        tcase_add_test(tc, test_server_slow_reader_latest_only);
        tcase_add_test(tc, test_server_stream_limit);
        tcase_add_test(tc, test_server_garbage);
        tcase_add_test(tc, test_server_http1);
        tcase_add_test(tc, test_server_huge_length);
        tcase_add_test(tc, test_server_truncated);
        tcase_add_test(tc, test_server_two_messages);
        tcase_add_test(tc, test_server_compressed);
        tcase_add_test(tc, test_server_bad_headers);
        tcase_add_test(tc, test_server_too_many_connections);
        tcase_add_test(tc, test_server_free_with_open_calls);
        tcase_add_test(tc, test_server_rapid_reset);
        tcase_add_test(tc, test_server_free_before_closed_handler_ran);
        tcase_add_test(tc, test_server_handshake_timeout);
        tcase_add_test(tc, test_server_stall_timeout);
        tcase_add_test(tc, test_server_listen_unix);
        tcase_add_test(tc, test_server_feed);
        suite_add_tcase(s, tc);

        if (grpcio) {
                tc = tcase_create("server-grpcio");
                tcase_add_checked_fixture(tc, server_setup, server_teardown);
                tcase_add_test(tc, test_server_unary_grpcio);
                tcase_add_test(tc, test_server_streaming_latest_only);
                tcase_add_test(tc, test_server_streaming_cancel);
                suite_add_tcase(s, tc);

                tc = tcase_create("client-grpcio");
                tcase_add_checked_fixture(tc, client_setup, client_teardown);
                tcase_add_test(tc, test_client_unary);
        tcase_add_test(tc, test_client_unary_fd);
                tcase_add_test(tc, test_client_errors);
                tcase_add_test(tc, test_client_deadline);
                tcase_add_test(tc, test_client_unavailable);
                tcase_add_test(tc, test_client_cancel);
                tcase_add_test(tc, test_client_server_dies);
                suite_add_tcase(s, tc);
        } else
                fprintf(stderr, "python3-grpcio not available, skipping the tests against it\n");

        return s;
}

static Suite *grpc_h2_suite(void) {
        return grpc_suite(have_grpcio());
}

KGPU_TEST_SUITE(grpc_h2_suite)
