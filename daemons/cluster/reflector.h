/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reflector.h — list-then-watch of one kind of object, as client-go's Reflector does.
 *
 * Contract: reflector_start() lists the objects (a consistent read: no resourceVersion),
 * hands the items to ops->replace, then watches from the List's resourceVersion with
 * allowWatchBookmarks=true and a timeoutSeconds drawn at random in [min, 2*min), min
 * being Config.cluster_min_watch_timeout_sec (client-go: 5 minutes). Each event goes to
 * ops->apply; every event and bookmark moves the resourceVersion on. A watch the server
 * ends normally is opened again at once from the last resourceVersion. 410 Gone (as HTTP
 * status or as an ERROR event carrying a Status with code 410) makes it list again at
 * once (after a backoff when the watch brought nothing before it, so a server that
 * always says 410 is not hammered); a malformed event and an event over
 * REFLECTOR_EVENT_MAX bytes make it list again after a backoff; everything else that goes
 * wrong (401/403 after which the token is read again, 429, 5xx, a refused, timed out, cut
 * or slow connection, a malformed List) is retried after an exponential backoff with
 * jitter, as client-go's: 0.8 s doubling up to 30 s, then uniformly up to twice that;
 * back to 0.8 s after a List is applied or a watch delivers an event or a bookmark (and,
 * as client-go, after 2 minutes without a failure), and never shorter than the
 * answer's Retry-After (429 and 503 from the server's priority and fairness filter). What the objects were stays in
 * force meanwhile: only a new List replaces it. Every failure is kept in last_error
 * (with its time) and reported to ops->changed, as is every change of `synced` and
 * `watching`.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>
#include <systemd/sd-event.h>

#include "daemons/cluster/kube-http.h"
#include "daemons/cluster/kube-json.h"
#include "daemons/cluster/watch-stream.h"

#define REFLECTOR_LIST_MAX (16u * 1024 * 1024)  /* bytes of one List answer */
#define REFLECTOR_EVENT_MAX (4u * 1024 * 1024)  /* bytes of one watch event */
#define REFLECTOR_ERROR_BODY_MAX (64u * 1024)   /* bytes of an error answer */
#define REFLECTOR_BACKOFF_BASE_USEC (800 * 1000ULL)
#define REFLECTOR_BACKOFF_CAP_USEC (30 * 1000 * 1000ULL)
#define REFLECTOR_BACKOFF_RESET_USEC (120 * 1000 * 1000ULL)

typedef struct Reflector Reflector;

typedef struct ReflectorOps {
        const char *kind;               /* "Node", "Pod": for messages */
        /* A List came: replace everything with items (an array, or NULL: none). */
        int (*replace)(Reflector *r, json_object *items, const char **ret_reason);
        /* One ADDED, MODIFIED or DELETED event's object. */
        int (*apply)(Reflector *r, KubeWatchType type, json_object *object, const char **ret_reason);
        /* synced, watching, last_error or a resourceVersion changed. */
        void (*changed)(Reflector *r);
        /* The bearer token for the next request (NULL: none); an error is logged by the
         * caller of this and retried after a backoff. */
        int (*token)(Reflector *r, char **ret, char **ret_error);
} ReflectorOps;

typedef enum ReflectorPhase {
        REFLECTOR_STOPPED,
        REFLECTOR_LISTING,
        REFLECTOR_WATCHING,
        REFLECTOR_WAITING,              /* a backoff */
} ReflectorPhase;

struct Reflector {
        const ReflectorOps *ops;
        void *userdata;
        sd_event *event;
        KubeHttp *http;
        char *path;                     /* "/api/v1/nodes" */
        char *selector;                 /* "metadata.name=NODE" (URL-safe) */
        uint32_t request_timeout_sec;
        uint32_t min_watch_timeout_sec;

        ReflectorPhase phase;
        KubeRequest *request;
        WatchStream stream;
        sd_event_source *retry;
        char *rv;                       /* the resourceVersion we are at */
        bool synced;                    /* a List has been applied */
        bool watching;                  /* a watch answered 200 and is open */
        bool relist;                    /* the next attempt lists */
        unsigned failures;              /* in a row, for the backoff */
        uint64_t last_failure_usec;     /* CLOCK_MONOTONIC */
        uint64_t watch_started_usec;
        unsigned watch_events;
        char *abort_reason;             /* why on_data stopped the watch */
        char *last_error;
        uint64_t last_error_realtime;   /* CLOCK_REALTIME µs */
        uint64_t lists, watches;        /* requests started, for tests and status */
};

int reflector_init(Reflector *r, const ReflectorOps *ops, void *userdata, sd_event *event, KubeHttp *http,
                   const char *path, const char *selector, uint32_t request_timeout_sec,
                   uint32_t min_watch_timeout_sec);
void reflector_done(Reflector *r);
void reflector_start(Reflector *r);     /* lists now */
void reflector_stop(Reflector *r);      /* keeps rv and synced */

/* Pure parts, for tests. */
/* The wait before attempt `failures` (1 = the first retry), rand01 in [0, 1). */
uint64_t reflector_backoff_usec(unsigned failures, double rand01);
/* "/api/v1/nodes?fieldSelector=...": with watch, also resourceVersion, allowWatchBookmarks
 * and timeoutSeconds. */
int reflector_url(const char *path, const char *selector, bool watch, const char *rv, uint32_t timeout_sec,
                  char **ret);

typedef enum ReflectorNext {
        REFLECTOR_NEXT_WATCH,           /* open a watch again at once */
        REFLECTOR_NEXT_RELIST,          /* list again at once */
        REFLECTOR_NEXT_BACKOFF_WATCH,   /* wait, then watch again */
        REFLECTOR_NEXT_BACKOFF_RELIST,  /* wait, then list again */
} ReflectorNext;
/* What follows the end of a watch: error is KubeResponse.error (or what on_data
 * returned: -ESTALE for a 410 ERROR event, -EBADMSG, -EMSGSIZE), status its HTTP status,
 * short whether it ended within a second without a single event or bookmark (ERROR
 * events do not count). */
ReflectorNext reflector_after_watch(int error, long status, bool short_lived);
