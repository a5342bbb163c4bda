/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-reflector.c — the reflector's pure decisions: backoff, URLs, what follows a watch;
 * the node name check. */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/util.h"
#include "daemons/cluster/manager.h"
#include "daemons/cluster/reflector.h"
#include "tests/unit/test-main.h"

START_TEST(test_backoff) {
        /* client-go's numbers: 0.8 s doubling, capped at 30 s, jitter up to 1.0. */
        ck_assert_uint_eq(reflector_backoff_usec(0, 0.5), 0);
        ck_assert_uint_eq(reflector_backoff_usec(1, 0), 800000);
        ck_assert_uint_eq(reflector_backoff_usec(2, 0), 1600000);
        ck_assert_uint_eq(reflector_backoff_usec(3, 0.5), 3200000 + 1600000);
        ck_assert_uint_eq(reflector_backoff_usec(6, 0), 25600000);
        ck_assert_uint_eq(reflector_backoff_usec(7, 0), 30000000);
        ck_assert_uint_eq(reflector_backoff_usec(1000, 0), 30000000);
        ck_assert(reflector_backoff_usec(1000, 0.999) < 60000000);
        ck_assert(reflector_backoff_usec(1000, 0.999) > 59000000);
        /* A bad random number is no jitter, never a huge wait. */
        ck_assert_uint_eq(reflector_backoff_usec(1, 7.0), 800000);
        ck_assert_uint_eq(reflector_backoff_usec(1, -1.0), 800000);
}
END_TEST

START_TEST(test_urls) {
        _cleanup_free_ char *a = NULL, *b = NULL, *c = NULL;

        ck_assert_int_eq(reflector_url("/api/v1/nodes", "metadata.name=node-a.example", false, NULL, 0, &a), 0);
        ck_assert_str_eq(a, "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-a.example");
        ck_assert_int_eq(reflector_url("/api/v1/pods", "spec.nodeName=n1", true, "12345", 321, &b), 0);
        ck_assert_str_eq(b, "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&watch=1&resourceVersion=12345"
                            "&allowWatchBookmarks=true&timeoutSeconds=321");
        /* A resourceVersion is opaque, but never sent unescaped. */
        ck_assert_int_eq(reflector_url("/api/v1/pods", "spec.nodeName=n1", true, "1&x=2", 1, &c), -EINVAL);
        ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_after_watch) {
        /* Ended by the server after timeoutSeconds: watch again at once. */
        ck_assert_int_eq(reflector_after_watch(0, 200, false), REFLECTOR_NEXT_WATCH);
        /* ... but not in a tight loop. */
        ck_assert_int_eq(reflector_after_watch(0, 200, true), REFLECTOR_NEXT_BACKOFF_WATCH);
        /* 410 in both forms: a new List at once, backed off when it comes at once again. */
        ck_assert_int_eq(reflector_after_watch(0, 410, false), REFLECTOR_NEXT_RELIST);
        ck_assert_int_eq(reflector_after_watch(-ESTALE, 200, false), REFLECTOR_NEXT_RELIST);
        ck_assert_int_eq(reflector_after_watch(0, 410, true), REFLECTOR_NEXT_BACKOFF_RELIST);
        ck_assert_int_eq(reflector_after_watch(-ESTALE, 200, true), REFLECTOR_NEXT_BACKOFF_RELIST);
        /* Unreadable or oversized events: a change may be lost, a new List after a wait. */
        ck_assert_int_eq(reflector_after_watch(-EBADMSG, 200, false), REFLECTOR_NEXT_BACKOFF_RELIST);
        ck_assert_int_eq(reflector_after_watch(-EMSGSIZE, 200, false), REFLECTOR_NEXT_BACKOFF_RELIST);
        /* Auth, throttling, server errors, transport: back off, watch from where we were. */
        ck_assert_int_eq(reflector_after_watch(0, 401, false), REFLECTOR_NEXT_BACKOFF_WATCH);
        ck_assert_int_eq(reflector_after_watch(0, 403, false), REFLECTOR_NEXT_BACKOFF_WATCH);
        ck_assert_int_eq(reflector_after_watch(0, 429, false), REFLECTOR_NEXT_BACKOFF_WATCH);
        ck_assert_int_eq(reflector_after_watch(0, 503, false), REFLECTOR_NEXT_BACKOFF_WATCH);
        ck_assert_int_eq(reflector_after_watch(-ECONNRESET, 200, false), REFLECTOR_NEXT_BACKOFF_WATCH);
        ck_assert_int_eq(reflector_after_watch(-ETIMEDOUT, 0, false), REFLECTOR_NEXT_BACKOFF_WATCH);
        ck_assert_int_eq(reflector_after_watch(-EREMOTEIO, 200, false), REFLECTOR_NEXT_BACKOFF_WATCH);
}
END_TEST

START_TEST(test_node_names) {
        Config c = {};
        char *n = NULL;

        c.cluster_node_name = (char *) "worker-1.example.com";
        ck_assert_int_eq(manager_node_name(&c, &n), 0);
        ck_assert_str_eq(n, "worker-1.example.com");
        free(n);
        n = NULL;
        static const char *const bad[] = { "Worker", "-a", "a-", "a..b", "a.-b", "a b", "a/b", "a=b", "a,b", ".a" };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                c.cluster_node_name = (char *) bad[i];
                ck_assert_int_eq(manager_node_name(&c, &n), -EINVAL);
                ck_assert_ptr_null(n);
        }
        char long_name[300];
        memset(long_name, 'a', sizeof(long_name) - 1);
        long_name[sizeof(long_name) - 1] = '\0';
        c.cluster_node_name = long_name;
        ck_assert_int_eq(manager_node_name(&c, &n), -EINVAL);
        /* Unset: the host name, in lower case, checked the same way. */
        c.cluster_node_name = NULL;
        int r = manager_node_name(&c, &n);
        ck_assert(r == 0 || r == -EINVAL);
        if (r == 0)
                for (const char *p = n; *p; p++)
                        ck_assert(!(*p >= 'A' && *p <= 'Z'));
        free(n);
}
END_TEST

static Suite *reflector_suite(void) {
        Suite *s = suite_create("reflector");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_backoff);
        tcase_add_test(tc, test_urls);
        tcase_add_test(tc, test_after_watch);
        tcase_add_test(tc, test_node_names);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(reflector_suite)
