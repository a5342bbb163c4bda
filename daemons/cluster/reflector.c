/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reflector.c — list-then-watch of one kind of object (see reflector.h).
 *
 * Contract: see reflector.h. One request at a time per reflector; its callbacks are the
 * only places the phase changes. The watch body is framed by watch-stream.c and each
 * line read by kube-json.c; on_data never touches libcurl, it returns an error instead
 * and on_watch_done decides what follows.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/cluster/reflector.h"

uint64_t reflector_backoff_usec(unsigned failures, double rand01) {
        uint64_t d = REFLECTOR_BACKOFF_BASE_USEC;

        if (failures == 0)
                return 0;
        for (unsigned i = 1; i < failures && d < REFLECTOR_BACKOFF_CAP_USEC; i++)
                d *= 2;
        d = MIN(d, REFLECTOR_BACKOFF_CAP_USEC);
        if (rand01 < 0 || rand01 >= 1)
                rand01 = 0;
        return d + (uint64_t) ((double) d * rand01);
}

int reflector_url(const char *path, const char *selector, bool watch, const char *rv, uint32_t timeout_sec,
                  char **ret) {
        _cleanup_free_ char *sel = NULL;
        char *s;
        size_t j = 0;

        /* The selector's characters are the name's ([a-z0-9.-]), its '=' and the field's. */
        sel = malloc(strlen(selector) * 3 + 1);
        if (!sel)
                return -ENOMEM;
        for (const char *p = selector; *p; p++) {
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    strchr(".-_", *p))
                        sel[j++] = *p;
                else {
                        snprintf(sel + j, 4, "%%%02X", (unsigned char) *p);
                        j += 3;
                }
        }
        sel[j] = '\0';
        if (!watch) {
                if (asprintf(&s, "%s?fieldSelector=%s", path, sel) < 0)
                        return -ENOMEM;
        } else {
                for (const char *p = rv; p && *p; p++)
                        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                              strchr(".-_", *p)))
                                return -EINVAL; /* never sent unescaped */
                if (asprintf(&s, "%s?fieldSelector=%s&watch=1&resourceVersion=%s&allowWatchBookmarks=true"
                             "&timeoutSeconds=%" PRIu32, path, sel, rv ?: "", timeout_sec) < 0)
                        return -ENOMEM;
        }
        *ret = s;
        return 0;
}

ReflectorNext reflector_after_watch(int error, long status, bool short_lived) {
        /* Too old: a new List at once, unless the server keeps saying so at once (a loop). */
        if (error == -ESTALE || (error >= 0 && status == 410))
                return short_lived ? REFLECTOR_NEXT_BACKOFF_RELIST : REFLECTOR_NEXT_RELIST;
        /* An event we could not read: we may have missed a change. */
        if (error == -EBADMSG || error == -EMSGSIZE)
                return REFLECTOR_NEXT_BACKOFF_RELIST;
        if (error < 0)
                return REFLECTOR_NEXT_BACKOFF_WATCH;
        if (status != 200)
                return REFLECTOR_NEXT_BACKOFF_WATCH;
        /* Ended by the server (timeoutSeconds): again at once, unless it keeps ending
         * watches before anything happened. */
        return short_lived ? REFLECTOR_NEXT_BACKOFF_WATCH : REFLECTOR_NEXT_WATCH;
}

static double random01(void) {
        uint32_t v = 0;

        if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v))
                v = (uint32_t) now_usec(CLOCK_MONOTONIC);
        return (double) v / 4294967296.0;
}

static uint64_t mono_now(Reflector *r) {
        uint64_t t = 0;

        (void) sd_event_now(r->event, CLOCK_MONOTONIC, &t);
        return t;
}

_printf_(2, 3)
static void reflector_fail(Reflector *r, const char *fmt, ...) {
        va_list ap;
        char *s = NULL;

        va_start(ap, fmt);
        if (vasprintf(&s, fmt, ap) < 0)
                s = NULL;
        va_end(ap);
        if (!s)
                return;
        log_warning("%s: %s", r->ops->kind, s);
        free(r->last_error);
        r->last_error = s;
        r->last_error_realtime = now_usec(CLOCK_REALTIME);
}

static void set_watching(Reflector *r, bool b) {
        r->watching = b;
}

static void request_list(Reflector *r);
static void request_watch(Reflector *r);

static int on_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Reflector *r = userdata;

        r->retry = sd_event_source_disable_unref(r->retry);
        if (r->relist || !r->synced)
                request_list(r);
        else
                request_watch(r);
        return 0;
}

static void schedule_at_least(Reflector *r, bool relist, bool backoff, uint32_t min_sec) {
        uint64_t now = mono_now(r), wait = 0;
        int k;

        r->relist = relist;
        if (backoff) {
                if (r->last_failure_usec > 0 && now - r->last_failure_usec > REFLECTOR_BACKOFF_RESET_USEC)
                        r->failures = 0;
                r->failures++;
                r->last_failure_usec = now;
                wait = reflector_backoff_usec(r->failures, random01());
        }
        /* The server's Retry-After, as client-go honours it (bounded by kube-http). */
        wait = MAX(wait, (uint64_t) min_sec * 1000000ULL);
        r->phase = REFLECTOR_WAITING;
        r->retry = sd_event_source_disable_unref(r->retry);
        k = sd_event_add_time(r->event, &r->retry, CLOCK_MONOTONIC, now + wait, 1000, on_retry, r);
        if (k < 0) {
                log_error_errno(k, "%s: failed to schedule the next request: %m", r->ops->kind);
                return;
        }
        if (wait > 0)
                log_info("%s: next %s in %.1f s.", r->ops->kind, relist ? "list" : "watch", (double) wait / 1e6);
        else
                log_debug("%s: next %s now.", r->ops->kind, relist ? "list" : "watch");
        if (r->ops->changed)
                r->ops->changed(r);
}

static void schedule(Reflector *r, bool relist, bool backoff) {
        schedule_at_least(r, relist, backoff, 0);
}

/* The Status in an error answer, in words. */
static void describe_status(const KubeResponse *resp, char *buf, size_t size) {
        _cleanup_(json_object_putp) json_object *o = NULL;
        KubeStatus st = {};

        if (resp->body_len > 0 && kube_json_parse(resp->body, resp->body_len, &o) >= 0 &&
            kube_status_read(o, &st, NULL) >= 0) {
                snprintf(buf, size, "%s%s%s", st.reason, !isempty(st.reason) && !isempty(st.message) ? ": " : "",
                         st.message);
                kube_status_done(&st);
        } else {
                /* Not a Status (the priority-and-fairness filter answers 429 in plain
                 * text): its first line, printable ASCII only, bounded. */
                size_t j = 0;

                for (size_t i = 0; i < resp->body_len && i < 200 && j + 1 < size; i++) {
                        char ch = resp->body[i];

                        if (ch == '\n' || ch == '\r')
                                break;
                        buf[j++] = ch >= 0x20 && ch < 0x7f ? ch : '?';
                }
                buf[j] = '\0';
                if (j == 0)
                        snprintf(buf, size, "no Status in the answer");
        }
}

static int start_request(Reflector *r, const char *url, bool watch, uint32_t timeout_sec);

static void on_list_done(KubeRequest *q, const KubeResponse *resp, void *userdata) {
        Reflector *r = userdata;
        _cleanup_(json_object_putp) json_object *o = NULL;
        const char *rv, *reason = "?";
        json_object *items;
        char text[512];
        int k;

        r->request = NULL;
        if (resp->error < 0) {
                reflector_fail(r, "list failed: %s", resp->error_text);
                return schedule(r, true, true);
        }
        if (resp->status != 200) {
                describe_status(resp, text, sizeof(text));
                reflector_fail(r, "list failed: HTTP %ld (%s)%s", resp->status, text,
                               resp->status == 401 || resp->status == 403 ?
                               "; the credentials are read again before the next try" : "");
                return schedule_at_least(r, true, true, resp->retry_after_sec);
        }
        k = kube_json_parse(resp->body, resp->body_len, &o);
        if (k < 0) {
                reflector_fail(r, "list failed: the answer is not JSON (%zu bytes)", resp->body_len);
                return schedule(r, true, true);
        }
        k = kube_list_read(o, &rv, &items, &reason);
        if (k >= 0)
                k = r->ops->replace(r, items, &reason);
        if (k < 0) {
                reflector_fail(r, "list failed: malformed List: %s", reason);
                return schedule(r, true, true);
        }
        k = free_and_strdup(&r->rv, rv);
        if (k < 0) {
                log_oom();
                return schedule(r, true, true);
        }
        r->synced = true;
        r->failures = 0;
        log_info("%s: listed %zu, at resourceVersion %s (%s).", r->ops->kind,
                 items ? json_object_array_length(items) : 0, r->rv, resp->http_version);
        request_watch(r);
}

static void request_list(Reflector *r) {
        _cleanup_free_ char *url = NULL;
        int k;

        k = reflector_url(r->path, r->selector, false, NULL, 0, &url);
        if (k >= 0)
                k = start_request(r, url, false, 0);
        if (k < 0 && k != -EKEYREJECTED) {
                reflector_fail(r, "cannot start a list: %s", strerror(-k));
                return schedule(r, true, true);
        }
        if (k >= 0) {
                r->phase = REFLECTOR_LISTING;
                r->lists++;
                if (r->ops->changed)
                        r->ops->changed(r);
        }
}

static int on_watch_line(const char *line, size_t len, void *userdata) {
        Reflector *r = userdata;
        _cleanup_(json_object_putp) json_object *ev = NULL;
        const char *reason = "?", *rv;
        json_object *obj;
        KubeWatchType type;
        int k;

        k = kube_json_parse(line, len, &ev);
        if (k < 0) {
                (void) free_and_strdup(&r->abort_reason, "a watch event is not JSON");
                return -EBADMSG;
        }
        k = kube_watch_event_read(ev, &type, &obj, &reason);
        if (k < 0)
                goto bad;
        if (type == KUBE_WATCH_ERROR) {
                KubeStatus st = {};
                _cleanup_free_ char *s = NULL;

                k = kube_status_read(obj, &st, &reason);
                if (k < 0)
                        goto bad;
                if (asprintf(&s, "ERROR event: %d %s%s%s", st.code, st.reason,
                             !isempty(st.reason) && !isempty(st.message) ? ": " : "", st.message) < 0)
                        s = NULL;
                kube_status_done(&st);
                free(r->abort_reason);
                r->abort_reason = TAKE_PTR(s);
                /* 410: the resourceVersion is too old, only a new List helps. */
                return st.code == 410 ? -ESTALE : -EREMOTEIO;
        }
        k = kube_object_rv(obj, &rv, &reason);
        if (k < 0)
                goto bad;
        if (type != KUBE_WATCH_BOOKMARK) {
                k = r->ops->apply(r, type, obj, &reason);
                if (k == -ENOMEM)
                        return k;
                if (k < 0)
                        goto bad;
        }
        k = free_and_strdup(&r->rv, rv);
        if (k < 0)
                return k;
        r->watch_events++;
        r->failures = 0;        /* the server answers sensibly again */
        log_debug("%s: %s at resourceVersion %s.", r->ops->kind, kube_watch_type_to_string(type), rv);
        if (r->ops->changed)
                r->ops->changed(r);
        return 0;
bad:
        {
                _cleanup_free_ char *s = NULL;

                if (asprintf(&s, "malformed watch event: %s", reason) >= 0) {
                        free(r->abort_reason);
                        r->abort_reason = TAKE_PTR(s);
                }
        }
        return -EBADMSG;
}

static int on_watch_data(KubeRequest *q, const void *data, size_t len, void *userdata) {
        Reflector *r = userdata;
        int k;

        k = watch_stream_feed(&r->stream, data, len, on_watch_line, r);
        if (k == -EMSGSIZE)
                (void) free_and_strdup(&r->abort_reason, "a watch event is larger than the bound");
        return k;
}

static void on_watch_headers(KubeRequest *q, long status, void *userdata) {
        Reflector *r = userdata;

        if (status != 200)
                return;
        set_watching(r, true);
        /* A watch that opens ends the run of failures as far as the user sees it. */
        if (r->ops->changed)
                r->ops->changed(r);
}

static void on_watch_done(KubeRequest *q, const KubeResponse *resp, void *userdata) {
        Reflector *r = userdata;
        _cleanup_free_ char *reason = TAKE_PTR(r->abort_reason);
        bool short_lived = mono_now(r) - r->watch_started_usec < 1000 * 1000ULL && r->watch_events == 0;
        ReflectorNext next;
        char text[512];

        r->request = NULL;
        set_watching(r, false);
        next = reflector_after_watch(resp->error, resp->status, short_lived);

        if (resp->error == -ESTALE)
                log_info("%s: watch expired (%s), listing again.", r->ops->kind, reason ?: "410");
        else if (resp->error < 0)
                reflector_fail(r, "watch failed: %s", reason ?: resp->error_text);
        else if (resp->status != 200) {
                describe_status(resp, text, sizeof(text));
                if (resp->status == 410)
                        log_info("%s: watch expired (HTTP 410: %s), listing again.", r->ops->kind, text);
                else
                        reflector_fail(r, "watch failed: HTTP %ld (%s)%s", resp->status, text,
                                       resp->status == 401 || resp->status == 403 ?
                                       "; the credentials are read again before the next try" : "");
        } else if (short_lived)
                reflector_fail(r, "watch ended by the server at once, without an event");
        else
                log_debug("%s: watch ended by the server, watching again.", r->ops->kind);

        switch (next) {
        case REFLECTOR_NEXT_WATCH:
                r->failures = 0;
                request_watch(r);
                break;
        case REFLECTOR_NEXT_RELIST:
                schedule(r, true, false);
                break;
        case REFLECTOR_NEXT_BACKOFF_WATCH:
                schedule_at_least(r, false, true, resp->error < 0 ? 0 : resp->retry_after_sec);
                break;
        case REFLECTOR_NEXT_BACKOFF_RELIST:
                schedule(r, true, true);
                break;
        }
}

static void request_watch(Reflector *r) {
        _cleanup_free_ char *url = NULL;
        uint32_t timeout = r->min_watch_timeout_sec + (uint32_t) (random01() * r->min_watch_timeout_sec);
        int k;

        k = reflector_url(r->path, r->selector, true, r->rv, timeout, &url);
        if (k == -EINVAL) {
                reflector_fail(r, "resourceVersion '%s' cannot be sent, listing again", r->rv);
                return schedule(r, true, true);
        }
        watch_stream_reset(&r->stream);
        r->watch_events = 0;
        r->watch_started_usec = mono_now(r);
        if (k >= 0)
                k = start_request(r, url, true, timeout);
        if (k < 0 && k != -EKEYREJECTED) {
                reflector_fail(r, "cannot start a watch: %s", strerror(-k));
                return schedule(r, false, true);
        }
        if (k >= 0) {
                r->phase = REFLECTOR_WATCHING;
                r->watches++;
                if (r->ops->changed)
                        r->ops->changed(r);
        }
}

/* -EKEYREJECTED: no token now (logged, retried after a backoff). */
static int start_request(Reflector *r, const char *url, bool watch, uint32_t timeout_sec) {
        _cleanup_free_ char *token = NULL, *error = NULL;
        KubeRequestParams p = {
                .path = url,
                .stream = watch,
                .max_body = watch ? REFLECTOR_ERROR_BODY_MAX : REFLECTOR_LIST_MAX,
                .connect_timeout_sec = r->request_timeout_sec,
                /* A watch ends at timeoutSeconds on the server; one that does not, or
                 * that goes silent (not even a bookmark) for that long, is dead. */
                .timeout_sec = watch ? timeout_sec + r->request_timeout_sec : r->request_timeout_sec,
                .low_speed_time_sec = watch ? timeout_sec : 0,
                .on_data = watch ? on_watch_data : NULL,
                .on_headers = watch ? on_watch_headers : NULL,
                .on_done = watch ? on_watch_done : on_list_done,
                .userdata = r,
        };
        int k;

        if (r->ops->token) {
                k = r->ops->token(r, &token, &error);
                if (k < 0) {
                        reflector_fail(r, "no credentials: %s", error ?: strerror(-k));
                        schedule(r, watch ? false : true, true);
                        return -EKEYREJECTED;
                }
        }
        p.token = token;
        k = kube_http_start(r->http, &p, &r->request);
        if (token)
                explicit_bzero(token, strlen(token));
        return k;
}

int reflector_init(Reflector *r, const ReflectorOps *ops, void *userdata, sd_event *event, KubeHttp *http,
                   const char *path, const char *selector, uint32_t request_timeout_sec,
                   uint32_t min_watch_timeout_sec) {
        *r = (Reflector) {
                .ops = ops,
                .userdata = userdata,
                .event = event,
                .http = http,
                .request_timeout_sec = request_timeout_sec ?: 30,
                .min_watch_timeout_sec = min_watch_timeout_sec ?: 300,
        };
        watch_stream_init(&r->stream, REFLECTOR_EVENT_MAX);
        r->path = strdup(path);
        r->selector = strdup(selector);
        if (!r->path || !r->selector)
                return -ENOMEM;
        return 0;
}

void reflector_stop(Reflector *r) {
        kube_request_cancel(r->request);
        r->request = NULL;
        r->retry = sd_event_source_disable_unref(r->retry);
        r->watching = false;
        r->phase = REFLECTOR_STOPPED;
}

void reflector_done(Reflector *r) {
        reflector_stop(r);
        watch_stream_done(&r->stream);
        free(r->path);
        free(r->selector);
        free(r->rv);
        free(r->abort_reason);
        free(r->last_error);
        *r = (Reflector) {};
}

void reflector_start(Reflector *r) {
        reflector_stop(r);
        request_list(r);
}
