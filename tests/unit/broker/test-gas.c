/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-gas.c — GPU Aware Scheduling's annotations (gas.c): the cards and tiles parsers,
 * the SetGasPods validation, and the choice of pod and container for an Allocate. */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/broker/gas.h"
#include "tests/unit/test-main.h"

static char *cards_join(char ***cards, size_t n) {
        /* "a,b|c" back from the parse, to compare in one assertion. */
        char *out = strdup("");

        for (size_t i = 0; i < n; i++) {
                char *l = strv_join(cards[i], ","), *t = NULL;

                ck_assert_ptr_nonnull(l);
                ck_assert_int_ge(asprintf(&t, "%s%s%s", out, i ? "|" : "", l), 0);
                free(out);
                free(l);
                out = t;
        }
        return out;
}

START_TEST(test_cards_valid) {
        static const struct {
                const char *in, *out;
                size_t n;
        } cases[] = {
                { "card0", "card0", 1 },
                { "card0,card1|card2", "card0,card1|card2", 2 },
                /* empty segments are skipped when counting containers (the Intel plugin's rule) */
                { "card1||card0", "card1|card0", 2 },
                { "|card3|", "card3", 1 },
                { "", "", 0 },
                { "|||", "", 0 },
                { "card10,card99999", "card10,card99999", 1 },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char ***cards = NULL;
                size_t n = 99;
                char *j;

                ck_assert_msg(gas_parse_cards(cases[i].in, &cards, &n) == 0, "%s", cases[i].in);
                ck_assert_uint_eq(n, cases[i].n);
                j = cards_join(cards, n);
                ck_assert_str_eq(j, cases[i].out);
                free(j);
                gas_cards_free(cards, n);
        }
}
END_TEST

START_TEST(test_cards_invalid) {
        static const char *const bad[] = {
                "card", "card0,", ",card0", "card0,,card1", "gpu0", "card01", "card-1", "card0 ", " card0",
                "card123456", "card0|card1,", "CARD0", "card0:gt0", "card0\n", "card+0",
        };

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char ***cards = NULL;
                size_t n = 0;

                ck_assert_msg(gas_parse_cards(bad[i], &cards, &n) == -EINVAL, "accepted '%s'", bad[i]);
        }
}
END_TEST

START_TEST(test_cards_bounds) {
        _cleanup_free_ char *s = malloc(GAS_STRING_MAX + 8);
        char ***cards = NULL;
        size_t n = 0;

        ck_assert_ptr_nonnull(s);
        /* Over the string bound. */
        memset(s, '|', GAS_STRING_MAX + 1);
        s[GAS_STRING_MAX + 1] = 0;
        ck_assert_int_eq(gas_parse_cards(s, &cards, &n), -EINVAL);
        /* More container segments than GAS_CARDS_PER_CONTAINER_MAX. */
        s[0] = 0;
        for (size_t i = 0; i <= GAS_CARDS_PER_CONTAINER_MAX; i++)
                strcat(s, i ? "|card1" : "card1");
        ck_assert_int_eq(gas_parse_cards(s, &cards, &n), -EINVAL);
}
END_TEST

START_TEST(test_tiles) {
        static const struct {
                const char *in;
                const char *masks[4];
        } cases[] = {
                /* the mask's device index is the card's position in the container's list */
                { "card0:gt0+gt1,card1:gt0|card2:gt1+gt2||card0:gt3",
                  { "0.0,0.1,1.0", "0.1,0.2", "0.3", NULL } },
                { "card3:gt1", { "0.1", NULL } },
                { "", { NULL } },
                { "||", { NULL } },
                { "|card1:gt10", { "0.10", NULL } },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char **masks = NULL;
                size_t n = 99;

                ck_assert_msg(gas_parse_tiles(cases[i].in, &masks, &n) == 0, "%s", cases[i].in);
                ck_assert_uint_eq(n, strv_length((char **) cases[i].masks));
                for (size_t j = 0; j < n; j++) {
                        ck_assert_str_eq(masks[j], cases[i].masks[j]);
                        free(masks[j]);
                }
                free(masks);
        }
}
END_TEST

START_TEST(test_tiles_invalid) {
        static const char *const bad[] = {
                "card0", "card0:", "card0:gt", "card0:gt0+", "card0:+gt0", "card0:gt0,", "card0:tile0",
                "card0:gt01", "card0:gt0++gt1", ":gt0", "card0:gt0:gt1", "card0:gt12345", "cardX:gt0",
        };

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char **masks = NULL;
                size_t n = 0;

                ck_assert_msg(gas_parse_tiles(bad[i], &masks, &n) == -EINVAL, "accepted '%s'", bad[i]);
        }
}
END_TEST

#define I915 GAS_RESOURCE_PREFIX "i915"

static GasLimit L1[] = { { (char *) I915, 1 }, { (char *) GAS_RESOURCE_PREFIX "millicores", 100 } };
static GasLimit L2[] = { { (char *) I915, 2 } };
static GasLimit L0[] = { { (char *) GAS_RESOURCE_PREFIX "millicores", 100 } };

static GasSet *set_of(const GasPodArgs *a, size_t n) {
        GasSet *s = NULL;
        char *why = NULL;

        ck_assert_int_eq(gas_set_new(a, n, &s, &why), 0);
        ck_assert_ptr_null(why);
        return s;
}

START_TEST(test_pick_oldest_and_containers) {
        /* pod "b" is older (gas-ts), has a container without i915 between its two i915 ones */
        GasContainer ca[] = { { L1, 2 } };
        GasContainer cb[] = { { L2, 1 }, { L0, 1 }, { L1, 2 } };
        GasPodArgs a[] = {
                { "uid-a", "ns", "a", "1700000000000000002", "card1", "card1:gt0", ca, 1 },
                { "uid-b", "ns", "b", "1700000000000000001", "card0,card1|card2", "", cb, 3 },
        };
        _cleanup_(gas_set_freep) GasSet *s = set_of(a, 2);
        const GasPod *p;
        size_t c;

        /* One device: "b"'s next i915 container asks for 2, so "a" (younger) is served. */
        ck_assert_int_eq(gas_pick(s, I915, 1, NULL, NULL, &p, &c), 0);
        ck_assert_str_eq(p->name, "a");
        ck_assert_uint_eq(c, 0);
        ck_assert_str_eq(p->masks[0], "0.0");
        gas_consume(s, p, c);
        ck_assert_int_eq(gas_pick(s, I915, 1, NULL, NULL, &p, &c), -ENOENT);

        ck_assert_int_eq(gas_pick(s, I915, 2, NULL, NULL, &p, &c), 0);
        ck_assert_str_eq(p->name, "b");
        ck_assert_uint_eq(c, 0);
        ck_assert_str_eq(p->cards[c][1], "card1");
        gas_consume(s, p, c);
        /* b's second i915 container (its third container) is next, with card2 */
        ck_assert_int_eq(gas_pick(s, I915, 1, NULL, NULL, &p, &c), 0);
        ck_assert_str_eq(p->name, "b");
        ck_assert_uint_eq(c, 1);
        ck_assert_str_eq(p->cards[c][0], "card2");
        gas_consume(s, p, c);
        ck_assert_int_eq(gas_pick(s, I915, 1, NULL, NULL, &p, &c), -ENOENT);
        /* Another resource: nothing. */
        ck_assert_int_eq(gas_pick(s, GAS_RESOURCE_PREFIX "xe", 1, NULL, NULL, &p, &c), -ENOENT);
}
END_TEST

static size_t served_one(const GasPod *p, const char *resource, void *userdata) {
        return streq(p->name, userdata) ? 1 : 0;
}

START_TEST(test_pick_served_and_carry) {
        GasContainer c2[] = { { L1, 2 }, { L1, 2 } };
        GasPodArgs a[] = {
                { "u1", "ns", "old", "1", "card0|card1", "", c2, 2 },
                { "u2", "ns", "new", "2", "card1", "", c2, 1 },
        };
        _cleanup_(gas_set_freep) GasSet *s = set_of(a, 2), *s2 = NULL;
        const GasPod *p;
        size_t c;

        /* PodResources says one container of "old" holds i915: its second one is next. */
        ck_assert_int_eq(gas_pick(s, I915, 1, served_one, (void *) "old", &p, &c), 0);
        ck_assert_str_eq(p->name, "old");
        ck_assert_uint_eq(c, 1);
        gas_consume(s, p, 1);
        ck_assert_int_eq(gas_pick(s, I915, 1, NULL, NULL, &p, &c), 0);
        ck_assert_str_eq(p->name, "new");

        /* A new set keeps what was served of the pods still in it. */
        s2 = set_of(a, 2);
        gas_set_carry(s2, s);
        ck_assert_uint_eq(s2->pods[0].consumed, 2);
        ck_assert_int_eq(gas_pick(s2, I915, 1, NULL, NULL, &p, &c), 0);
        ck_assert_str_eq(p->name, "new");
}
END_TEST

START_TEST(test_pick_ties_and_no_cards) {
        GasContainer c1[] = { { L1, 2 } };
        GasPodArgs a[] = {
                { "u-b", "ns", "b", "5", "card0", "", c1, 1 },
                { "u-a", "ns", "a", "5", "card1", "", c1, 1 },
                { "u-0", "ns", "none", "1", "", "", c1, 1 },     /* gas-ts but no cards yet */
        };
        _cleanup_(gas_set_freep) GasSet *s = set_of(a, 3);
        const GasPod *p;
        size_t c;

        ck_assert_int_eq(gas_pick(s, I915, 1, NULL, NULL, &p, &c), 0);
        ck_assert_str_eq(p->name, "a");
        ck_assert_int_eq(gas_pick(NULL, I915, 1, NULL, NULL, &p, &c), -ENOENT);
}
END_TEST

START_TEST(test_set_invalid) {
        GasContainer c1[] = { { L1, 2 } };
        GasLimit neg[] = { { (char *) I915, -1 } }, other[] = { { (char *) "nvidia.com/gpu", 1 } },
                 twice[] = { { (char *) I915, 1 }, { (char *) I915, 2 } };
        GasContainer cneg[] = { { neg, 1 } }, cother[] = { { other, 1 } }, ctwice[] = { { twice, 2 } };
        static GasContainer many[GAS_CONTAINERS_MAX + 1];
        const GasPodArgs bad[][2] = {
                { { "", "ns", "p", "1", "card0", "", c1, 1 } },
                { { "u", "", "p", "1", "card0", "", c1, 1 } },
                { { "u", "ns", "p", "", "card0", "", c1, 1 } },                 /* gas-ts empty */
                { { "u", "ns", "p", "1", "card0,", "", c1, 1 } },
                { { "u", "ns", "p", "1", "card0", "card0:gt", c1, 1 } },
                { { "u", "ns", "p\x01", "1", "card0", "", c1, 1 } },
                { { "u", "ns", "p", "1", "card0", "", cneg, 1 } },
                { { "u", "ns", "p", "1", "card0", "", cother, 1 } },
                { { "u", "ns", "p", "1", "card0", "", ctwice, 1 } },
                { { "u", "ns", "p", "1", "card0", "", many, GAS_CONTAINERS_MAX + 1 } },
                { { "u", "ns", "p", "1", "card0", "", c1, 1 }, { "u", "ns", "q", "1", "card1", "", c1, 1 } },
        };

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                GasSet *s = NULL;
                char *why = NULL;

                ck_assert_msg(gas_set_new(bad[i], bad[i][1].uid ? 2 : 1, &s, &why) == -EINVAL, "case %zu", i);
                ck_assert_ptr_null(s);
                ck_assert_ptr_nonnull(why);
                free(why);
        }
}
END_TEST

START_TEST(test_set_too_many_pods) {
        _cleanup_free_ GasPodArgs *a = calloc(GAS_PODS_MAX + 1, sizeof(GasPodArgs));
        GasSet *s = NULL;
        char *why = NULL;

        ck_assert_ptr_nonnull(a);
        ck_assert_int_eq(gas_set_new(a, GAS_PODS_MAX + 1, &s, &why), -EINVAL);
        ck_assert_ptr_nonnull(strstr(why, "4096"));
        free(why);
}
END_TEST

static Suite *gas_suite(void) {
        Suite *s = suite_create("gas");
        TCase *tc = tcase_create("annotations");

        tcase_add_test(tc, test_cards_valid);
        tcase_add_test(tc, test_cards_invalid);
        tcase_add_test(tc, test_cards_bounds);
        tcase_add_test(tc, test_tiles);
        tcase_add_test(tc, test_tiles_invalid);
        tcase_add_test(tc, test_pick_oldest_and_containers);
        tcase_add_test(tc, test_pick_served_and_carry);
        tcase_add_test(tc, test_pick_ties_and_no_cards);
        tcase_add_test(tc, test_set_invalid);
        tcase_add_test(tc, test_set_too_many_pods);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(gas_suite);
