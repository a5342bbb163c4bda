/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kube-http.c — libcurl's multi interface driven by sd-event (see kube-http.h).
 *
 * Contract: see kube-http.h. libcurl tells us which sockets to watch for what
 * (on_curl_socket) and when to call it back without socket activity (on_curl_timer);
 * both only arm sd-event sources. The sources' handlers call curl_multi_socket_action()
 * and then collect finished transfers, so no libcurl function is ever entered from a
 * libcurl callback. Finished transfers are taken off the multi handle before on_done
 * runs.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/cluster/kube-http.h"

struct KubeHttp {
        sd_event *event;
        CURLM *multi;
        sd_event_source *timer;
        const KubeCreds *creds;
        KubeRequest *requests;          /* running, doubly linked */
};

struct KubeRequest {
        KubeHttp *http;
        KubeRequest *prev, *next;
        CURL *easy;
        struct curl_slist *headers;
        char *url;
        bool stream;
        size_t max_body;
        char *body;
        size_t body_len, body_allocated;
        int error;                      /* ours, set in the write callback */
        uint32_t retry_after_sec;
        char error_text[CURL_ERROR_SIZE];
        KubeDataFunc on_data;
        KubeDoneFunc on_done;
        KubeHeadersFunc on_headers;
        void *userdata;
};

static int http_socket_action(KubeHttp *h, curl_socket_t fd, int what);

static int on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        KubeHttp *h = userdata;
        int what = 0;

        if (revents & (EPOLLIN|EPOLLHUP|EPOLLRDHUP))
                what |= CURL_CSELECT_IN;
        if (revents & EPOLLOUT)
                what |= CURL_CSELECT_OUT;
        if (revents & EPOLLERR)
                what |= CURL_CSELECT_ERR;
        (void) http_socket_action(h, fd, what);
        return 0;
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
        KubeHttp *h = userp;
        sd_event_source *s = socketp;
        uint32_t events = 0;
        int r;

        if (what == CURL_POLL_REMOVE) {
                if (s) {
                        /* libcurl closes the socket after this: take it out of epoll now. */
                        (void) sd_event_source_set_enabled(s, SD_EVENT_OFF);
                        sd_event_source_unref(s);
                        (void) curl_multi_assign(h->multi, fd, NULL);
                }
                return 0;
        }
        if (what & CURL_POLL_IN)
                events |= EPOLLIN;
        if (what & CURL_POLL_OUT)
                events |= EPOLLOUT;
        if (s) {
                r = sd_event_source_set_io_events(s, events);
                if (r >= 0)
                        r = sd_event_source_set_enabled(s, SD_EVENT_ON);
        } else {
                r = sd_event_add_io(h->event, &s, fd, events, on_io, h);
                if (r >= 0) {
                        (void) sd_event_source_set_description(s, "kube-http-socket");
                        if (curl_multi_assign(h->multi, fd, s) != CURLM_OK) {
                                sd_event_source_unref(s);
                                r = -ENOMEM;
                        }
                }
        }
        if (r < 0) {
                log_debug_errno(r, "Failed to watch an API server socket: %m");
                return -1;
        }
        return 0;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        KubeHttp *h = userdata;

        (void) http_socket_action(h, CURL_SOCKET_TIMEOUT, 0);
        return 0;
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp) {
        KubeHttp *h = userp;
        uint64_t now;
        int r;

        if (timeout_ms < 0)
                return h->timer ? (sd_event_source_set_enabled(h->timer, SD_EVENT_OFF) < 0 ? -1 : 0) : 0;
        r = sd_event_now(h->event, CLOCK_MONOTONIC, &now);
        if (r < 0)
                return -1;
        now += (uint64_t) timeout_ms * 1000;
        if (h->timer) {
                r = sd_event_source_set_time(h->timer, now);
                if (r >= 0)
                        r = sd_event_source_set_enabled(h->timer, SD_EVENT_ONESHOT);
        } else {
                r = sd_event_add_time(h->event, &h->timer, CLOCK_MONOTONIC, now, 0, on_timer, h);
                if (r >= 0)
                        (void) sd_event_source_set_description(h->timer, "kube-http-timer");
        }
        return r < 0 ? -1 : 0;
}

static void request_unlink_free(KubeRequest *q) {
        KubeHttp *h = q->http;

        if (q->prev)
                q->prev->next = q->next;
        else
                h->requests = q->next;
        if (q->next)
                q->next->prev = q->prev;
        if (q->easy) {
                (void) curl_multi_remove_handle(h->multi, q->easy);
                curl_easy_cleanup(q->easy);
        }
        if (q->headers) {
                /* The bearer header holds the token. */
                for (struct curl_slist *l = q->headers; l; l = l->next)
                        explicit_bzero(l->data, strlen(l->data));
                curl_slist_free_all(q->headers);
        }
        free(q->url);
        free(q->body);
        free(q);
}

void kube_request_cancel(KubeRequest *q) {
        if (q)
                request_unlink_free(q);
}

static int map_curl_error(CURLcode c) {
        switch (c) {
        case CURLE_OPERATION_TIMEDOUT:
                return -ETIMEDOUT;
        case CURLE_COULDNT_CONNECT:
                return -ECONNREFUSED;
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                return -EHOSTUNREACH;
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_ENGINE_NOTFOUND:
        case CURLE_SSL_ENGINE_SETFAILED:
        case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        case CURLE_SSL_INVALIDCERTSTATUS:
        case CURLE_SSL_ISSUER_ERROR:
        case CURLE_SSL_CRL_BADFILE:
        case CURLE_SSL_SHUTDOWN_FAILED:
                return -EPROTO;
        case CURLE_PARTIAL_FILE:
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
                return -ECONNRESET;
        case CURLE_FILESIZE_EXCEEDED:
                return -EMSGSIZE;
        default:
                return -EIO;
        }
}

static void request_finish(KubeRequest *q, CURLcode code) {
        KubeResponse resp = {};
        long status = 0, version = 0;
        char text[CURL_ERROR_SIZE + 64];

        (void) curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &status);
        (void) curl_easy_getinfo(q->easy, CURLINFO_HTTP_VERSION, &version);
        resp.status = status;
        resp.http_version = version == CURL_HTTP_VERSION_2_0 ? "HTTP/2" :
                            version == CURL_HTTP_VERSION_1_1 ? "HTTP/1.1" :
                            version == CURL_HTTP_VERSION_1_0 ? "HTTP/1.0" : "";
        if (q->error < 0) {
                resp.error = q->error;
                snprintf(text, sizeof(text), "%s", strerror(-q->error));
                if (q->error == -EMSGSIZE)
                        snprintf(text, sizeof(text), "response larger than %zu bytes, aborted", q->max_body);
        } else if (code != CURLE_OK) {
                resp.error = map_curl_error(code);
                snprintf(text, sizeof(text), "%s", q->error_text[0] ? q->error_text : curl_easy_strerror(code));
        } else
                text[0] = '\0';
        resp.error_text = text;
        resp.retry_after_sec = q->retry_after_sec;
        resp.body = q->body ?: "";
        resp.body_len = q->body_len;

        /* Off the multi handle before the callback, which may start new requests. */
        (void) curl_multi_remove_handle(q->http->multi, q->easy);
        if (q->on_done)
                q->on_done(q, &resp, q->userdata);
        request_unlink_free(q);
}

static void http_check_done(KubeHttp *h) {
        CURLMsg *msg;
        int left;

        while ((msg = curl_multi_info_read(h->multi, &left))) {
                KubeRequest *q = NULL;

                if (msg->msg != CURLMSG_DONE)
                        continue;
                (void) curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &q);
                if (q)
                        request_finish(q, msg->data.result);
        }
}

static int http_socket_action(KubeHttp *h, curl_socket_t fd, int what) {
        int running;
        CURLMcode c;

        c = curl_multi_socket_action(h->multi, fd, what, &running);
        if (c != CURLM_OK)
                log_debug("curl_multi_socket_action() failed: %s", curl_multi_strerror(c));
        http_check_done(h);
        return c == CURLM_OK ? 0 : -EIO;
}

static size_t on_header(char *ptr, size_t size, size_t nmemb, void *userdata) {
        KubeRequest *q = userdata;
        size_t n = size * nmemb;
        long status = 0;

        /* Retry-After in seconds (429 and 503 carry it; the HTTP-date form is ignored). */
        if (n > 12 && strncasecmp(ptr, "retry-after:", 12) == 0) {
                char v[16] = {};
                size_t k = 0;
                uint32_t sec;

                for (size_t i = 12; i < n && k < sizeof(v) - 1; i++)
                        if (ptr[i] >= '0' && ptr[i] <= '9')
                                v[k++] = ptr[i];
                        else if (!strchr(" \t\r\n", ptr[i])) {
                                k = 0;
                                break;
                        }
                if (k > 0 && safe_atou32(v, &sec) >= 0)
                        q->retry_after_sec = MIN(sec, 600u);
        }
        /* The blank line ends a header block; 1xx blocks are followed by another. */
        if (q->on_headers && ((n == 2 && ptr[0] == '\r' && ptr[1] == '\n') || (n == 1 && ptr[0] == '\n'))) {
                (void) curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &status);
                if (status >= 200)
                        q->on_headers(q, status, q->userdata);
        }
        return n;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *userdata) {
        KubeRequest *q = userdata;
        size_t n = size * nmemb;
        long status = 0;
        int r;

        if (n == 0)
                return 0;
        (void) curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &status);
        if (q->stream && status == 200 && q->on_data) {
                r = q->on_data(q, ptr, n, q->userdata);
                if (r < 0) {
                        q->error = r;
                        return 0;       /* CURLE_WRITE_ERROR; q->error says why */
                }
                return n;
        }
        if (n > q->max_body || q->body_len > q->max_body - n) {
                q->error = -EMSGSIZE;
                return 0;
        }
        if (q->body_len + n + 1 > q->body_allocated) {
                size_t a = MAX(q->body_allocated * 2, q->body_len + n + 1);
                char *b;

                a = MIN(a, q->max_body + 1);
                b = realloc(q->body, a);
                if (!b) {
                        q->error = -ENOMEM;
                        return 0;
                }
                q->body = b;
                q->body_allocated = a;
        }
        memcpy(q->body + q->body_len, ptr, n);
        q->body_len += n;
        q->body[q->body_len] = '\0';
        return n;
}

int kube_http_new(sd_event *event, KubeHttp **ret) {
        KubeHttp *h;
        static bool global_done = false;

        if (!global_done) {
                if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
                        return -EIO;
                global_done = true;
        }
        h = calloc(1, sizeof(KubeHttp));
        if (!h)
                return -ENOMEM;
        h->event = sd_event_ref(event);
        h->multi = curl_multi_init();
        if (!h->multi) {
                kube_http_free(h);
                return -ENOMEM;
        }
        (void) curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
        (void) curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
        (void) curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
        (void) curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
        (void) curl_multi_setopt(h->multi, CURLMOPT_PIPELINING, (long) CURLPIPE_MULTIPLEX);
        *ret = h;
        return 0;
}

KubeHttp *kube_http_free(KubeHttp *h) {
        if (!h)
                return NULL;
        while (h->requests)
                request_unlink_free(h->requests);
        if (h->multi)
                curl_multi_cleanup(h->multi);   /* removes its sockets: on_curl_socket */
        sd_event_source_disable_unref(h->timer);
        sd_event_unref(h->event);
        free(h);
        return NULL;
}

void kube_http_set_creds(KubeHttp *h, const KubeCreds *c) {
        h->creds = c;
}

static int set_blob(CURL *e, CURLoption opt, const char *data, size_t len) {
        struct curl_blob b = { .data = (void *) data, .len = len, .flags = CURL_BLOB_COPY };

        return curl_easy_setopt(e, opt, &b) == CURLE_OK ? 0 : -EIO;
}

#define SETOPT(e, o, v)                                                 \
        do {                                                            \
                if (curl_easy_setopt((e), (o), (v)) != CURLE_OK)        \
                        return -EIO;                                    \
        } while (0)

static int request_setup(KubeRequest *q, const KubeCreds *c, const KubeRequestParams *p) {
        CURL *e = q->easy;
        _cleanup_free_ char *auth = NULL;
        struct curl_slist *l;

        SETOPT(e, CURLOPT_URL, q->url);
        SETOPT(e, CURLOPT_PRIVATE, q);
        SETOPT(e, CURLOPT_ERRORBUFFER, q->error_text);
        SETOPT(e, CURLOPT_NOSIGNAL, 1L);
        SETOPT(e, CURLOPT_PROTOCOLS_STR, "https");
        SETOPT(e, CURLOPT_REDIR_PROTOCOLS_STR, "https");
        SETOPT(e, CURLOPT_FOLLOWLOCATION, 0L);
        SETOPT(e, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_2TLS);
        SETOPT(e, CURLOPT_PIPEWAIT, 1L);
        SETOPT(e, CURLOPT_SSL_VERIFYPEER, 1L);
        SETOPT(e, CURLOPT_SSL_VERIFYHOST, 2L);
        SETOPT(e, CURLOPT_USERAGENT, "kgpu-clusterd/" KGPU_VERSION);
        SETOPT(e, CURLOPT_WRITEFUNCTION, on_write);
        SETOPT(e, CURLOPT_WRITEDATA, q);
        SETOPT(e, CURLOPT_HEADERFUNCTION, on_header);
        SETOPT(e, CURLOPT_HEADERDATA, q);
        SETOPT(e, CURLOPT_CONNECTTIMEOUT, (long) (p->connect_timeout_sec ?: 10));
        if (p->timeout_sec > 0)
                SETOPT(e, CURLOPT_TIMEOUT, (long) p->timeout_sec);
        if (p->low_speed_time_sec > 0) {
                SETOPT(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
                SETOPT(e, CURLOPT_LOW_SPEED_TIME, (long) p->low_speed_time_sec);
        }
        /* TCP keepalive notices a peer that vanished without a word. */
        SETOPT(e, CURLOPT_TCP_KEEPALIVE, 1L);

        if (c->ca_data) {
                if (set_blob(e, CURLOPT_CAINFO_BLOB, c->ca_data, c->ca_len) < 0)
                        return -EIO;
        } else if (c->ca_file)
                SETOPT(e, CURLOPT_CAINFO, c->ca_file);
        if (c->cert_data || c->cert_file) {
                SETOPT(e, CURLOPT_SSLCERTTYPE, "PEM");
                SETOPT(e, CURLOPT_SSLKEYTYPE, "PEM");
                if (c->cert_data) {
                        if (set_blob(e, CURLOPT_SSLCERT_BLOB, c->cert_data, c->cert_len) < 0)
                                return -EIO;
                } else
                        SETOPT(e, CURLOPT_SSLCERT, c->cert_file);
                if (c->key_data) {
                        if (set_blob(e, CURLOPT_SSLKEY_BLOB, c->key_data, c->key_len) < 0)
                                return -EIO;
                } else
                        SETOPT(e, CURLOPT_SSLKEY, c->key_file);
        }

        l = curl_slist_append(NULL, "Accept: application/json");
        if (!l)
                return -ENOMEM;
        q->headers = l;
        if (p->token) {
                if (asprintf(&auth, "Authorization: Bearer %s", p->token) < 0)
                        return -ENOMEM;
                l = curl_slist_append(q->headers, auth);
                explicit_bzero(auth, strlen(auth));
                if (!l)
                        return -ENOMEM;
                q->headers = l;
        }
        SETOPT(e, CURLOPT_HTTPHEADER, q->headers);
        return 0;
}

int kube_http_start(KubeHttp *h, const KubeRequestParams *p, KubeRequest **ret) {
        KubeRequest *q;
        int r;

        if (!h->creds)
                return -ENOTCONN;
        q = calloc(1, sizeof(KubeRequest));
        if (!q)
                return -ENOMEM;
        q->http = h;
        q->next = h->requests;
        if (h->requests)
                h->requests->prev = q;
        h->requests = q;
        q->stream = p->stream;
        q->max_body = p->max_body;
        q->on_data = p->on_data;
        q->on_done = p->on_done;
        q->on_headers = p->on_headers;
        q->userdata = p->userdata;
        if (asprintf(&q->url, "%s%s", h->creds->server, p->path) < 0) {
                q->url = NULL;
                request_unlink_free(q);
                return -ENOMEM;
        }
        q->easy = curl_easy_init();
        if (!q->easy) {
                request_unlink_free(q);
                return -ENOMEM;
        }
        r = request_setup(q, h->creds, p);
        if (r < 0) {
                request_unlink_free(q);
                return r;
        }
        if (curl_multi_add_handle(h->multi, q->easy) != CURLM_OK) {
                curl_easy_cleanup(q->easy);
                q->easy = NULL;
                request_unlink_free(q);
                return -EIO;
        }
        if (ret)
                *ret = q;
        return 0;
}
