/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store-migrate.c — schema step 3 -> 4: one row per allocation, its device ids packed.
 *
 * Contract: see store.h and store-internal.h. Runs inside the transaction store_migrate()
 * opened (which also commits user_version 4), so a crash at any point leaves a complete
 * version 3 or a complete version 4. Every allocation row, holder and inventory row is
 * kept: the allocation columns are copied as they are, the device rows of each allocation
 * are joined in the order they were written. An allocation whose device rows cannot be
 * joined unambiguously (no device, a non-text id, an id with a line break: the version 3
 * store skipped all but the last at open, and wrote none of them) gets no device ids, so
 * that version 4 skips it at open too, with the reason. The id high-water mark (the
 * AUTOINCREMENT sequence) becomes meta 'id_reserved', so no id is handed out twice.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/store-internal.h"

void (*store_migrate_step_hook)(unsigned step) = NULL;

static const char schema_v4_create[] =
        /* id: chosen by the store (see STORE_ID_BLOCK), never reused; device_ids: see
         * STORE_IDS_SEPARATOR. No other index: every statement reads by id or scans. */
        "CREATE TABLE allocations_v4 ("
        "  id INTEGER PRIMARY KEY,"
        "  resource TEXT NOT NULL,"
        "  created_usec INTEGER NOT NULL,"
        "  boot_id TEXT NOT NULL,"
        "  device_ids TEXT NOT NULL,"
        "  pod_namespace TEXT NOT NULL DEFAULT '',"
        "  pod_name TEXT NOT NULL DEFAULT '',"
        "  container_name TEXT NOT NULL DEFAULT '',"
        "  seen_usec INTEGER NOT NULL DEFAULT 0);"
        "INSERT INTO allocations_v4 (id, resource, created_usec, boot_id, device_ids, pod_namespace, pod_name, "
        "  container_name, seen_usec) "
        "SELECT id, resource, created_usec, boot_id, '', pod_namespace, pod_name, container_name, seen_usec "
        "FROM allocations ORDER BY id;";

/* The id high-water mark: AUTOINCREMENT's sequence (every v3 file has the table; one
 * edited by hand may not, then the largest id left is all there is). */
static const char schema_v4_reserve[] =
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('id_reserved', CAST(max("
        "  coalesce((SELECT CAST(seq AS INTEGER) FROM sqlite_sequence WHERE name = 'allocations'), 0),"
        "  coalesce((SELECT max(id) FROM allocations), 0), 0) AS TEXT));";
static const char schema_v4_reserve_no_sequence[] =
        "INSERT OR REPLACE INTO meta (key, value) VALUES ('id_reserved', CAST(max("
        "  coalesce((SELECT max(id) FROM allocations), 0), 0) AS TEXT));";

static const char schema_v4_finish[] =
        "DROP TABLE allocation_devices;"
        "DROP TABLE allocations;"
        "ALTER TABLE allocations_v4 RENAME TO allocations;";

static void step_done(unsigned step) {
        if (store_migrate_step_hook)
                store_migrate_step_hook(step);
}

/* Writes the joined ids of allocation id ("" when they cannot be joined). */
static int set_ids(sqlite3_stmt *set, sqlite3_int64 id, const char *text, size_t len) {
        int rc;

        if (sqlite3_bind_text(set, 1, text ?: "", text ? (int) len : 0, SQLITE_TRANSIENT) != SQLITE_OK ||
            sqlite3_bind_int64(set, 2, id) != SQLITE_OK)
                rc = SQLITE_NOMEM;
        else
                rc = sqlite3_step(set);
        sqlite3_reset(set);
        sqlite3_clear_bindings(set);
        return rc == SQLITE_DONE ? 0 : (store_sqlite_to_errno(rc) ?: -EIO);
}

/* The device rows, allocation by allocation in the order written, joined into device_ids. */
static int join_devices(sqlite3 *db) {
        sqlite3_stmt *list = NULL, *set = NULL;
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, allocated = 0;
        sqlite3_int64 cur = 0;
        bool have = false, bad = false;
        int rc, r = 0;

        rc = sqlite3_prepare_v2(db, "SELECT allocation_id, device_id FROM allocation_devices "
                                "ORDER BY allocation_id, rowid", -1, &list, NULL);
        if (rc == SQLITE_OK)
                rc = sqlite3_prepare_v2(db, "UPDATE allocations_v4 SET device_ids = ?1 WHERE id = ?2", -1, &set, NULL);
        if (rc != SQLITE_OK) {
                r = store_sqlite_to_errno(rc) ?: -EIO;
                goto finish;
        }
        for (;;) {
                sqlite3_int64 id;
                const unsigned char *t;
                int n;

                rc = sqlite3_step(list);
                if (rc != SQLITE_ROW)
                        break;
                id = sqlite3_column_int64(list, 0);
                if (!have || id != cur) {
                        if (have) {
                                r = set_ids(set, cur, bad ? NULL : buf, len);
                                if (r < 0)
                                        goto finish;
                        }
                        have = true;
                        cur = id;
                        bad = false;
                        len = 0;
                }
                if (bad)
                        continue;
                t = sqlite3_column_text(list, 1);
                n = sqlite3_column_bytes(list, 1);
                if (sqlite3_column_type(list, 1) != SQLITE_TEXT || !t || n <= 0 ||
                    memchr(t, STORE_IDS_SEPARATOR, (size_t) n) || len + (size_t) n + 1 > STORE_PACKED_MAX + 1) {
                        /* Cannot be joined unambiguously (or is beyond what v4 reads). */
                        bad = true;
                        log_debug("Allocation %lld: a device row that schema version 4 cannot hold; "
                                  "it keeps no device ids and is skipped at open.", (long long) id);
                        continue;
                }
                r = array_reserve((void **) &buf, &allocated, len + (size_t) n + 1, 1);
                if (r < 0)
                        goto finish;
                if (len > 0)
                        buf[len++] = STORE_IDS_SEPARATOR;
                memcpy(buf + len, t, (size_t) n);
                len += (size_t) n;
        }
        if (rc != SQLITE_DONE) {
                r = store_sqlite_to_errno(rc) ?: -EIO;
                goto finish;
        }
        if (have)
                r = set_ids(set, cur, bad ? NULL : buf, len);
finish:
        sqlite3_finalize(list);
        sqlite3_finalize(set);
        return r;
}

/* 1 if the file has AUTOINCREMENT's table, 0 if not. */
static int has_sequence(sqlite3 *db) {
        sqlite3_stmt *st = NULL;
        int rc, r;

        rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                                "name = 'sqlite_sequence'", -1, &st, NULL);
        if (rc != SQLITE_OK)
                return store_sqlite_to_errno(rc) ?: -EIO;
        rc = sqlite3_step(st);
        r = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) > 0 : (store_sqlite_to_errno(rc) ?: -EIO);
        sqlite3_finalize(st);
        return r;
}

int store_migrate_v4(sqlite3 *db) {
        int r;

        step_done(0);
        r = store_exec(db, schema_v4_create);
        if (r < 0)
                return r;
        step_done(1);
        r = join_devices(db);
        if (r < 0)
                return r;
        step_done(2);
        r = has_sequence(db);
        if (r >= 0)
                r = store_exec(db, r > 0 ? schema_v4_reserve : schema_v4_reserve_no_sequence);
        if (r >= 0)
                r = store_exec(db, schema_v4_finish);
        if (r < 0)
                return r;
        step_done(3);
        r = store_exec(db, "PRAGMA user_version = 4;");
        if (r < 0)
                return r;
        step_done(4);
        return 0;
}
