/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-watch-stream.c — libFuzzer target for the watch stream: framing
 * (daemons/cluster/watch-stream.c) and the event reader behind it, under arbitrary
 * chunking.
 *
 * Contract: the input's first byte seeds the chunk sizes, the rest is the response body.
 * It is fed once whole and once in chunks of 1..64 bytes; both feeds must give the same
 * lines (or both fail the same way: a line over the bound); every line is parsed and read
 * as a watch event into a pod store, as the reflector does. A crash, a leak, a sanitizer
 * report or a difference between the two feeds is a bug.
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "common/log.h"
#include "daemons/cluster/kube-json.h"
#include "daemons/cluster/pod-store.h"
#include "daemons/cluster/watch-stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LINE_MAX_FUZZ 4096

typedef struct Seen {
        uint64_t hash;
        size_t n;
        PodStore store;
} Seen;

static int on_line(const char *line, size_t len, void *userdata) {
        Seen *s = userdata;
        json_object *ev = NULL, *obj;
        const char *why, *rv;
        KubeWatchType t;

        if (len > LINE_MAX_FUZZ || memchr(line, '\n', len))
                abort();
        for (size_t i = 0; i < len; i++)
                s->hash = (s->hash ^ (uint8_t) line[i]) * 1099511628211ULL;
        s->hash = (s->hash ^ 0x100) * 1099511628211ULL;
        s->n++;
        if (kube_json_parse(line, len, &ev) < 0)
                return 0;
        if (kube_watch_event_read(ev, &t, &obj, &why) == 0 && kube_object_rv(obj, &rv, &why) == 0 &&
            t != KUBE_WATCH_BOOKMARK && t != KUBE_WATCH_ERROR)
                (void) pod_store_apply(&s->store, t, obj, &why);
        json_object_put(ev);
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Seen whole = { .hash = 14695981039346656037ULL }, chunked = { .hash = 14695981039346656037ULL };
        WatchStream w;
        unsigned seed;
        int r1, r2 = 0;
        size_t off;

        log_set_max_level(LOG_CRIT);
        if (size < 1)
                return 0;
        seed = data[0];
        data++;
        size--;

        watch_stream_init(&w, LINE_MAX_FUZZ);
        r1 = watch_stream_feed(&w, data, size, on_line, &whole);
        watch_stream_done(&w);

        watch_stream_init(&w, LINE_MAX_FUZZ);
        for (off = 0; off < size && r2 == 0;) {
                size_t n;

                seed = seed * 1103515245u + 12345u;
                n = 1 + (seed >> 16) % 64;
                if (n > size - off)
                        n = size - off;
                r2 = watch_stream_feed(&w, data + off, n, on_line, &chunked);
                off += n;
        }
        watch_stream_done(&w);

        if (r1 != r2 || whole.n != chunked.n || whole.hash != chunked.hash)
                abort();
        pod_store_done(&whole.store);
        pod_store_done(&chunked.store);
        return 0;
}
