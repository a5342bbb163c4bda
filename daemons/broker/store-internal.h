/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store-internal.h — what the store's modules share (store.c: open, check, migrate;
 * store-rows.c: the in-memory copy of the allocations; store-allocate.c: Allocate,
 * reconciliation, holders; store-inventory.c: the probe's last inventory). Nothing
 * outside them includes it.
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
#define STORE_IDS_MAX 1024      /* device ids per allocation read back */

typedef enum StoreStatement {
        STMT_BEGIN,
        STMT_COMMIT,
        STMT_ROLLBACK,
        STMT_INSERT_ALLOCATION,
        STMT_INSERT_DEVICE,
        STMT_LIST_ALL,
        STMT_DELETE_ALLOCATION,
        STMT_SET_HOLDER,
        STMT_FIND_CLAIMERS,
        STMT_COUNT,
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
