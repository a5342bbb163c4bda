/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store-internal.h — what the store's modules share (store.c: open, check, migrate;
 * store-rows.c: the in-memory copy of the allocations; store-allocate.c: Allocate,
 * reconciliation, holders; store-inventory.c: the probe's last inventory; store-pack.c:
 * the packed device ids column; store-migrate.c: the step to schema v4). Nothing outside
 * them (and their tests) includes it.
 *
 * Contract: as store.h. Helpers return 0/positive or a negative errno; the column
 * readers return NULL for anything that is not valid UTF-8 text within bounds.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "daemons/broker/holders.h"
#include "daemons/broker/store.h"

#define STORE_STRING_MAX 256    /* resource names, device ids, boot ids read back */
#define STORE_IDS_MAX 1024      /* device ids per allocation, written and read back */

/* Schema v4 keeps an allocation's device ids in one TEXT column, allocations.device_ids:
 * the ids in the order of the request, joined by STORE_IDS_SEPARATOR; each id 1 to
 * STORE_STRING_MAX bytes of valid UTF-8 without NUL or separator, 1 to STORE_IDS_MAX ids,
 * no id twice. Anything else read back is a malformed row: skipped, with the reason. */
#define STORE_IDS_SEPARATOR '\n'
#define STORE_PACKED_MAX (STORE_IDS_MAX * (STORE_STRING_MAX + 1))

/* Allocation ids are chosen by the store (no AUTOINCREMENT and its sqlite_sequence page):
 * meta 'id_reserved' is the highest id that may have been handed out; an Allocate that
 * needs an id above it raises it by STORE_ID_BLOCK in its own transaction (two more pages,
 * once per STORE_ID_BLOCK allocations). An id is never handed out twice, as before. */
#define STORE_ID_BLOCK 1024

typedef enum StoreStatement {
        STMT_BEGIN,
        STMT_COMMIT,
        STMT_ROLLBACK,
        STMT_INSERT_ALLOCATION,
        STMT_LIST_ALL,
        STMT_DELETE_ALLOCATION,
        STMT_SET_HOLDER,
        STMT_LIST_RESOURCE,
        STMT_COUNT,
        STMT_RESERVE_IDS,
        _STMT_MAX,
} StoreStatement;

/* One committed allocation as the broker knows it. The broker is the only writer of
 * the database, so after the rows are read once at open, every commit updates this
 * copy and nothing is read back from SQLite again (the sharing check and the
 * reconciliation used to read every allocation on every call). */
typedef struct StoreRow {
        uint64_t id;
        uint64_t created_usec;
        const char *resource;   /* Store.names; NULL: an emptied row (store_rows_release()) */
        const char *boot_id;    /* Store.names */
        char **device_ids;      /* strv_pack() once complete: one allocation */
        char *pod_namespace;    /* NULL: "" */
        char *pod_name;         /* NULL: "" (not seen yet: PodResources never reported it) */
        char *container_name;
} StoreRow;

struct Store {
        sqlite3 *db;
        char *path;
        char *boot_id;
        char *previous_boot_id;
        sqlite3_stmt *stmt[_STMT_MAX];
        StoreBeforeCommitFunc before_commit;
        void *before_commit_userdata;
        StoreCheckpointFunc checkpoint;
        void *checkpoint_userdata;
        size_t wal_frames;              /* after the last commit or checkpoint */
        bool checkpoint_asked;          /* the taker was asked since the last checkpoint */
        size_t max_allocations;         /* 0: no cap */
        uint64_t next_id;               /* the id the next allocation gets */
        uint64_t id_reserved;           /* meta 'id_reserved' as committed */
        size_t n_skipped;               /* malformed allocation rows at the last read */
        char *skipped_first;            /* why the first of them was skipped */
        /* The committed allocations by id; valid while rows_loaded. A copy that could not
         * follow a commit (out of memory) is dropped and read again when next needed. */
        StoreRow *rows;
        size_t n_rows, allocated_rows;
        char **names;           /* resource names and boot ids of the rows, each once */
        bool rows_loaded;
        Holders *holders;       /* index over rows for the sharing check; NULL: build anew */
};


int store_sqlite_to_errno(int rc);
const char *store_column_text_max(sqlite3_stmt *st, int col, int max);
const char *store_column_text(sqlite3_stmt *st, int col);
int store_exec(sqlite3 *db, const char *sql);
int store_step_done(Store *s, StoreStatement which);
const char *store_nz(const char *s);
const char *store_empty_to_null(const char *s);
void store_rows_drop(Store *s);
StoreRow *store_rows_find(Store *s, uint64_t id);
int store_rows_load(Store *s);
int store_rows_ensure(Store *s);
void store_rows_add(Store *s, uint64_t id, const char *resource, char * const *device_ids,
                    uint64_t created_usec);
void store_rows_release(Store *s, const uint64_t *ids, size_t n);
int store_bind_text(sqlite3_stmt *st, int i, const char *v);

bool store_utf8_valid(const unsigned char *s, size_t n);
/* ids (a strv) as the packed column's text (malloc'd, *ret_len bytes without the NUL);
 * -EINVAL if they break the rule above (none, too many, an id empty, too long, not UTF-8,
 * with a separator, or twice). */
int store_ids_pack(char * const *ids, char **ret, size_t *ret_len);
/* The packed column's len bytes as a strv in one allocation (free()); -EBADMSG with the
 * reason in problem (if not NULL) when they break the rule. */
int store_ids_unpack(const void *data, size_t len, char ***ret, char *problem, size_t problem_size);

/* Schema step 3 -> 4 (store-migrate.c), run inside the caller's transaction. */
int store_migrate_v4(sqlite3 *db);
/* Test hook: called after each statement of store_migrate_v4() with its number. */
extern void (*store_migrate_step_hook)(unsigned step);
