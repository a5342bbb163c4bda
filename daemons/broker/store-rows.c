/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store-rows.c — the committed allocations, read once and kept in memory.
 *
 * Contract: see store.h and store-internal.h.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/holders.h"
#include "daemons/broker/store-internal.h"

const char *store_nz(const char *s) {
        return s ?: "";
}

const char *store_empty_to_null(const char *s) {
        return isempty(s) ? NULL : s;
}

/* The string as kept in s->names (rows share one copy of each resource and boot id). */
static const char *intern(Store *s, const char *v) {
        for (char **n = s->names; n && *n; n++)
                if (streq(*n, v))
                        return *n;
        if (strv_extend(&s->names, v) < 0)
                return NULL;
        return s->names[strv_length(s->names) - 1];
}

static void row_done(StoreRow *row) {
        free(row->device_ids);
        free(row->pod_namespace);
        free(row->pod_name);
        free(row->container_name);
        *row = (StoreRow) {};
}

void store_rows_drop(Store *s) {
        for (size_t i = 0; i < s->n_rows; i++)
                row_done(&s->rows[i]);
        s->rows = mfree(s->rows);
        s->n_rows = s->allocated_rows = 0;
        s->rows_loaded = false;
        s->holders = holders_free(s->holders);
}

static StoreRow *rows_push(Store *s) {
        if (array_reserve((void **) &s->rows, &s->allocated_rows, s->n_rows + 1, sizeof(StoreRow)) < 0)
                return NULL;
        s->rows[s->n_rows] = (StoreRow) {};
        return &s->rows[s->n_rows++];
}

StoreRow *store_rows_find(Store *s, uint64_t id) {
        size_t lo = 0, hi = s->n_rows;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (s->rows[mid].id < id)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo < s->n_rows && s->rows[lo].id == id ? &s->rows[lo] : NULL;
}

/* A malformed row: skipped (the file is not rewritten), counted, the first reason kept. */
static void rows_skip(Store *s, int64_t id, const char *why) {
        log_debug("%s: skipping malformed allocation row %" PRIi64 ": %s.", s->path, id, why);
        if (s->n_skipped++ == 0 &&
            asprintf(&s->skipped_first, "allocation row %" PRIi64 ": %s", id, why) < 0)
                s->skipped_first = NULL;
}

/* Reads every allocation; a row failing validation is skipped with its reason, and only
 * it (the packed device ids are checked whole before anything of the row is kept). */
int store_rows_load(Store *s) {
        sqlite3_stmt *st = s->stmt[STMT_LIST_ALL];
        uint64_t last = 0;
        int rc, r = 0;

        store_rows_drop(s);
        s->n_skipped = 0;
        s->skipped_first = mfree(s->skipped_first);
        for (;;) {
                _cleanup_free_ char **ids = NULL;
                char problem[128];
                sqlite3_int64 id, created;
                const char *resource, *boot_id;
                const void *packed;
                StoreRow *row;
                int n;

                rc = sqlite3_step(st);
                if (rc != SQLITE_ROW)
                        break;

                id = sqlite3_column_int64(st, 0);
                if (id <= 0 || (uint64_t) id <= last) {
                        rows_skip(s, id, "invalid id");
                        continue;
                }
                resource = store_column_text(st, 1);
                created = sqlite3_column_int64(st, 2);
                boot_id = store_column_text(st, 3);
                if (isempty(resource)) {
                        rows_skip(s, id, "resource name missing, too long or not UTF-8");
                        continue;
                }
                if (sqlite3_column_type(st, 2) != SQLITE_INTEGER || created < 0) {
                        rows_skip(s, id, "creation time not a positive integer");
                        continue;
                }
                if (!boot_id) {
                        rows_skip(s, id, "boot id missing, too long or not UTF-8");
                        continue;
                }
                if (sqlite3_column_type(st, 4) != SQLITE_TEXT) {
                        rows_skip(s, id, "device ids not text");
                        continue;
                }
                packed = sqlite3_column_text(st, 4);
                n = sqlite3_column_bytes(st, 4);
                r = store_ids_unpack(packed, n > 0 ? (size_t) n : 0, &ids, problem, sizeof(problem));
                if (r == -EBADMSG) {
                        rows_skip(s, id, problem);
                        r = 0;
                        continue;
                }
                if (r < 0)
                        break;

                row = rows_push(s);
                if (!row) {
                        r = -ENOMEM;
                        break;
                }
                last = (uint64_t) id;
                row->id = (uint64_t) id;
                row->created_usec = (uint64_t) created;
                row->resource = intern(s, resource);
                row->boot_id = intern(s, boot_id);
                row->device_ids = TAKE_PTR(ids);
                if (!row->resource || !row->boot_id) {
                        r = -ENOMEM;
                        break;
                }
                r = free_and_strdup(&row->pod_namespace, store_empty_to_null(store_column_text(st, 5)));
                if (r >= 0)
                        r = free_and_strdup(&row->pod_name, store_empty_to_null(store_column_text(st, 6)));
                if (r >= 0)
                        r = free_and_strdup(&row->container_name, store_empty_to_null(store_column_text(st, 7)));
                if (r < 0)
                        break;
        }
        if (r >= 0 && rc != SQLITE_DONE && rc != SQLITE_ROW)
                r = store_sqlite_to_errno(rc) ?: -EIO;
        sqlite3_reset(st);
        if (r < 0) {
                store_rows_drop(s);
                return r;
        }
        s->rows_loaded = true;
        return 0;
}

int store_rows_ensure(Store *s) {
        return s->rows_loaded ? 0 : store_rows_load(s);
}

/* After a COMMIT that recorded it. On failure the copy is dropped (read again later). */
void store_rows_add(Store *s, uint64_t id, const char *resource, char * const *device_ids,
                    uint64_t created_usec) {
        StoreRow *row;

        if (!s->rows_loaded)
                return;
        row = rows_push(s);
        if (row) {
                *row = (StoreRow) {
                        .id = id,
                        .created_usec = created_usec,
                        .resource = intern(s, resource),
                        .boot_id = intern(s, s->boot_id),
                        .device_ids = strv_pack(device_ids),
                };
                if (row->resource && row->boot_id && row->device_ids) {
                        if (s->holders && holders_add(s->holders, id, resource, device_ids, s->boot_id) < 0)
                                s->holders = holders_free(s->holders);
                        return;
                }
        }
        log_debug("Out of memory following commit of allocation %" PRIu64 "; reading the state again later.", id);
        store_rows_drop(s);
}

/* Committed releases, taken out of the rows and the holder index. */
void store_rows_release(Store *s, const uint64_t *ids, size_t n) {
        size_t kept = 0;

        if (!s->rows_loaded || n == 0)
                return;
        for (size_t i = 0; i < n; i++) {
                StoreRow *row = store_rows_find(s, ids[i]);

                if (!row)
                        continue;
                if (s->holders && holders_remove(s->holders, row->id) < 0)
                        s->holders = holders_free(s->holders);
                /* Emptied but left in place (the id keeps the order for store_rows_find());
                 * the compaction below drops rows without a resource. */
                uint64_t id = row->id;
                row_done(row);
                row->id = id;
        }
        for (size_t i = 0; i < s->n_rows; i++)
                if (s->rows[i].resource)
                        s->rows[kept++] = s->rows[i];
        s->n_rows = kept;
}

