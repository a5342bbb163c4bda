/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kube-http.h — HTTPS requests to the API server: libcurl's multi interface on sd-event.
 *
 * Contract: one KubeHttp per process, no threads. Its sockets and its one timer are
 * sd-event sources (CURLMOPT_SOCKETFUNCTION, CURLMOPT_TIMERFUNCTION); requests run side
 * by side, multiplexed over one HTTP/2 connection when the server offers h2 by ALPN,
 * over HTTP/1.1 connections otherwise. Every request verifies the server's certificate
 * against the credentials' CA (the system's when none is given), presents the client
 * certificate and key when given, and sends the bearer token passed in its parameters;
 * only https:// is ever spoken, redirects are not followed.
 *
 * A request ends exactly once in on_done, called from the event loop (never from inside
 * libcurl), unless it was cancelled first; the KubeRequest is freed right after on_done
 * returns. on_done may start and cancel other requests. With `stream` set, the body of
 * a 200 answer goes to on_data as it arrives (a negative return aborts the request and
 * becomes KubeResponse.error); every other body is kept, up to max_body bytes (more is
 * -EMSGSIZE), and handed to on_done. KubeResponse.error is 0 when an HTTP answer came
 * whole (whatever its status), else a negative errno: -ETIMEDOUT (connect, total or
 * low-speed limit), -ECONNREFUSED, -EHOSTUNREACH, -EPROTO (TLS: the certificate, the
 * key, the handshake), -ECONNRESET (cut, incomplete answer), -EMSGSIZE, -EIO, or what
 * on_data returned; error_text then says what happened in words.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "common/cleanup.h"
#include "daemons/cluster/kubeconfig.h"

typedef struct KubeHttp KubeHttp;
typedef struct KubeRequest KubeRequest;

typedef struct KubeResponse {
        int error;
        const char *error_text;         /* "" when error is 0 */
        long status;                    /* HTTP status; 0 when no answer came */
        const char *body;               /* NUL-terminated; "" for a streamed 200 */
        size_t body_len;
        const char *http_version;       /* "HTTP/2", "HTTP/1.1", "" */
        uint32_t retry_after_sec;       /* a Retry-After header in seconds (at most 600), 0: none */
} KubeResponse;

typedef int (*KubeDataFunc)(KubeRequest *q, const void *data, size_t len, void *userdata);
typedef void (*KubeDoneFunc)(KubeRequest *q, const KubeResponse *response, void *userdata);
/* The answer's header block is complete (called from inside libcurl: start, cancel or
 * free no request here). */
typedef void (*KubeHeadersFunc)(KubeRequest *q, long status, void *userdata);

typedef struct KubeRequestParams {
        const char *path;               /* "/api/v1/pods?...", appended to the server */
        const char *token;              /* bearer token, NULL: none */
        bool stream;
        size_t max_body;
        uint64_t connect_timeout_sec;
        uint64_t timeout_sec;           /* the whole request; 0: no limit */
        uint64_t low_speed_time_sec;    /* abort when less than 1 byte/s that long; 0: off */
        KubeDataFunc on_data;
        KubeDoneFunc on_done;
        KubeHeadersFunc on_headers;     /* NULL: not told */
        void *userdata;
} KubeRequestParams;

int kube_http_new(sd_event *event, KubeHttp **ret);
/* Cancels every request (no callbacks) and frees everything. */
KubeHttp *kube_http_free(KubeHttp *h);
DEFINE_CLEANUP_FUNC(KubeHttp, kube_http_free);

/* The credentials for the requests started from now on (borrowed until the next call;
 * a running request holds copies of everything it took from them, since libcurl copies
 * its string and blob options, so they may be replaced and freed at any time). */
void kube_http_set_creds(KubeHttp *h, const KubeCreds *c);
int kube_http_start(KubeHttp *h, const KubeRequestParams *p, KubeRequest **ret);
/* Ends a request without calling on_done; not from inside its own on_data. NULL ok. */
void kube_request_cancel(KubeRequest *q);
