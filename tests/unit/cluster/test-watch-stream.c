/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-watch-stream.c — newline framing of watch events under arbitrary chunking. */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/cluster/watch-stream.h"
#include "tests/unit/test-main.h"

typedef struct Lines {
        char *joined;                   /* every line, each followed by '|' */
        size_t n;
        int fail_at;                    /* return -EIO at this line (1-based), 0: never */
} Lines;

static int collect(const char *line, size_t len, void *userdata) {
        Lines *l = userdata;
        size_t old = l->joined ? strlen(l->joined) : 0;

        l->n++;
        if (l->fail_at > 0 && (int) l->n == l->fail_at)
                return -EIO;
        l->joined = realloc(l->joined, old + len + 2);
        memcpy(l->joined + old, line, len);
        l->joined[old + len] = '|';
        l->joined[old + len + 1] = '\0';
        return 0;
}

static const char input[] = "{\"type\":\"ADDED\"}\n\r\n{\"type\":\"MODIFIED\",\"x\":1}\n   \n{\"a\":2}\n{\"tail\":";

START_TEST(test_every_split) {
        /* Every way of cutting the input into three pieces gives the same lines. */
        size_t n = strlen(input);

        for (size_t i = 0; i <= n; i++)
                for (size_t j = i; j <= n; j++) {
                        WatchStream w;
                        Lines l = {};

                        watch_stream_init(&w, 64);
                        ck_assert_int_eq(watch_stream_feed(&w, input, i, collect, &l), 0);
                        ck_assert_int_eq(watch_stream_feed(&w, input + i, j - i, collect, &l), 0);
                        ck_assert_int_eq(watch_stream_feed(&w, input + j, n - j, collect, &l), 0);
                        ck_assert_str_eq(l.joined, "{\"type\":\"ADDED\"}|{\"type\":\"MODIFIED\",\"x\":1}|{\"a\":2}|");
                        ck_assert_uint_eq(l.n, 3);
                        ck_assert_uint_eq(watch_stream_pending(&w), strlen("{\"tail\":"));
                        watch_stream_done(&w);
                        free(l.joined);
                }
}
END_TEST

START_TEST(test_byte_by_byte) {
        WatchStream w;
        Lines l = {};

        watch_stream_init(&w, 64);
        for (size_t i = 0; i < strlen(input); i++)
                ck_assert_int_eq(watch_stream_feed(&w, input + i, 1, collect, &l), 0);
        ck_assert_uint_eq(l.n, 3);
        watch_stream_done(&w);
        free(l.joined);
}
END_TEST

START_TEST(test_bound) {
        char big[100];
        WatchStream w;
        Lines l = {};

        memset(big, 'x', sizeof(big));
        /* Exactly the bound passes, one more byte does not: held or in one chunk. */
        watch_stream_init(&w, 10);
        ck_assert_int_eq(watch_stream_feed(&w, big, 10, collect, &l), 0);
        ck_assert_int_eq(watch_stream_feed(&w, "\n", 1, collect, &l), 0);
        ck_assert_uint_eq(l.n, 1);
        ck_assert_int_eq(watch_stream_feed(&w, big, 6, collect, &l), 0);
        ck_assert_int_eq(watch_stream_feed(&w, big, 5, collect, &l), -EMSGSIZE);
        watch_stream_reset(&w);
        ck_assert_uint_eq(watch_stream_pending(&w), 0);
        ck_assert_int_eq(watch_stream_feed(&w, big, 11, collect, &l), -EMSGSIZE);
        watch_stream_reset(&w);
        memcpy(big + 11, "\n", 1);
        ck_assert_int_eq(watch_stream_feed(&w, big, 12, collect, &l), -EMSGSIZE);
        /* Nothing beyond the bound is ever held. */
        ck_assert(w.allocated <= 10);
        watch_stream_done(&w);
        free(l.joined);
}
END_TEST

START_TEST(test_callback_error) {
        WatchStream w;
        Lines l = { .fail_at = 2 };

        watch_stream_init(&w, 64);
        ck_assert_int_eq(watch_stream_feed(&w, "a\nb\nc\n", 6, collect, &l), -EIO);
        ck_assert_uint_eq(l.n, 2);
        ck_assert_str_eq(l.joined, "a|");
        watch_stream_done(&w);
        free(l.joined);
}
END_TEST

static Suite *watch_stream_suite(void) {
        Suite *s = suite_create("watch-stream");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_every_split);
        tcase_add_test(tc, test_byte_by_byte);
        tcase_add_test(tc, test_bound);
        tcase_add_test(tc, test_callback_error);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(watch_stream_suite)
