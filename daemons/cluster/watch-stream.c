/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * watch-stream.c — newline framing of watch events (see watch-stream.h).
 *
 * Contract: see watch-stream.h. Complete lines inside one chunk are handed out from the
 * chunk itself; only an unfinished tail is copied.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/cluster/watch-stream.h"

void watch_stream_init(WatchStream *w, size_t max_line) {
        *w = (WatchStream) { .max_line = max_line };
}

void watch_stream_reset(WatchStream *w) {
        w->len = 0;
}

void watch_stream_done(WatchStream *w) {
        w->buf = mfree(w->buf);
        w->len = w->allocated = 0;
}

size_t watch_stream_pending(const WatchStream *w) {
        return w->len;
}

static bool blank(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!strchr(" \t\r", s[i]) || s[i] == '\0')
                        return false;
        return true;
}

static int emit(const char *s, size_t n, WatchLineFunc line, void *userdata) {
        if (blank(s, n))
                return 0;
        return line(s, n, userdata);
}

static int hold(WatchStream *w, const char *s, size_t n) {
        if (n == 0)
                return 0;
        if (w->len + n > w->max_line)
                return -EMSGSIZE;
        if (w->len + n > w->allocated) {
                size_t a = MAX(w->allocated * 2, w->len + n);
                char *b;

                a = MIN(MAX(a, (size_t) 4096), w->max_line);
                b = realloc(w->buf, a);
                if (!b)
                        return -ENOMEM;
                w->buf = b;
                w->allocated = a;
        }
        memcpy(w->buf + w->len, s, n);
        w->len += n;
        return 0;
}

int watch_stream_feed(WatchStream *w, const void *data, size_t len, WatchLineFunc line, void *userdata) {
        const char *p = data, *end = p + len;
        int r;

        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t) (end - p));

                if (!nl)
                        return hold(w, p, (size_t) (end - p));

                if (w->len > 0) {
                        size_t total;

                        r = hold(w, p, (size_t) (nl - p));
                        if (r < 0)
                                return r;
                        total = w->len;
                        w->len = 0;     /* before the callback, which may reset the stream */
                        r = emit(w->buf, total, line, userdata);
                        if (r < 0)
                                return r;
                } else {
                        if ((size_t) (nl - p) > w->max_line)
                                return -EMSGSIZE;
                        r = emit(p, (size_t) (nl - p), line, userdata);
                        if (r < 0)
                                return r;
                }
                p = nl + 1;
        }
        return 0;
}
