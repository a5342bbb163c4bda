/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-sharing.c — the sharing limit: holders per GPU, superseded and other-boot
 * allocations, lowered sharedDevNum, one count per container. */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/util.h"
#include "daemons/broker/intel.h"
#include "daemons/broker/sharing.h"
#include "tests/unit/test-main.h"

#define A "0000:03:00.0"
#define B "0000:04:00.0"

static Resources *make(uint32_t n) {
        Resources *r = NULL;
        GpuInfo a = { .id = (char *) A, .vendor = (char *) "intel", .driver = (char *) "i915",
                      .card_node = (char *) "/dev/dri/card0", .healthy = true, .numa_node = -1 };
        GpuInfo b = a;

        b.id = (char *) B;
        b.card_node = (char *) "/dev/dri/card1";
        ck_assert_int_eq(resources_new(true, &r), 0);
        ck_assert_int_eq(resources_set_intel_options(r, n, ALLOCATION_POLICY_NONE, true, BY_PATH_NONE, false), 0);
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/a", &a, NULL), 1);
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/b", &b, NULL), 1);
        return r;
}

/* Records from "id,id;id;..." (one allocation per ';', oldest first), boot "boot". */
typedef struct Recs {
        SharingRecord r[16];
        char **ids[16];
        size_t n;
} Recs;

static void recs_parse(Recs *x, const char *spec, const char *boot, const char *resource) {
        _cleanup_free_ char *copy = strdup(spec);
        char *save = NULL;

        for (char *t = strtok_r(copy, ";", &save); t; t = strtok_r(NULL, ";", &save)) {
                _cleanup_free_ char *one = strdup(t);
                char *s2 = NULL;

                x->ids[x->n] = calloc(1, sizeof(char *));
                for (char *i = strtok_r(one, ",", &s2); i; i = strtok_r(NULL, ",", &s2))
                        ck_assert_int_eq(strv_extend(&x->ids[x->n], i), 0);
                x->r[x->n] = (SharingRecord) { .resource = resource, .device_ids = x->ids[x->n], .boot_id = boot };
                x->n++;
        }
}

static void recs_done(Recs *x) {
        for (size_t i = 0; i < x->n; i++)
                strv_free(x->ids[i]);
}

/* Checks a call of containers "id,id|id" against records. */
static int check_call(Resources *r, Recs *x, const char *call, ResourceError *e) {
        _cleanup_free_ char *copy = strdup(call);
        char **reqs[8] = {};
        size_t n = 0;
        char *save = NULL;
        int k;

        for (char *t = strtok_r(copy, "|", &save); t; t = strtok_r(NULL, "|", &save)) {
                _cleanup_free_ char *one = strdup(t);
                char *s2 = NULL;

                reqs[n] = calloc(1, sizeof(char *));
                for (char *i = strtok_r(one, ",", &s2); i; i = strtok_r(NULL, ",", &s2))
                        ck_assert_int_eq(strv_extend(&reqs[n], i), 0);
                n++;
        }
        *e = (ResourceError) {};
        k = sharing_check(r, RESOURCE_INTEL_I915, "boot", x->r, x->n, reqs, n, e);
        for (size_t i = 0; i < n; i++)
                strv_free(reqs[i]);
        return k;
}

START_TEST(test_sharing_limit) {
        _cleanup_(resources_freep) Resources *r = make(2);
        Recs x = {};
        ResourceError e;

        /* Two live holders of A; asking A-0 again means its old holder is gone. */
        recs_parse(&x, A "-0;" A "-1", "boot", RESOURCE_INTEL_I915);
        ck_assert_int_eq(check_call(r, &x, A "-0", &e), 0);
        ck_assert_int_eq(check_call(r, &x, A "-1", &e), 0);
        ck_assert_int_eq(check_call(r, &x, A "-0|" A "-1", &e), 0);
        ck_assert_int_eq(check_call(r, &x, B "-0|" B "-1", &e), 0);
        recs_done(&x);

        /* A live holder of an id no longer advertised (sharedDevNum was 8) still counts. */
        x = (Recs) {};
        recs_parse(&x, A "-5;" A "-1", "boot", RESOURCE_INTEL_I915);
        ck_assert_int_eq(check_call(r, &x, A "-0", &e), -EBUSY);
        ck_assert_str_eq(e.name, KGPU_ERROR_EXHAUSTED);
        ck_assert_msg(strstr(e.message, "GPU " A) && strstr(e.message, "held by 3") &&
                      strstr(e.message, "at most 2"), "%s", e.message);
        /* ...but a container holding two shares of one GPU counts once. */
        recs_done(&x);
        x = (Recs) {};
        recs_parse(&x, A "-7", "boot", RESOURCE_INTEL_I915);
        ck_assert_int_eq(check_call(r, &x, A "-0," A "-1", &e), 0);
        ck_assert_int_eq(check_call(r, &x, A "-0|" A "-1", &e), -EBUSY);
        recs_done(&x);
}
END_TEST

START_TEST(test_sharing_superseded) {
        _cleanup_(resources_freep) Resources *r = make(2);
        Recs x = {};
        ResourceError e;

        /* A-0 went to a newer allocation, so the oldest one (A-0 + B-0) is gone: B has no
         * holder. On A: the newer hold (A-1's holder is replaced by the call),
         * so the call would be the third. */
        recs_parse(&x, A "-0," B "-0;" A "-0;" A "-1;" A "-9", "boot", RESOURCE_INTEL_I915);
        ck_assert_int_eq(check_call(r, &x, B "-1", &e), 0);
        ck_assert_int_eq(check_call(r, &x, A "-1", &e), -EBUSY);
        ck_assert_msg(strstr(e.message, "held by 3"), "%s", e.message);
        recs_done(&x);

        /* Other boots and other resources do not count; an unknown boot id does. */
        x = (Recs) {};
        recs_parse(&x, A "-5;" A "-6", "old-boot", RESOURCE_INTEL_I915);
        recs_parse(&x, A "-5;" A "-6", "boot", RESOURCE_INTEL_XE);
        ck_assert_int_eq(check_call(r, &x, A "-0|" A "-1", &e), 0);
        recs_parse(&x, A "-5", "", RESOURCE_INTEL_I915);
        ck_assert_int_eq(check_call(r, &x, A "-0|" A "-1", &e), -EBUSY);
        recs_done(&x);
}
END_TEST

START_TEST(test_sharing_lowered_to_one) {
        _cleanup_(resources_freep) Resources *r = make(1);
        Recs x = {};
        ResourceError e;

        /* sharedDevNum 1 now, plain ids; two holders from the N=2 days: nothing fits on A. */
        recs_parse(&x, A "-0;" A "-1", "boot", RESOURCE_INTEL_I915);
        ck_assert_int_eq(check_call(r, &x, A, &e), -EBUSY);
        ck_assert_msg(strstr(e.message, "at most 1"), "%s", e.message);
        ck_assert_int_eq(check_call(r, &x, B, &e), 0);
        recs_done(&x);

        /* Plain ids, N=1: re-allocating the same id is the kubelet's reuse, allowed. */
        x = (Recs) {};
        recs_parse(&x, A ";" A ";" B, "boot", RESOURCE_INTEL_I915);
        ck_assert_int_eq(check_call(r, &x, A, &e), 0);
        recs_done(&x);
}
END_TEST

/* The holder index (holders.c, what the broker uses) against the reference scan
 * (sharing_check) over random histories: allocations added and removed in any order,
 * of two resources and three boots, with whole-GPU ids, shares, shares no longer
 * advertised and ids of unknown GPUs; after every step random calls get the same
 * answer, word for word, from both. */
#define C "0000:05:00.0"

static const char *random_id(unsigned *seed) {
        static const char * const pool[] = {
                A, B, C, A "-0", A "-1", A "-2", A "-7", B "-0", B "-1", B "-2", C "-0", C "-1",
                "0000:99:00.0", "0000:99:00.0-1", "x-1", "-1",
        };

        return pool[rand_r(seed) % (sizeof(pool) / sizeof(pool[0]))];
}

static char **random_ids(unsigned *seed, size_t max) {
        char **l = calloc(1, sizeof(char *));
        size_t n = 1 + (size_t) rand_r(seed) % max;

        ck_assert_ptr_nonnull(l);
        for (size_t i = 0; i < n; i++) {
                const char *id = random_id(seed);

                if (!strv_contains(l, id))
                        ck_assert_int_eq(strv_extend(&l, id), 0);
        }
        return l;
}

START_TEST(test_sharing_index_matches_scan) {
        static const char * const boots[] = { "boot", "old", "" };
        static const char * const res[] = { RESOURCE_INTEL_I915, RESOURCE_INTEL_XE };
        unsigned seed = 12345;
        size_t compared = 0, refused = 0;

        for (int history = 0; history < 60; history++) {
                _cleanup_(resources_freep) Resources *r = make(1 + (uint32_t) (history % 3));
                _cleanup_(holders_freep) Holders *h = NULL;
                SharingRecord recs[64];
                char **owned[64];
                uint64_t rec_ids[64];
                size_t n = 0;
                uint64_t next = 1;
                GpuInfo c = { .id = (char *) C, .vendor = (char *) "intel", .driver = (char *) "i915",
                              .card_node = (char *) "/dev/dri/card2", .healthy = true, .numa_node = -1 };

                ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/c", &c, NULL), 1);
                ck_assert_int_eq(holders_new(history % 4 == 3 ? "" : "boot", &h), 0);
                for (int step = 0; step < 80; step++) {
                        if (n > 0 && (n == 64 || rand_r(&seed) % 4 == 0)) {
                                size_t k = (size_t) rand_r(&seed) % n;

                                ck_assert_int_eq(holders_remove(h, rec_ids[k]), 0);
                                strv_free(owned[k]);
                                memmove(recs + k, recs + k + 1, (n - k - 1) * sizeof(recs[0]));
                                memmove(owned + k, owned + k + 1, (n - k - 1) * sizeof(owned[0]));
                                memmove(rec_ids + k, rec_ids + k + 1, (n - k - 1) * sizeof(rec_ids[0]));
                                n--;
                        } else {
                                owned[n] = random_ids(&seed, 3);
                                recs[n] = (SharingRecord) { .resource = res[rand_r(&seed) % 4 == 0],
                                                            .device_ids = owned[n],
                                                            .boot_id = boots[rand_r(&seed) % 3] };
                                next += 1 + (uint64_t) (rand_r(&seed) % 3);
                                rec_ids[n] = next;
                                ck_assert_int_eq(holders_add(h, next, recs[n].resource, owned[n], recs[n].boot_id), 0);
                                n++;
                        }
                        ck_assert_uint_eq(holders_size(h), n);

                        for (int call = 0; call < 4; call++) {
                                char **reqs[3] = {};
                                size_t n_reqs = 1 + (size_t) rand_r(&seed) % 3;
                                ResourceError e1 = {}, e2 = {};
                                int k1, k2;

                                for (size_t i = 0; i < n_reqs; i++)
                                        reqs[i] = random_ids(&seed, 2);
                                k1 = sharing_check(r, RESOURCE_INTEL_I915, history % 4 == 3 ? "" : "boot",
                                                   recs, n, reqs, n_reqs, &e1);
                                k2 = sharing_check_index(h, r, RESOURCE_INTEL_I915, reqs, n_reqs, &e2);
                                ck_assert_msg(k1 == k2, "history %d step %d: scan %d (%s), index %d (%s)",
                                              history, step, k1, e1.message, k2, e2.message);
                                ck_assert_str_eq(e1.message, e2.message);
                                compared++;
                                refused += k1 < 0;
                                for (size_t i = 0; i < n_reqs; i++)
                                        strv_free(reqs[i]);
                        }
                }
                for (size_t i = 0; i < n; i++)
                        strv_free(owned[i]);
        }
        /* Both outcomes were exercised, many times. */
        ck_assert_uint_gt(refused, compared / 10);
        ck_assert_uint_lt(refused, compared - compared / 10);
}
END_TEST

/* A call replacing the holder of an id on another GPU: that holder is gone everywhere
 * (the kubelet handed its id out again), on every GPU it touched. */
START_TEST(test_sharing_superseded_elsewhere) {
        _cleanup_(resources_freep) Resources *r = make(1);
        Recs x = {};
        ResourceError e;

        /* The oldest (A-0 + B-0) lost B-0 to a newer allocation that is not on A. */
        recs_parse(&x, A "-0," B "-0;" B "-0", "boot", RESOURCE_INTEL_I915);
        ck_assert_int_eq(check_call(r, &x, A "-1", &e), 0);
        recs_done(&x);
}
END_TEST

static Suite *sharing_suite(void) {
        Suite *s = suite_create("sharing");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_sharing_limit);
        tcase_add_test(tc, test_sharing_superseded);
        tcase_add_test(tc, test_sharing_lowered_to_one);
        tcase_add_test(tc, test_sharing_superseded_elsewhere);
        tcase_add_test(tc, test_sharing_index_matches_scan);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(sharing_suite)
