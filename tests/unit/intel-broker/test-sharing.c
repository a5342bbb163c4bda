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
#include "daemons/broker/sharing.h"

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

static Suite *sharing_suite(void) {
        Suite *s = suite_create("sharing");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_sharing_limit);
        tcase_add_test(tc, test_sharing_superseded);
        tcase_add_test(tc, test_sharing_lowered_to_one);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(sharing_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
