/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store-allocate.c — Allocate transactions, reconciliation and the holders index over the rows.
 *
 * Contract: see store.h and store-internal.h.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/holders.h"
#include "daemons/broker/store-internal.h"

static int store_insert_allocation(Store *s, uint64_t id, const char *resource, const char *packed,
                                   size_t packed_len, uint64_t created_usec) {
        sqlite3_stmt *st = s->stmt[STMT_INSERT_ALLOCATION];

        if (sqlite3_bind_int64(st, 1, (sqlite3_int64) id) != SQLITE_OK ||
            sqlite3_bind_text(st, 2, resource, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int64(st, 3, (sqlite3_int64) MIN(created_usec, (uint64_t) INT64_MAX)) != SQLITE_OK ||
            sqlite3_bind_text(st, 4, s->boot_id, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_text(st, 5, packed, (int) packed_len, SQLITE_STATIC) != SQLITE_OK) {
                sqlite3_reset(st);
                sqlite3_clear_bindings(st);
                return -ENOMEM;
        }
        return store_step_done(s, STMT_INSERT_ALLOCATION);
}

static int str_ptr_cmp(const void *a, const void *b) {
        return strcmp(*(const char * const *) a, *(const char * const *) b);
}

/* -EINVAL if an id is in more than one request (or twice in one). */
static int requests_check_distinct(char ** const *requests, size_t n_requests) {
        _cleanup_free_ const char **all = NULL;
        size_t n = 0;

        if (n_requests == 1 && strv_length(requests[0]) == 1)
                return 0;       /* the kubelet's call: one container, often one id */
        for (size_t i = 0; i < n_requests; i++)
                n += strv_length(requests[i]);
        all = calloc(n + 1, sizeof(char *));
        if (!all)
                return -ENOMEM;
        n = 0;
        for (size_t i = 0; i < n_requests; i++)
                for (char * const *j = requests[i]; *j; j++)
                        all[n++] = *j;
        qsort(all, n, sizeof(char *), str_ptr_cmp);
        for (size_t i = 1; i < n; i++)
                if (streq(all[i - 1], all[i]))
                        return -EINVAL;
        return 0;
}

static int superseded_cmp(const void *a, const void *b) {
        const StoreSuperseded *x = a, *y = b;

        if (x->id != y->id)
                return x->id < y->id ? -1 : 1;
        return x->request < y->request ? -1 : x->request > y->request;
}

static int claimers_add(StoreSuperseded **list, size_t *n, size_t *allocated, uint64_t id, size_t request) {
        int r = array_reserve((void **) list, allocated, *n + 1, sizeof(StoreSuperseded));

        if (r < 0)
                return r;
        (*list)[(*n)++] = (StoreSuperseded) { .id = id, .request = request };
        return 0;
}

/* Without the holder index (out of memory): every stored allocation of resource, scanned,
 * its packed ids read (a row that does not read back is not an allocation: never listed,
 * never superseded, as when it is read at open). */
static int store_scan_claimers(Store *s, const char *resource, char ** const *requests, size_t n_requests,
                               StoreSuperseded **list, size_t *n, size_t *allocated) {
        sqlite3_stmt *st = s->stmt[STMT_LIST_RESOURCE];
        int rc = SQLITE_DONE, r = 0;

        if (sqlite3_bind_text(st, 1, resource, -1, SQLITE_STATIC) != SQLITE_OK)
                r = -ENOMEM;
        while (r >= 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
                _cleanup_free_ char **ids = NULL;
                sqlite3_int64 v = sqlite3_column_int64(st, 0);
                int len;

                if (v <= 0 || sqlite3_column_type(st, 1) != SQLITE_TEXT)
                        continue;
                len = sqlite3_column_bytes(st, 1);
                if (store_ids_unpack(sqlite3_column_text(st, 1), len > 0 ? (size_t) len : 0, &ids, NULL, 0) < 0)
                        continue;
                for (size_t i = 0; r >= 0 && i < n_requests; i++)
                        for (char * const *j = requests[i]; *j; j++)
                                if (strv_contains(ids, *j)) {
                                        r = claimers_add(list, n, allocated, (uint64_t) v, i);
                                        break;
                                }
        }
        if (r >= 0 && rc != SQLITE_DONE)
                r = store_sqlite_to_errno(rc) ?: -EIO;
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return r;
}

/* Appends the stored allocations of resource that hold one of the call's ids, with the
 * request claiming each; from the holder index (O(ids of the call)), else a scan. */
static int store_find_claimers(Store *s, const char *resource, char ** const *requests, size_t n_requests,
                               StoreSuperseded **list, size_t *n, size_t *allocated) {
        const Holders *h = store_get_holders(s);
        int r;

        if (!h)
                return store_scan_claimers(s, resource, requests, n_requests, list, n, allocated);
        for (size_t i = 0; i < n_requests; i++)
                for (char * const *j = requests[i]; *j; j++) {
                        HolderRecord * const *recs;
                        size_t n_recs;

                        r = holders_claimers(h, resource, *j, &recs, &n_recs);
                        if (r < 0)
                                return r;
                        for (size_t k = 0; k < n_recs; k++) {
                                r = claimers_add(list, n, allocated, holders_record_id(recs[k]), i);
                                if (r < 0)
                                        return r;
                        }
                }
        return 0;
}

/* The allocations stored once the deletions of this transaction are committed. */
static int store_count_kept(Store *s, const uint64_t *deleted, size_t n_deleted, size_t *ret) {
        sqlite3_stmt *st = s->stmt[STMT_COUNT];
        size_t n;
        int rc;

        if (s->rows_loaded) {
                n = s->n_rows;
                for (size_t i = 0; i < n_deleted; i++)
                        if (store_rows_find(s, deleted[i]) && n > 0)
                                n--;
                *ret = n;
                return 0;
        }
        /* Without the copy (it could not be read): ask SQL, inside the transaction. */
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
                *ret = (size_t) MAX(sqlite3_column_int64(st, 0), 0);
        sqlite3_reset(st);
        return rc == SQLITE_ROW ? 0 : (store_sqlite_to_errno(rc) ?: -EIO);
}

int store_allocate(Store *s, const char *resource, char ** const *requests, size_t n_requests,
                   uint64_t created_usec, uint64_t *ret_ids,
                   StoreSuperseded **ret_superseded, size_t *ret_n_superseded) {
        _cleanup_free_ uint64_t *ids = NULL, *old_ids = NULL;
        _cleanup_free_ StoreSuperseded *old = NULL;
        _cleanup_free_ char **packed = NULL;
        _cleanup_free_ size_t *packed_len = NULL;
        size_t n_old = 0, allocated_old = 0, n_kept = 0;
        uint64_t reserve = 0;
        sqlite3_stmt *st;
        int r;

        if (!s || isempty(resource) || n_requests == 0)
                return -EINVAL;
        for (size_t i = 0; i < n_requests; i++)
                if (strv_length(requests[i]) == 0)
                        return -EINVAL;
        /* Two requests of one call with the same id would both hold it. */
        r = requests_check_distinct(requests, n_requests);
        if (r < 0)
                return r;

        ids = calloc(n_requests, sizeof(uint64_t));
        packed = calloc(n_requests + 1, sizeof(char *));
        packed_len = calloc(n_requests, sizeof(size_t));
        if (!ids || !packed || !packed_len)
                return -ENOMEM;
        /* Packed first: what the store could not read back is refused before anything is
         * written. */
        for (size_t i = 0; i < n_requests; i++) {
                r = store_ids_pack(requests[i], &packed[i], &packed_len[i]);
                if (r < 0)
                        goto free_packed;
        }
        if (s->next_id > (uint64_t) INT64_MAX - n_requests - STORE_ID_BLOCK) {
                r = -EOVERFLOW;
                goto free_packed;
        }
        for (size_t i = 0; i < n_requests; i++)
                ids[i] = s->next_id + i;
        if (ids[n_requests - 1] > s->id_reserved)
                reserve = ids[n_requests - 1] + STORE_ID_BLOCK;
        /* The copy answers the cap's count and the superseding (SQL does without it). */
        (void) store_rows_ensure(s);

        r = store_step_done(s, STMT_BEGIN);
        if (r < 0)
                goto free_packed;

        /* Superseded: every stored allocation of the resource holding one of the call's
         * ids, each once, with the first request claiming it. Found before anything is
         * inserted, so the call never supersedes itself. */
        r = store_find_claimers(s, resource, requests, n_requests, &old, &n_old, &allocated_old);
        if (r < 0)
                goto rollback;
        if (n_old > 1) {
                size_t k = 0;

                qsort(old, n_old, sizeof(StoreSuperseded), superseded_cmp);
                for (size_t i = 0; i < n_old; i++)
                        if (k == 0 || old[i].id != old[k - 1].id)
                                old[k++] = old[i];
                n_old = k;
        }
        old_ids = calloc(n_old + 1, sizeof(uint64_t));
        if (!old_ids) {
                r = -ENOMEM;
                goto rollback;
        }
        st = s->stmt[STMT_DELETE_ALLOCATION];
        for (size_t i = 0; i < n_old; i++) {
                old_ids[i] = old[i].id;
                if (sqlite3_bind_int64(st, 1, (sqlite3_int64) MIN(old[i].id, (uint64_t) INT64_MAX)) != SQLITE_OK) {
                        r = -ENOMEM;
                        goto rollback;
                }
                r = store_step_done(s, STMT_DELETE_ALLOCATION);
                if (r < 0)
                        goto rollback;
        }

        if (s->max_allocations > 0) {
                r = store_count_kept(s, old_ids, n_old, &n_kept);
                if (r < 0)
                        goto rollback;
                if (n_kept > s->max_allocations || n_requests > s->max_allocations - n_kept) {
                        log_debug("Refusing %zu allocation(s) of %s: %zu stored, at most %zu.", n_requests,
                                  resource, n_kept, s->max_allocations);
                        r = -EDQUOT;
                        goto rollback;
                }
        }

        /* Ids are taken even if this transaction fails (a COMMIT reported failed may
         * still have reached the disk): one is never offered twice. */
        s->next_id += n_requests;
        if (reserve > 0) {
                if (sqlite3_bind_int64(s->stmt[STMT_RESERVE_IDS], 1, (sqlite3_int64) reserve) != SQLITE_OK) {
                        r = -ENOMEM;
                        goto rollback;
                }
                r = store_step_done(s, STMT_RESERVE_IDS);
                if (r < 0)
                        goto rollback;
        }
        for (size_t i = 0; i < n_requests; i++) {
                r = store_insert_allocation(s, ids[i], resource, packed[i], packed_len[i], created_usec);
                if (r < 0)
                        goto rollback;
        }

        if (s->before_commit) {
                r = s->before_commit(s, s->before_commit_userdata);
                if (r < 0)
                        goto rollback;
        }

        r = store_step_done(s, STMT_COMMIT);
        if (r < 0)
                goto rollback;
        if (reserve > 0)
                s->id_reserved = reserve;
        strv_free(packed);
        packed = NULL;

        log_debug("Committed %zu allocation(s) of %s, %zu superseded.", n_requests, resource, n_old);
        store_rows_release(s, old_ids, n_old);
        for (size_t i = 0; i < n_requests; i++)
                store_rows_add(s, ids[i], resource, requests[i], created_usec);
        if (ret_ids)
                memcpy(ret_ids, ids, n_requests * sizeof(uint64_t));
        if (ret_superseded)
                *ret_superseded = TAKE_PTR(old);
        if (ret_n_superseded)
                *ret_n_superseded = n_old;
        return 0;

rollback:
        /* A failed COMMIT may leave the transaction open (e.g. SQLITE_BUSY); roll back so
         * that nothing of it ever becomes visible. */
        if (!sqlite3_get_autocommit(s->db))
                (void) store_step_done(s, STMT_ROLLBACK);
free_packed:
        strv_free(packed);
        packed = NULL;
        return r;
}

void store_set_max_allocations(Store *s, size_t max) {
        s->max_allocations = max;
}

size_t store_get_max_allocations(const Store *s) {
        return s->max_allocations;
}

size_t store_get_n_allocations(Store *s) {
        size_t n = 0;

        if (store_rows_ensure(s) >= 0)
                return s->n_rows;
        (void) store_count_kept(s, NULL, 0, &n);
        return n;
}

void store_set_checkpoint_func(Store *s, StoreCheckpointFunc cb, void *userdata) {
        s->checkpoint = cb;
        s->checkpoint_userdata = userdata;
        s->checkpoint_asked = false;
}

size_t store_get_wal_frames(const Store *s) {
        return s->wal_frames;
}

const Holders *store_get_holders(Store *s) {
        _cleanup_(holders_freep) Holders *h = NULL;

        if (!s || store_rows_ensure(s) < 0)
                return NULL;
        if (s->holders)
                return s->holders;
        if (holders_new(s->boot_id, &h) < 0)
                return NULL;
        for (size_t i = 0; i < s->n_rows; i++)
                if (holders_add(h, s->rows[i].id, s->rows[i].resource, s->rows[i].device_ids,
                                s->rows[i].boot_id) < 0)
                        return NULL;
        s->holders = TAKE_PTR(h);
        return s->holders;
}

int store_foreach_allocation(Store *s, size_t max, StoreAllocationFunc cb, void *userdata) {
        size_t first;
        int r;

        r = store_rows_ensure(s);
        if (r < 0)
                return r;
        first = max > 0 && max < s->n_rows ? s->n_rows - max : 0;
        for (size_t i = first; i < s->n_rows; i++) {
                const StoreRow *row = &s->rows[i];

                r = cb(row->id, row->resource, row->device_ids, row->created_usec, row->boot_id,
                       row->pod_name != NULL, userdata);
                if (r < 0)
                        return r;
        }
        return (int) MIN(s->n_rows - first, (size_t) INT32_MAX);
}

int store_bind_text(sqlite3_stmt *st, int i, const char *v) {
        return sqlite3_bind_text(st, i, v ?: "", -1, SQLITE_STATIC) == SQLITE_OK ? 0 : -ENOMEM;
}

static bool holder_unchanged(const StoreRow *row, const StoreHolder *h) {
        return streq(store_nz(row->pod_namespace), store_nz(h->pod_namespace)) && streq(store_nz(row->pod_name), store_nz(h->pod_name)) &&
               streq(store_nz(row->container_name), store_nz(h->container_name));
}

/* Committed holders, copied to the rows. */
static void rows_set_holders(Store *s, const StoreHolder * const *set, size_t n) {
        for (size_t i = 0; s->rows_loaded && i < n; i++) {
                StoreRow *row = store_rows_find(s, set[i]->id);

                if (row && (free_and_strdup(&row->pod_namespace, store_empty_to_null(set[i]->pod_namespace)) < 0 ||
                            free_and_strdup(&row->pod_name, store_empty_to_null(set[i]->pod_name)) < 0 ||
                            free_and_strdup(&row->container_name, store_empty_to_null(set[i]->container_name)) < 0))
                        store_rows_drop(s);   /* read again when next needed */
        }
}

int store_reconcile(Store *s, const uint64_t *release, size_t n_release,
                    const StoreHolder *holders, size_t n_holders, uint64_t seen_usec) {
        _cleanup_free_ uint64_t *del = NULL;
        _cleanup_free_ const StoreHolder **set = NULL;
        size_t n_del = 0, n_set = 0;
        sqlite3_stmt *st;
        int r;

        if (!s || (n_release > 0 && !release) || (n_holders > 0 && !holders))
                return -EINVAL;

        /* Only what changes: unknown ids and holders already recorded are left out, and a
         * reconciliation that changes nothing writes nothing. Without the rows (they could
         * not be read) everything is written, as unknown ids change nothing in SQL. */
        del = calloc(n_release + 1, sizeof(uint64_t));
        set = calloc(n_holders + 1, sizeof(StoreHolder *));
        if (!del || !set)
                return -ENOMEM;
        (void) store_rows_ensure(s);
        for (size_t i = 0; i < n_release; i++)
                if (!s->rows_loaded || store_rows_find(s, release[i]))
                        del[n_del++] = release[i];
        for (size_t i = 0; i < n_holders; i++) {
                const StoreRow *row = s->rows_loaded ? store_rows_find(s, holders[i].id) : NULL;

                if (!s->rows_loaded || (row && !holder_unchanged(row, &holders[i])))
                        set[n_set++] = &holders[i];
        }
        if (n_del == 0 && n_set == 0)
                return 0;

        r = store_step_done(s, STMT_BEGIN);
        if (r < 0)
                return r;

        st = s->stmt[STMT_DELETE_ALLOCATION];
        for (size_t i = 0; i < n_del; i++) {
                if (sqlite3_bind_int64(st, 1, (sqlite3_int64) MIN(del[i], (uint64_t) INT64_MAX)) != SQLITE_OK) {
                        r = -ENOMEM;
                        goto rollback;
                }
                r = store_step_done(s, STMT_DELETE_ALLOCATION);
                if (r < 0)
                        goto rollback;
        }

        st = s->stmt[STMT_SET_HOLDER];
        for (size_t i = 0; i < n_set; i++) {
                if (sqlite3_bind_int64(st, 1, (sqlite3_int64) MIN(set[i]->id, (uint64_t) INT64_MAX)) != SQLITE_OK ||
                    store_bind_text(st, 2, set[i]->pod_namespace) < 0 ||
                    store_bind_text(st, 3, set[i]->pod_name) < 0 ||
                    store_bind_text(st, 4, set[i]->container_name) < 0 ||
                    sqlite3_bind_int64(st, 5, (sqlite3_int64) MIN(seen_usec, (uint64_t) INT64_MAX)) != SQLITE_OK) {
                        sqlite3_reset(st);
                        sqlite3_clear_bindings(st);
                        r = -ENOMEM;
                        goto rollback;
                }
                r = store_step_done(s, STMT_SET_HOLDER);
                if (r < 0)
                        goto rollback;
        }

        if (s->before_commit) {
                r = s->before_commit(s, s->before_commit_userdata);
                if (r < 0)
                        goto rollback;
        }

        r = store_step_done(s, STMT_COMMIT);
        if (r < 0)
                goto rollback;
        log_debug("Reconciled: released %zu allocation(s), %zu new holder(s) recorded.", n_del, n_set);
        rows_set_holders(s, set, n_set);
        store_rows_release(s, del, n_del);
        return 0;

rollback:
        if (!sqlite3_get_autocommit(s->db))
                (void) store_step_done(s, STMT_ROLLBACK);
        return r;
}

int store_get_holder(Store *s, uint64_t id, StoreHolder *ret, uint64_t *ret_seen_usec) {
        sqlite3_stmt *st = NULL;
        int rc, r;

        rc = sqlite3_prepare_v2(s->db, "SELECT pod_namespace, pod_name, container_name, seen_usec "
                                "FROM allocations WHERE id = ?1", -1, &st, NULL);
        if (rc != SQLITE_OK)
                return store_sqlite_to_errno(rc) ?: -EIO;
        sqlite3_bind_int64(st, 1, (sqlite3_int64) MIN(id, (uint64_t) INT64_MAX));
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
                const char *ns = store_column_text(st, 0), *pod = store_column_text(st, 1), *c = store_column_text(st, 2);

                *ret = (StoreHolder) { .id = id };
                ret->pod_namespace = strdup(ns ?: "");
                ret->pod_name = strdup(pod ?: "");
                ret->container_name = strdup(c ?: "");
                if (!ret->pod_namespace || !ret->pod_name || !ret->container_name) {
                        store_holder_done(ret);
                        r = -ENOMEM;
                } else {
                        if (ret_seen_usec)
                                *ret_seen_usec = (uint64_t) MAX(sqlite3_column_int64(st, 3), 0);
                        r = 0;
                }
        } else
                r = rc == SQLITE_DONE ? -ENOENT : (store_sqlite_to_errno(rc) ?: -EIO);
        sqlite3_finalize(st);
        return r;
}

void store_holder_done(StoreHolder *h) {
        h->pod_namespace = mfree(h->pod_namespace);
        h->pod_name = mfree(h->pod_name);
        h->container_name = mfree(h->container_name);
}

