/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * holders.c — the sharing limit's index of recorded allocations.
 *
 * Contract: see holders.h. Two hash maps keyed by (resource, string): the allocations
 * holding each device id (oldest first: the last one claims it), and the number of
 * counting allocations touching each GPU key. Each allocation carries how many of its
 * ids a newer allocation claims (n_stale), so that adding or removing one allocation
 * updates only the allocations that share an id with it.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/broker/holders.h"
#include "daemons/broker/policy.h"

struct HolderRecord {
        uint64_t id;
        const char *resource;   /* Holders.names */
        char **ids;             /* distinct; strv_pack(): one allocation */
        char **keys;            /* distinct GPU keys its ids touch; packed too */
        uint32_t n_stale;       /* ids of it claimed by a newer allocation */
        bool boot_match;
};

typedef struct IdList {
        HolderRecord **v;       /* oldest first */
        size_t n, allocated;
} IdList;

/* ---- a hash map from (resource, string) to a pointer-sized value ---- */

typedef struct MapEntry {
        char *key;              /* resource '\0' string; NULL: free slot */
        size_t len;
        uint64_t hash;
        uintptr_t value;
} MapEntry;

typedef struct Map {
        MapEntry *slots;
        size_t mask, n;
} Map;

static uint64_t map_hash(const char *key, size_t len) {
        uint64_t h = UINT64_C(0xcbf29ce484222325);

        for (size_t i = 0; i < len; i++) {
                h ^= (unsigned char) key[i];
                h *= UINT64_C(0x100000001b3);
        }
        return h ^ (h >> 31);
}

/* Builds the key "resource\0s" into buf (or a heap copy when it does not fit). */
typedef struct MapKey {
        char buf[320];
        char *heap;
        const char *p;
        size_t len;
        uint64_t hash;
} MapKey;

static int map_key(MapKey *k, const char *resource, const char *s) {
        size_t a = strlen(resource), b = strlen(s);
        char *p;

        k->heap = NULL;
        k->len = a + 1 + b;
        if (k->len <= sizeof(k->buf))
                p = k->buf;
        else {
                p = k->heap = malloc(k->len);
                if (!p)
                        return -ENOMEM;
        }
        memcpy(p, resource, a + 1);
        memcpy(p + a + 1, s, b);
        k->p = p;
        k->hash = map_hash(p, k->len);
        return 0;
}

static void map_key_done(MapKey *k) {
        k->heap = mfree(k->heap);
}

static MapEntry *map_find(const Map *m, const MapKey *k) {
        if (!m->slots)
                return NULL;
        for (size_t pos = k->hash & m->mask;; pos = (pos + 1) & m->mask) {
                MapEntry *e = &m->slots[pos];

                if (!e->key)
                        return NULL;
                if (e->hash == k->hash && e->len == k->len && memcmp(e->key, k->p, k->len) == 0)
                        return e;
        }
}

static void map_place(Map *m, MapEntry e) {
        size_t pos = e.hash & m->mask;

        while (m->slots[pos].key)
                pos = (pos + 1) & m->mask;
        m->slots[pos] = e;
}

static int map_grow(Map *m) {
        size_t size = m->slots ? 2 * (m->mask + 1) : 64;
        MapEntry *old = m->slots, *n;
        size_t old_size = old ? m->mask + 1 : 0;

        n = calloc(size, sizeof(MapEntry));
        if (!n)
                return -ENOMEM;
        m->slots = n;
        m->mask = size - 1;
        for (size_t i = 0; i < old_size; i++)
                if (old[i].key)
                        map_place(m, old[i]);
        free(old);
        return 0;
}

/* The entry of k, created with value 0 if missing. */
static int map_get_or_add(Map *m, const MapKey *k, MapEntry **ret) {
        MapEntry *e = map_find(m, k);
        char *copy;
        int r;

        if (!e) {
                if (!m->slots || 2 * (m->n + 1) > m->mask + 1) {
                        r = map_grow(m);
                        if (r < 0)
                                return r;
                }
                copy = malloc(k->len);
                if (!copy)
                        return -ENOMEM;
                memcpy(copy, k->p, k->len);
                map_place(m, (MapEntry) { .key = copy, .len = k->len, .hash = k->hash });
                m->n++;
                e = map_find(m, k);
        }
        *ret = e;
        return 0;
}

/* Linear probing deletion by backward shift: no tombstones. */
static void map_delete(Map *m, MapEntry *e) {
        size_t hole = (size_t) (e - m->slots);

        free(e->key);
        m->slots[hole] = (MapEntry) {};
        m->n--;
        for (size_t pos = (hole + 1) & m->mask; m->slots[pos].key; pos = (pos + 1) & m->mask) {
                size_t home = m->slots[pos].hash & m->mask;

                /* Move it into the hole unless its home lies cyclically in (hole, pos]. */
                if (((pos - home) & m->mask) >= ((pos - hole) & m->mask)) {
                        m->slots[hole] = m->slots[pos];
                        m->slots[pos] = (MapEntry) {};
                        hole = pos;
                }
        }
}

static void map_done(Map *m, void (*free_value)(uintptr_t)) {
        for (size_t i = 0; m->slots && i <= m->mask; i++)
                if (m->slots[i].key) {
                        free(m->slots[i].key);
                        if (free_value)
                                free_value(m->slots[i].value);
                }
        m->slots = mfree(m->slots);
        m->n = 0;
}

/* ---- the index ---- */

struct Holders {
        char *boot_id;
        char **names;                   /* the resources, each once (records point here) */
        HolderRecord **records;         /* by id */
        size_t n_records, allocated_records;
        Map ids;                        /* (resource, device id) -> IdList* */
        Map counts;                     /* (resource, GPU key) -> counting allocations */
};

static void record_free(HolderRecord *rec) {
        if (!rec)
                return;
        free(rec->ids);
        free(rec->keys);
        free(rec);
}

static void id_list_free(uintptr_t v) {
        IdList *l = (IdList *) v;

        if (l) {
                free(l->v);
                free(l);
        }
}

int holders_new(const char *boot_id, Holders **ret) {
        Holders *h = calloc(1, sizeof(Holders));

        if (!h)
                return -ENOMEM;
        h->boot_id = strdup(boot_id ?: "");
        if (!h->boot_id) {
                free(h);
                return -ENOMEM;
        }
        *ret = h;
        return 0;
}

Holders *holders_free(Holders *h) {
        if (!h)
                return NULL;
        for (size_t i = 0; i < h->n_records; i++)
                record_free(h->records[i]);
        free(h->records);
        map_done(&h->ids, id_list_free);
        map_done(&h->counts, NULL);
        strv_free(h->names);
        free(h->boot_id);
        return mfree(h);
}

size_t holders_size(const Holders *h) {
        return h ? h->n_records : 0;
}

static bool record_counts(const HolderRecord *rec) {
        return rec->boot_match && rec->n_stale == 0;
}

static int counts_adjust(Holders *h, const HolderRecord *rec, int delta) {
        for (char **k = rec->keys; k && *k; k++) {
                _cleanup_(map_key_done) MapKey key = {};
                MapEntry *e;
                int r;

                r = map_key(&key, rec->resource, *k);
                if (r < 0)
                        return r;
                if (delta > 0) {
                        r = map_get_or_add(&h->counts, &key, &e);
                        if (r < 0)
                                return r;
                        e->value++;
                } else {
                        e = map_find(&h->counts, &key);
                        if (!e)
                                continue;       /* not reached: a counting record was added */
                        if (--e->value == 0)
                                map_delete(&h->counts, e);
                }
        }
        return 0;
}

/* rec->n_stale changes by delta; the counts follow when that makes it (not) count. */
static int record_stale(Holders *h, HolderRecord *rec, int delta) {
        bool before = record_counts(rec);

        rec->n_stale = delta > 0 ? rec->n_stale + 1 : rec->n_stale - 1;
        if (before == record_counts(rec))
                return 0;
        return counts_adjust(h, rec, before ? -1 : +1);
}

/* The resource name as kept in h->names. */
static int intern(Holders *h, const char *name, const char **ret) {
        int r;

        for (char **n = h->names; n && *n; n++)
                if (streq(*n, name)) {
                        *ret = *n;
                        return 0;
                }
        r = strv_extend(&h->names, name);
        if (r < 0)
                return r;
        *ret = h->names[strv_length(h->names) - 1];
        return 0;
}

static int record_new(Holders *h, uint64_t id, const char *resource, char * const *device_ids, bool boot_match,
                      HolderRecord **ret) {
        _cleanup_strv_free_ char **ids = NULL, **keys = NULL;
        HolderRecord *rec;
        int r;

        ids = calloc(1, sizeof(char *));
        keys = calloc(1, sizeof(char *));
        if (!ids || !keys)
                return -ENOMEM;
        for (char * const *i = device_ids; *i; i++) {
                size_t l;
                uint32_t share;

                if (strv_contains(ids, *i))
                        continue;
                r = strv_extend(&ids, *i);
                if (r < 0)
                        return r;
                if (!strv_contains(keys, *i)) {
                        r = strv_extend(&keys, *i);
                        if (r < 0)
                                return r;
                }
                if (policy_split_id(*i, &l, &share) >= 0) {
                        _cleanup_free_ char *gpu = strndup(*i, l);

                        if (!gpu)
                                return -ENOMEM;
                        if (!strv_contains(keys, gpu)) {
                                r = strv_consume(&keys, TAKE_PTR(gpu));
                                if (r < 0)
                                        return r;
                        }
                }
        }
        rec = calloc(1, sizeof(HolderRecord));
        if (!rec)
                return -ENOMEM;
        *rec = (HolderRecord) { .id = id, .boot_match = boot_match };
        r = intern(h, resource, &rec->resource);
        rec->ids = strv_pack(ids);
        rec->keys = strv_pack(keys);
        if (r < 0 || !rec->ids || !rec->keys) {
                record_free(rec);
                return r < 0 ? r : -ENOMEM;
        }
        *ret = rec;
        return 0;
}

int holders_add(Holders *h, uint64_t id, const char *resource, char * const *device_ids, const char *boot_id) {
        HolderRecord *rec = NULL;
        int r;

        if (!h || isempty(resource) || strv_length(device_ids) == 0 ||
            (h->n_records > 0 && id <= h->records[h->n_records - 1]->id))
                return -EINVAL;
        r = array_reserve((void **) &h->records, &h->allocated_records, h->n_records + 1, sizeof(HolderRecord *));
        if (r < 0)
                return r;
        r = record_new(h, id, resource, device_ids,
                       isempty(h->boot_id) || isempty(boot_id) || streq(h->boot_id, boot_id), &rec);
        if (r < 0)
                return r;
        h->records[h->n_records++] = rec;      /* owned by the index from here on */

        for (char **i = rec->ids; *i; i++) {
                _cleanup_(map_key_done) MapKey key = {};
                MapEntry *e;
                IdList *l;

                r = map_key(&key, resource, *i);
                if (r < 0)
                        return r;
                r = map_get_or_add(&h->ids, &key, &e);
                if (r < 0)
                        return r;
                l = (IdList *) e->value;
                if (!l) {
                        l = calloc(1, sizeof(IdList));
                        if (!l)
                                return -ENOMEM;
                        e->value = (uintptr_t) l;
                }
                r = array_reserve((void **) &l->v, &l->allocated, l->n + 1, sizeof(HolderRecord *));
                if (r < 0)
                        return r;
                if (l->n > 0) {
                        r = record_stale(h, l->v[l->n - 1], +1);
                        if (r < 0)
                                return r;
                }
                l->v[l->n++] = rec;
        }
        return record_counts(rec) ? counts_adjust(h, rec, +1) : 0;
}

static size_t record_index(const Holders *h, uint64_t id) {
        size_t lo = 0, hi = h->n_records;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (h->records[mid]->id < id)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

int holders_remove(Holders *h, uint64_t id) {
        HolderRecord *rec;
        size_t at;
        int r = 0, k;

        if (!h)
                return 0;
        at = record_index(h, id);
        if (at >= h->n_records || h->records[at]->id != id)
                return 0;
        rec = h->records[at];

        if (record_counts(rec))
                r = counts_adjust(h, rec, -1);
        for (char **i = rec->ids; *i; i++) {
                _cleanup_(map_key_done) MapKey key = {};
                MapEntry *e;
                IdList *l;
                size_t j;

                k = map_key(&key, rec->resource, *i);
                if (k < 0) {
                        r = k;
                        continue;
                }
                e = map_find(&h->ids, &key);
                l = e ? (IdList *) e->value : NULL;
                if (!l)
                        continue;
                for (j = 0; j < l->n && l->v[j] != rec; j++)
                        ;
                if (j == l->n)
                        continue;
                memmove(l->v + j, l->v + j + 1, (l->n - j - 1) * sizeof(HolderRecord *));
                l->n--;
                /* It claimed the id: the next newest allocation with it claims it again. */
                if (j == l->n && l->n > 0) {
                        k = record_stale(h, l->v[l->n - 1], -1);
                        if (k < 0)
                                r = k;
                }
                if (l->n == 0) {
                        id_list_free(e->value);
                        map_delete(&h->ids, e);
                }
        }
        memmove(h->records + at, h->records + at + 1, (h->n_records - at - 1) * sizeof(HolderRecord *));
        h->n_records--;
        record_free(rec);
        return r;
}

/* The entry of (resource, s) in m, or NULL. */
static int map_lookup(const Map *m, const char *resource, const char *s, const MapEntry **ret) {
        _cleanup_(map_key_done) MapKey key = {};
        int r;

        if (!resource || !s)
                return -EINVAL;
        r = map_key(&key, resource, s);
        if (r < 0)
                return r;
        *ret = map_find(m, &key);
        return 0;
}

int holders_count(const Holders *h, const char *resource, const char *gpu_key, uint32_t *ret) {
        const MapEntry *e;
        int r;

        if (!h)
                return -EINVAL;
        r = map_lookup(&h->counts, resource, gpu_key, &e);
        if (r < 0)
                return r;
        *ret = e ? (uint32_t) e->value : 0;
        return 0;
}

int holders_live_claimer(const Holders *h, const char *resource, const char *device_id,
                         const HolderRecord **ret) {
        const MapEntry *e;
        const IdList *l;
        int r;

        if (!h)
                return -EINVAL;
        r = map_lookup(&h->ids, resource, device_id, &e);
        if (r < 0)
                return r;
        l = e ? (const IdList *) e->value : NULL;
        *ret = l && l->n > 0 && record_counts(l->v[l->n - 1]) ? l->v[l->n - 1] : NULL;
        return 0;
}

bool holders_touches(const HolderRecord *rec, const char *gpu_key) {
        return rec && strv_contains(rec->keys, gpu_key);
}

int holders_claimers(const Holders *h, const char *resource, const char *device_id,
                     HolderRecord * const **ret, size_t *ret_n) {
        const MapEntry *e;
        const IdList *l;
        int r;

        if (!h)
                return -EINVAL;
        r = map_lookup(&h->ids, resource, device_id, &e);
        if (r < 0)
                return r;
        l = e ? (const IdList *) e->value : NULL;
        *ret = l ? l->v : NULL;
        *ret_n = l ? l->n : 0;
        return 0;
}

uint64_t holders_record_id(const HolderRecord *rec) {
        return rec ? rec->id : 0;
}
