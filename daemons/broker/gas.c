/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gas.c — GPU Aware Scheduling's annotations: parsing, the pod set, the pick.
 * Contract: see gas.h.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/broker/gas.h"

/* "<prefix><digits>" at s[0..len), digits without leading zero, at most max of them. */
static bool numbered(const char *s, size_t len, const char *prefix, size_t max) {
        size_t pl = strlen(prefix), d;

        if (len <= pl || memcmp(s, prefix, pl) != 0)
                return false;
        d = len - pl;
        if (d > max || strspn(s + pl, "0123456789") < d)
                return false;
        return d == 1 || s[pl] != '0';
}

void gas_cards_free(char ***cards, size_t n) {
        for (size_t i = 0; i < n; i++)
                strv_free(cards[i]);
        free(cards);
}

/* Calls cb for each non-empty '|' segment of s. */
typedef int (*SegmentFunc)(const char *seg, size_t len, void *userdata);

static int for_segments(const char *s, SegmentFunc cb, void *userdata) {
        if (strlen(s) > GAS_STRING_MAX)
                return -EINVAL;
        for (;;) {
                size_t l = strcspn(s, "|");
                int k;

                if (l > 0) {
                        k = cb(s, l, userdata);
                        if (k < 0)
                                return k;
                }
                if (s[l] == 0)
                        return 0;
                s += l + 1;
        }
}

typedef struct CardsParse {
        char ***cards;
        size_t n;
} CardsParse;

static int cards_segment(const char *seg, size_t len, void *userdata) {
        CardsParse *c = userdata;
        _cleanup_strv_free_ char **l = NULL;
        size_t n = 0;
        char ***grown;

        if (c->n >= GAS_CARDS_PER_CONTAINER_MAX)
                return -EINVAL;
        for (size_t pos = 0;;) {
                size_t il = strcspn(seg + pos, ",|");
                char *item;
                int k;

                if (il > len - pos)
                        il = len - pos;
                if (!numbered(seg + pos, il, "card", GAS_CARD_DIGITS_MAX) || ++n > GAS_CARDS_PER_CONTAINER_MAX)
                        return -EINVAL;
                item = strndup(seg + pos, il);
                if (!item)
                        return -ENOMEM;
                k = strv_consume(&l, item);
                if (k < 0)
                        return k;
                pos += il;
                if (pos >= len)
                        break;
                pos++;          /* ',' */
                if (pos >= len)
                        return -EINVAL;         /* trailing ',' */
        }
        grown = reallocarray(c->cards, c->n + 1, sizeof(char **));
        if (!grown)
                return -ENOMEM;
        c->cards = grown;
        c->cards[c->n++] = TAKE_PTR(l);
        return 0;
}

int gas_parse_cards(const char *s, char ****ret, size_t *ret_n) {
        CardsParse c = {};
        int k;

        k = for_segments(s, cards_segment, &c);
        if (k < 0) {
                gas_cards_free(c.cards, c.n);
                return k;
        }
        *ret = c.cards;
        *ret_n = c.n;
        return 0;
}

typedef struct TilesParse {
        char **masks;
        size_t n;
} TilesParse;

/* "cardN:gtA+gtB" at item[0..len) → "<i>.A,<i>.B" appended to *out. */
static int tiles_item(const char *item, size_t len, size_t i, char **out) {
        const char *colon = memchr(item, ':', len);
        size_t pos;

        if (!colon || !numbered(item, (size_t) (colon - item), "card", GAS_CARD_DIGITS_MAX))
                return -EINVAL;
        pos = (size_t) (colon - item) + 1;
        for (;;) {
                size_t tl = strcspn(item + pos, "+,|");
                char *t;

                if (tl > len - pos)
                        tl = len - pos;
                if (!numbered(item + pos, tl, "gt", GAS_TILE_DIGITS_MAX))
                        return -EINVAL;
                if (asprintf(&t, "%s%s%zu.%.*s", *out ?: "", *out ? "," : "", i, (int) (tl - 2),
                             item + pos + 2) < 0)
                        return -ENOMEM;
                free(*out);
                *out = t;
                pos += tl;
                if (pos >= len)
                        return 0;
                pos++;          /* '+' */
                if (pos >= len)
                        return -EINVAL;
        }
}

static int tiles_segment(const char *seg, size_t len, void *userdata) {
        TilesParse *t = userdata;
        _cleanup_free_ char *mask = NULL;
        char **grown;
        size_t i = 0;

        if (t->n >= GAS_CARDS_PER_CONTAINER_MAX)
                return -EINVAL;
        for (size_t pos = 0;; i++) {
                size_t il = strcspn(seg + pos, ",|");
                int k;

                if (il > len - pos)
                        il = len - pos;
                if (i >= GAS_CARDS_PER_CONTAINER_MAX)
                        return -EINVAL;
                k = tiles_item(seg + pos, il, i, &mask);
                if (k < 0)
                        return k;
                pos += il;
                if (pos >= len)
                        break;
                pos++;
                if (pos >= len)
                        return -EINVAL;
        }
        grown = reallocarray(t->masks, t->n + 1, sizeof(char *));
        if (!grown)
                return -ENOMEM;
        t->masks = grown;
        t->masks[t->n++] = TAKE_PTR(mask);
        return 0;
}

int gas_parse_tiles(const char *s, char ***ret, size_t *ret_n) {
        TilesParse t = {};
        int k;

        k = for_segments(s, tiles_segment, &t);
        if (k < 0) {
                for (size_t i = 0; i < t.n; i++)
                        free(t.masks[i]);
                free(t.masks);
                return k;
        }
        *ret = t.masks;
        *ret_n = t.n;
        return 0;
}

static void pod_done(GasPod *p) {
        free(p->uid);
        free(p->namespace);
        free(p->name);
        free(p->ts);
        gas_cards_free(p->cards, p->n_cards);
        for (size_t i = 0; i < p->n_masks; i++)
                free(p->masks[i]);
        free(p->masks);
        for (size_t i = 0; i < p->n_containers; i++) {
                for (size_t j = 0; j < p->containers[i].n_limits; j++)
                        free(p->containers[i].limits[j].name);
                free(p->containers[i].limits);
        }
        free(p->containers);
}

GasSet *gas_set_free(GasSet *s) {
        if (!s)
                return NULL;
        for (size_t i = 0; i < s->n_pods; i++)
                pod_done(&s->pods[i]);
        free(s->pods);
        return mfree(s);
}

/* Printable ASCII, bounded; empty allowed when may_be_empty. */
static bool text_ok(const char *s, bool may_be_empty) {
        size_t l;

        if (!s)
                return false;
        l = strlen(s);
        if (l > GAS_STRING_MAX || (l == 0 && !may_be_empty))
                return false;
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                if (*p < 0x20 || *p >= 0x7f)
                        return false;
        return true;
}

static int fail(char **ret_error, const char *fmt, ...) _printf_(2, 3);

static int fail(char **ret_error, const char *fmt, ...) {
        va_list ap;
        int k;

        va_start(ap, fmt);
        k = vasprintf(ret_error, fmt, ap);
        va_end(ap);
        if (k < 0) {
                *ret_error = NULL;
                return -ENOMEM;
        }
        return -EINVAL;
}

static int pod_fill(GasPod *p, const GasPodArgs *a, size_t index, char **ret_error) {
        int k;

        if (!text_ok(a->uid, false) || !text_ok(a->namespace, false) || !text_ok(a->name, false))
                return fail(ret_error, "pod %zu: uid, namespace and name must be printable text of 1 to %u bytes",
                            index, GAS_STRING_MAX);
        if (!text_ok(a->ts, false) || !text_ok(a->cards, true) || !text_ok(a->tiles, true))
                return fail(ret_error, "pod %zu (%s/%s): annotations must be printable text of at most %u bytes, "
                            GAS_TS_ANNOTATION " not empty", index, a->namespace, a->name, GAS_STRING_MAX);
        if (a->n_containers > GAS_CONTAINERS_MAX)
                return fail(ret_error, "pod %zu (%s/%s): more than %u containers", index, a->namespace, a->name,
                            GAS_CONTAINERS_MAX);

        p->uid = strdup(a->uid);
        p->namespace = strdup(a->namespace);
        p->name = strdup(a->name);
        p->ts = strdup(a->ts);
        if (!p->uid || !p->namespace || !p->name || !p->ts)
                return -ENOMEM;
        k = gas_parse_cards(a->cards, &p->cards, &p->n_cards);
        if (k == -EINVAL)
                return fail(ret_error, "pod %zu (%s/%s): invalid " GAS_CARDS_ANNOTATION " annotation "
                            "(expected card<N>[,card<N>...] per container, containers separated by '|')",
                            index, a->namespace, a->name);
        if (k < 0)
                return k;
        k = gas_parse_tiles(a->tiles, &p->masks, &p->n_masks);
        if (k == -EINVAL)
                return fail(ret_error, "pod %zu (%s/%s): invalid " GAS_TILES_ANNOTATION " annotation "
                            "(expected card<N>:gt<T>[+gt<T>...][,...] per container, containers separated by '|')",
                            index, a->namespace, a->name);
        if (k < 0)
                return k;

        p->containers = calloc(a->n_containers ?: 1, sizeof(GasContainer));
        if (!p->containers)
                return -ENOMEM;
        p->n_containers = a->n_containers;
        for (size_t i = 0; i < a->n_containers; i++) {
                const GasContainer *c = &a->containers[i];

                if (c->n_limits > GAS_LIMITS_MAX)
                        return fail(ret_error, "pod %zu (%s/%s), container %zu: more than %u limits",
                                    index, a->namespace, a->name, i, GAS_LIMITS_MAX);
                p->containers[i].limits = calloc(c->n_limits ?: 1, sizeof(GasLimit));
                if (!p->containers[i].limits)
                        return -ENOMEM;
                p->containers[i].n_limits = c->n_limits;
                for (size_t j = 0; j < c->n_limits; j++) {
                        const char *n = c->limits[j].name;

                        if (!text_ok(n, false) || strlen(n) > 253 || !startswith(n, GAS_RESOURCE_PREFIX) ||
                            c->limits[j].count < 0)
                                return fail(ret_error, "pod %zu (%s/%s), container %zu: limit %zu must name a "
                                            GAS_RESOURCE_PREFIX " resource with a count of 0 or more",
                                            index, a->namespace, a->name, i, j);
                        for (size_t q = 0; q < j; q++)
                                if (streq(p->containers[i].limits[q].name, n))
                                        return fail(ret_error, "pod %zu (%s/%s), container %zu: limit %s twice",
                                                    index, a->namespace, a->name, i, n);
                        p->containers[i].limits[j].name = strdup(n);
                        if (!p->containers[i].limits[j].name)
                                return -ENOMEM;
                        p->containers[i].limits[j].count = c->limits[j].count;
                }
        }
        return 0;
}

int gas_set_new(const GasPodArgs *args, size_t n, GasSet **ret, char **ret_error) {
        _cleanup_(gas_set_freep) GasSet *s = NULL;
        int k;

        *ret_error = NULL;
        if (n > GAS_PODS_MAX)
                return fail(ret_error, "more than %u pods", GAS_PODS_MAX);
        s = calloc(1, sizeof(GasSet));
        if (!s)
                return -ENOMEM;
        s->pods = calloc(n ?: 1, sizeof(GasPod));
        if (!s->pods)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                s->n_pods = i + 1;
                k = pod_fill(&s->pods[i], &args[i], i, ret_error);
                if (k < 0)
                        return k;
        }
        /* Unique uids: n is bounded, a sorted copy would not pay off below a few thousand. */
        for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < i; j++)
                        if (streq(s->pods[i].uid, s->pods[j].uid))
                                return fail(ret_error, "pod uid %s twice", s->pods[i].uid);
        *ret = TAKE_PTR(s);
        return 0;
}

void gas_set_carry(GasSet *new_set, const GasSet *old_set) {
        if (!new_set || !old_set)
                return;
        for (size_t i = 0; i < new_set->n_pods; i++)
                for (size_t j = 0; j < old_set->n_pods; j++)
                        if (streq(new_set->pods[i].uid, old_set->pods[j].uid)) {
                                new_set->pods[i].consumed = old_set->pods[j].consumed;
                                break;
                        }
}

static int64_t container_request(const GasContainer *c, const char *resource) {
        for (size_t j = 0; j < c->n_limits; j++)
                if (streq(c->limits[j].name, resource))
                        return c->limits[j].count;
        return 0;
}

size_t gas_pod_containers_using(const GasPod *p, const char *resource) {
        size_t n = 0;

        for (size_t i = 0; i < p->n_containers; i++)
                if (container_request(&p->containers[i], resource) > 0)
                        n++;
        return n;
}

int64_t gas_pod_request(const GasPod *p, const char *resource, size_t index) {
        size_t n = 0;

        for (size_t i = 0; i < p->n_containers; i++) {
                int64_t c = container_request(&p->containers[i], resource);

                if (c > 0 && n++ == index)
                        return c;
        }
        return 0;
}

int gas_pick(const GasSet *s, const char *resource, size_t count, GasServedFunc served, void *userdata,
             const GasPod **ret_pod, size_t *ret_container) {
        const GasPod *best = NULL;
        size_t best_container = 0;

        for (size_t i = 0; s && i < s->n_pods; i++) {
                const GasPod *p = &s->pods[i];
                size_t next = p->consumed, using = gas_pod_containers_using(p, resource);
                int c;

                if (served) {
                        size_t k = served(p, resource, userdata);

                        if (k > next)
                                next = k;
                }
                if (next >= using || next >= p->n_cards || gas_pod_request(p, resource, next) != (int64_t) count)
                        continue;
                if (best) {
                        c = strcmp(p->ts, best->ts);
                        if (c > 0 || (c == 0 && strcmp(p->uid, best->uid) > 0))
                                continue;
                }
                best = p;
                best_container = next;
        }
        if (!best)
                return -ENOENT;
        *ret_pod = best;
        *ret_container = best_container;
        return 0;
}

void gas_consume(GasSet *s, const GasPod *p, size_t container) {
        for (size_t i = 0; s && i < s->n_pods; i++)
                if (&s->pods[i] == p && s->pods[i].consumed <= container)
                        s->pods[i].consumed = container + 1;
}
