/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-policy.c — shared-GPU ids and the none/balanced/packed preferred-allocation policies. */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/broker/policy.h"
#include "tests/unit/test-main.h"

START_TEST(test_policy_split) {
        size_t l = 0;
        uint32_t s = 0;

        ck_assert_int_eq(policy_split_id("0000:03:00.0-0", &l, &s), 0);
        ck_assert_uint_eq(l, 12);
        ck_assert_uint_eq(s, 0);
        ck_assert_int_eq(policy_split_id("0000:03:00.0-15", &l, &s), 0);
        ck_assert_uint_eq(s, 15);
        ck_assert_int_eq(policy_split_id("a-b-999999999", &l, &s), 0);
        ck_assert_uint_eq(l, 3);
        ck_assert_uint_eq(s, 999999999);

        l = 7;
        s = 7;
        /* No share, leading zero, too long, not digits, empty GPU part: untouched. */
        ck_assert_int_eq(policy_split_id("0000:03:00.0", &l, &s), -EINVAL);
        ck_assert_int_eq(policy_split_id("gpu-01", &l, &s), -EINVAL);
        ck_assert_int_eq(policy_split_id("gpu-1234567890", &l, &s), -EINVAL);
        ck_assert_int_eq(policy_split_id("gpu-1a", &l, &s), -EINVAL);
        ck_assert_int_eq(policy_split_id("gpu-", &l, &s), -EINVAL);
        ck_assert_int_eq(policy_split_id("-1", &l, &s), -EINVAL);
        ck_assert_int_eq(policy_split_id(NULL, &l, &s), -EINVAL);
        ck_assert_uint_eq(l, 7);
        ck_assert_uint_eq(s, 7);
}
END_TEST

START_TEST(test_policy_cmp) {
        /* Numeric within a GPU, GPU part first, plain id before its shares. */
        ck_assert_int_lt(policy_id_cmp("x-2", "x-10"), 0);
        ck_assert_int_gt(policy_id_cmp("x-10", "x-2"), 0);
        ck_assert_int_lt(policy_id_cmp("x-15", "y-0"), 0);
        ck_assert_int_lt(policy_id_cmp("x", "x-0"), 0);
        ck_assert_int_eq(policy_id_cmp("x-3", "x-3"), 0);
        /* Different strings never compare equal (bsearch relies on it). */
        ck_assert_int_ne(policy_id_cmp("x-01", "x-1"), 0);
        ck_assert_int_ne(policy_id_cmp("x-", "x"), 0);
        ck_assert_int_lt(policy_id_cmp(NULL, "a"), 0);
        /* Plain ids order like strcmp. */
        ck_assert_int_lt(policy_id_cmp("0000:02:00.0", "0000:03:00.0"), 0);
        ck_assert_int_lt(policy_id_cmp("ab", "abc"), 0);
}
END_TEST

/* "<gpu>-<share>" candidates from a list of ids. */
static size_t cands(const char * const *ids, PolicyCandidate *c, char (*gpus)[32]) {
        size_t n = 0;

        for (; ids[n]; n++) {
                size_t l;
                uint32_t s;

                ck_assert_int_eq(policy_split_id(ids[n], &l, &s), 0);
                snprintf(gpus[n], 32, "%.*s", (int) l, ids[n]);
                c[n] = (PolicyCandidate) { .id = ids[n], .gpu = gpus[n], .share = s };
        }
        return n;
}

static char *pick(ConfigAllocationPolicy p, const char * const *ids, size_t need) {
        static char buf[512];
        PolicyCandidate c[64];
        char gpus[64][32];
        size_t idx[64], n = cands(ids, c, gpus);
        int k;

        k = policy_select(p, c, n, need, idx);
        ck_assert_int_ge(k, 0);
        ck_assert_uint_eq((size_t) k, MIN(n, need));
        buf[0] = 0;
        for (int i = 0; i < k; i++) {
                ck_assert_uint_lt(idx[i], n);
                strcat(buf, i ? "," : "");
                strcat(buf, ids[idx[i]]);
        }
        return buf;
}

START_TEST(test_policy_none) {
        /* One per distinct GPU first, in the given order, then the rest in order. */
        const char *ids[] = { "b-0", "b-1", "a-0", "a-1", "c-1", NULL };

        ck_assert_str_eq(pick(ALLOCATION_POLICY_NONE, ids, 1), "b-0");
        ck_assert_str_eq(pick(ALLOCATION_POLICY_NONE, ids, 3), "b-0,a-0,c-1");
        ck_assert_str_eq(pick(ALLOCATION_POLICY_NONE, ids, 4), "b-0,a-0,c-1,b-1");
        ck_assert_str_eq(pick(ALLOCATION_POLICY_NONE, ids, 9), "b-0,a-0,c-1,b-1,a-1");
}
END_TEST

START_TEST(test_policy_balanced) {
        /* GPU a has 2 free, b 3, c 1: most free first (b), ties to the lowest GPU id. */
        const char *ids[] = { "c-3", "a-3", "b-1", "a-2", "b-3", "b-2", NULL };

        ck_assert_str_eq(pick(ALLOCATION_POLICY_BALANCED, ids, 1), "b-1");
        ck_assert_str_eq(pick(ALLOCATION_POLICY_BALANCED, ids, 2), "b-1,a-2");
        ck_assert_str_eq(pick(ALLOCATION_POLICY_BALANCED, ids, 3), "b-1,a-2,b-2");
        ck_assert_str_eq(pick(ALLOCATION_POLICY_BALANCED, ids, 6), "b-1,a-2,b-2,a-3,b-3,c-3");

        /* Everything free on 4 GPUs x 4 shares: 4 picks land on 4 different GPUs. */
        const char *all[] = { "g0-0", "g0-1", "g0-2", "g0-3", "g1-0", "g1-1", "g1-2", "g1-3",
                              "g2-0", "g2-1", "g2-2", "g2-3", "g3-0", "g3-1", "g3-2", "g3-3", NULL };
        ck_assert_str_eq(pick(ALLOCATION_POLICY_BALANCED, all, 4), "g0-0,g1-0,g2-0,g3-0");
        ck_assert_str_eq(pick(ALLOCATION_POLICY_BALANCED, all, 5), "g0-0,g1-0,g2-0,g3-0,g0-1");
}
END_TEST

START_TEST(test_policy_packed) {
        /* Sorted by GPU, then share number (not string order: 2 before 10). */
        const char *ids[] = { "b-0", "a-10", "a-2", "b-1", "a-3", NULL };

        ck_assert_str_eq(pick(ALLOCATION_POLICY_PACKED, ids, 1), "a-2");
        ck_assert_str_eq(pick(ALLOCATION_POLICY_PACKED, ids, 3), "a-2,a-3,a-10");
        ck_assert_str_eq(pick(ALLOCATION_POLICY_PACKED, ids, 4), "a-2,a-3,a-10,b-0");

        const char *all[] = { "g1-0", "g1-1", "g0-0", "g0-1", "g0-2", "g0-3", NULL };
        ck_assert_str_eq(pick(ALLOCATION_POLICY_PACKED, all, 4), "g0-0,g0-1,g0-2,g0-3");
}
END_TEST

START_TEST(test_policy_edges) {
        PolicyCandidate c[1] = { { .id = "a-0", .gpu = "a" } };
        size_t idx[1] = { 99 };

        ck_assert_int_eq(policy_select(ALLOCATION_POLICY_BALANCED, c, 1, 0, idx), 0);
        ck_assert_int_eq(policy_select(ALLOCATION_POLICY_PACKED, c, 0, 3, idx), 0);
        ck_assert_uint_eq(idx[0], 99);
        ck_assert_int_eq(policy_select((ConfigAllocationPolicy) 42, c, 1, 1, idx), -EINVAL);
}
END_TEST

static Suite *policy_suite(void) {
        Suite *s = suite_create("policy");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_policy_split);
        tcase_add_test(tc, test_policy_cmp);
        tcase_add_test(tc, test_policy_none);
        tcase_add_test(tc, test_policy_balanced);
        tcase_add_test(tc, test_policy_packed);
        tcase_add_test(tc, test_policy_edges);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(policy_suite)
