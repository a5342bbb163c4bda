/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-gas.c — libFuzzer target for GPU Aware Scheduling's annotations (daemons/broker/gas.c):
 * the cards and tiles parsers and a SetGasPods set built from them.
 *
 * Input: up to 8 pods separated by '\n', each "ts\tcards\ttiles\tcounts" (counts: one
 * byte per container, its gpu.intel.com/i915 limit). Contract checked: a parse returns 0
 * or -EINVAL (nothing else, nothing allocated on failure); every card parsed is "card"
 * and 1..GAS_CARD_DIGITS_MAX digits; every mask item is "<i>.<t>" with i below the
 * number of cards of its segment; gas_set_new() either succeeds with *ret_error NULL or
 * fails with a message; gas_pick() returns a pod of the set whose chosen container has a
 * cards segment and requests the count asked for, and consuming never picks the same
 * container twice. Any crash, leak or sanitizer report aborts.
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/broker/gas.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PODS_MAX 8

static void check_cards(const char *s) {
        char ***cards = NULL;
        size_t n = 0;
        int r = gas_parse_cards(s, &cards, &n);

        if (r != 0 && r != -EINVAL)
                abort();
        if (r < 0) {
                if (cards)
                        abort();
                return;
        }
        for (size_t i = 0; i < n; i++) {
                if (strv_length(cards[i]) == 0)
                        abort();
                for (char **c = cards[i]; *c; c++) {
                        size_t d = strlen(*c) - 4;

                        if (strncmp(*c, "card", 4) != 0 || d == 0 || d > GAS_CARD_DIGITS_MAX ||
                            strspn(*c + 4, "0123456789") != d)
                                abort();
                }
        }
        gas_cards_free(cards, n);
}

static void check_tiles(const char *s) {
        char **masks = NULL;
        size_t n = 0;
        int r = gas_parse_tiles(s, &masks, &n);

        if (r != 0 && r != -EINVAL)
                abort();
        if (r < 0) {
                if (masks)
                        abort();
                return;
        }
        for (size_t i = 0; i < n; i++) {
                const char *p = masks[i];

                if (isempty(p))
                        abort();
                for (;;) {
                        size_t a = strspn(p, "0123456789"), b;

                        if (a == 0 || p[a] != '.')
                                abort();
                        b = strspn(p + a + 1, "0123456789");
                        if (b == 0 || b > GAS_TILE_DIGITS_MAX)
                                abort();
                        p += a + 1 + b;
                        if (*p == 0)
                                break;
                        if (*p != ',')
                                abort();
                        p++;
                }
                free(masks[i]);
        }
        free(masks);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const char *const uids[PODS_MAX] = { "u0", "u1", "u2", "u3", "u4", "u5", "u6", "u7" };
        GasPodArgs args[PODS_MAX] = {};
        GasContainer containers[PODS_MAX][16] = {};
        GasLimit limits[PODS_MAX][16] = {};
        char *text, *line, *save = NULL;
        GasSet *set = NULL;
        char *why = NULL;
        size_t n = 0;
        int r;

        if (size > 64 * 1024)
                return 0;
        text = strndup((const char *) data, size);
        if (!text)
                return 0;
        for (line = strtok_r(text, "\n", &save); line && n < PODS_MAX; line = strtok_r(NULL, "\n", &save)) {
                char *f[4] = { line, NULL, NULL, NULL };

                for (size_t i = 1; i < 4; i++) {
                        char *tab = f[i - 1] ? strchr(f[i - 1], '\t') : NULL;

                        if (tab) {
                                *tab = 0;
                                f[i] = tab + 1;
                        }
                }
                check_cards(f[1] ?: "");
                check_tiles(f[2] ?: "");
                args[n] = (GasPodArgs) {
                        .uid = uids[n], .namespace = "ns", .name = uids[n], .ts = f[0],
                        .cards = f[1] ?: "", .tiles = f[2] ?: "", .containers = containers[n],
                };
                for (const char *c = f[3]; c && *c && args[n].n_containers < 16; c++) {
                        size_t k = args[n].n_containers++;

                        limits[n][k] = (GasLimit) { .name = (char *) GAS_RESOURCE_PREFIX "i915",
                                                    .count = (int64_t) (*c % 8) - 1 };
                        containers[n][k] = (GasContainer) { .limits = &limits[n][k], .n_limits = 1 };
                }
                n++;
        }

        r = gas_set_new(args, n, &set, &why);
        if (r == 0) {
                if (why || !set || set->n_pods != n)
                        abort();
                for (size_t count = 1; count <= 6; count++)
                        for (unsigned guard = 0; guard < PODS_MAX * 16 + 1; guard++) {
                                const GasPod *p;
                                size_t c;

                                if (guard == PODS_MAX * 16)
                                        abort();        /* consuming must end */
                                if (gas_pick(set, GAS_RESOURCE_PREFIX "i915", count, NULL, NULL, &p, &c) < 0)
                                        break;
                                if (p < set->pods || p >= set->pods + set->n_pods || c >= p->n_cards ||
                                    c < p->consumed ||
                                    gas_pod_request(p, GAS_RESOURCE_PREFIX "i915", c) != (int64_t) count)
                                        abort();
                                gas_consume(set, p, c);
                        }
                gas_set_free(set);
        } else if (r != -EINVAL || set || !why)
                abort();
        free(why);
        free(text);
        return 0;
}
