/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * watch-stream.h — the framing of a watch response: one JSON event per line.
 *
 * The API server writes each watch event as one JSON object followed by "\n" (Go's
 * json.Encoder), over HTTP/1.1 chunks or HTTP/2 DATA frames that may cut anywhere.
 * watch_stream_feed() takes the bytes as they arrive and hands every complete line that
 * is not blank to `line` (without its "\n"), in order. A line longer than max_line
 * bytes is -EMSGSIZE at once (the bytes are not kept: a hostile server cannot make us
 * hold more than max_line). A negative return of `line` stops the feed and is returned.
 * After an error the stream must be reset before it is fed again.
 * watch_stream_pending() is how many bytes of an unfinished line are held.
 */
#pragma once

#include <stddef.h>

typedef struct WatchStream {
        char *buf;
        size_t len, allocated;
        size_t max_line;
} WatchStream;

typedef int (*WatchLineFunc)(const char *line, size_t len, void *userdata);

void watch_stream_init(WatchStream *w, size_t max_line);
void watch_stream_reset(WatchStream *w);        /* drops what is held, keeps max_line */
void watch_stream_done(WatchStream *w);
int watch_stream_feed(WatchStream *w, const void *data, size_t len, WatchLineFunc line, void *userdata);
size_t watch_stream_pending(const WatchStream *w);
