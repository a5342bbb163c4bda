/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store.c — allocation state in SQLite: open/check/migrate, one transaction per Allocate.
 * The in-memory rows are in store-rows.c, Allocate and reconciliation in
 * store-allocate.c, the inventory in store-inventory.c.
 *
 * Contract: see store.h. The file is treated as hostile input: it is checked before
 * anything is written, defensive mode is on, the schema is never trusted to run code,
 * and every value read back is type-, length- and UTF-8-checked.
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/holders.h"
#include "daemons/broker/store-internal.h"

static const char * const statement_sql[_STMT_MAX] = {
        [STMT_BEGIN] = "BEGIN IMMEDIATE",
        [STMT_COMMIT] = "COMMIT",
        [STMT_ROLLBACK] = "ROLLBACK",
        /* Schema v4: one row, one page, per allocation (its ids packed, its id chosen). */
        [STMT_INSERT_ALLOCATION] =
                "INSERT INTO allocations (id, resource, created_usec, boot_id, device_ids) "
                "VALUES (?1, ?2, ?3, ?4, ?5)",
        /* All of them, oldest first, read once at open into the store's copy (see
         * StoreRow): the table in rowid order, nothing sorted. */
        [STMT_LIST_ALL] =
                "SELECT id, resource, created_usec, boot_id, device_ids, pod_namespace, pod_name, container_name "
                "FROM allocations ORDER BY id",
        [STMT_DELETE_ALLOCATION] = "DELETE FROM allocations WHERE id = ?1",
        [STMT_SET_HOLDER] =
                ("UPDATE allocations SET pod_namespace = ?2, pod_name = ?3, container_name = ?4, "
                 "seen_usec = ?5 WHERE id = ?1"),
        /* The allocations of a resource, for superseding when the in-memory copy could
         * not be built (out of memory): a scan. Normally the holder index answers. */
        [STMT_LIST_RESOURCE] = "SELECT id, device_ids FROM allocations WHERE resource = ?1",
        [STMT_COUNT] = "SELECT count(*) FROM allocations",
        /* An update in place (the key is unchanged): the meta table's one page. */
        [STMT_RESERVE_IDS] =
                "INSERT INTO meta (key, value) VALUES ('id_reserved', CAST(?1 AS TEXT)) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
};

/* Schema v1. user_version is set in the same transaction, so a crash while creating
 * leaves an empty database that is simply created again. */
static const char schema_v1[] =
        "CREATE TABLE meta ("
        "  key TEXT PRIMARY KEY NOT NULL,"
        "  value TEXT NOT NULL);"
        "CREATE TABLE allocations ("
        "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
        "  resource TEXT NOT NULL,"
        "  created_usec INTEGER NOT NULL,"
        "  boot_id TEXT NOT NULL);"
        "CREATE TABLE allocation_devices ("
        "  allocation_id INTEGER NOT NULL REFERENCES allocations (id) ON DELETE CASCADE,"
        "  device_id TEXT NOT NULL,"
        "  UNIQUE (allocation_id, device_id));"
        "CREATE INDEX allocation_devices_device ON allocation_devices (device_id);"
        "PRAGMA user_version = 1;";

/* Schema v2: which live container holds each allocation, as the kubelet's PodResources
 * reported it (reconciliation); "" and 0 until seen. seen_usec is when that holder was
 * first reported: a reconciliation writes only holders that changed, so that one that
 * changes nothing commits nothing (no fsync before every shared Allocate). A non-empty
 * pod_name is also the durable "PodResources has reported it" fact: such an allocation
 * gets no grace period once it is no longer reported (reconcile.h). The holder is written
 * in the same transaction as the releases of its reconciliation and never set back to
 * "", so no column of its own is needed. */
static const char schema_v2[] =
        "ALTER TABLE allocations ADD COLUMN pod_namespace TEXT NOT NULL DEFAULT '';"
        "ALTER TABLE allocations ADD COLUMN pod_name TEXT NOT NULL DEFAULT '';"
        "ALTER TABLE allocations ADD COLUMN container_name TEXT NOT NULL DEFAULT '';"
        "ALTER TABLE allocations ADD COLUMN seen_usec INTEGER NOT NULL DEFAULT 0;"
        "PRAGMA user_version = 2;";

/* Schema v3: the last GPU inventory the probe reported, so that a broker restarted while
 * the probe is down serves it. device_nodes/by_path_nodes: newline-separated, NULL = none. */
static const char schema_v3[] =
        "CREATE TABLE inventory ("
        "  path TEXT PRIMARY KEY NOT NULL,"
        "  id TEXT NOT NULL,"
        "  vendor TEXT NOT NULL,"
        "  driver TEXT NOT NULL,"
        "  card_node TEXT NOT NULL,"
        "  render_node TEXT NOT NULL,"
        "  health_reason TEXT NOT NULL,"
        "  device_nodes TEXT,"
        "  by_path_nodes TEXT,"
        "  numa_node INTEGER NOT NULL,"
        "  device_id INTEGER NOT NULL,"
        "  healthy INTEGER NOT NULL);"
        "PRAGMA user_version = 3;";

/* Schema v4: one row per allocation, its device ids packed into allocations.device_ids,
 * no allocation_devices table and its two indexes, no AUTOINCREMENT (the store chooses
 * ids: meta 'id_reserved'), so that one Allocate writes one page in the common case
 * (store-migrate.c; the numbers are in docs/PERFORMANCE.md). */

/* Migration steps: schema_steps[v] takes a database from version v to v + 1, either SQL
 * (which sets user_version itself) or a function run in the step's transaction. */
typedef struct SchemaStep {
        const char *sql;
        int (*run)(sqlite3 *db);
} SchemaStep;

static const SchemaStep schema_steps[STORE_SCHEMA_VERSION] = {
        { .sql = schema_v1 },
        { .sql = schema_v2 },
        { .sql = schema_v3 },
        { .run = store_migrate_v4 },
};

int store_sqlite_to_errno(int rc) {
        switch (rc & 0xff) {
        case SQLITE_OK:
        case SQLITE_ROW:
        case SQLITE_DONE:
                return 0;
        case SQLITE_NOMEM:
                return -ENOMEM;
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
                return -EBUSY;
        case SQLITE_CORRUPT:
        case SQLITE_NOTADB:
        case SQLITE_FORMAT:
        case SQLITE_SCHEMA:
                return -EBADMSG;
        case SQLITE_READONLY:
                return -EROFS;
        case SQLITE_PERM:
        case SQLITE_AUTH:
                return -EACCES;
        case SQLITE_FULL:
                return -ENOSPC;
        case SQLITE_TOOBIG:
                return -E2BIG;
        case SQLITE_CONSTRAINT:
                return -EEXIST;
        case SQLITE_MISUSE:
        case SQLITE_RANGE:
                return -EINVAL;
        default:
                return -EIO;
        }
}

/* A TEXT column of at most max bytes of valid UTF-8 without NUL, or NULL. */
const char *store_column_text_max(sqlite3_stmt *st, int col, int max) {
        const unsigned char *t;
        int n;

        if (sqlite3_column_type(st, col) != SQLITE_TEXT)
                return NULL;
        t = sqlite3_column_text(st, col);
        n = sqlite3_column_bytes(st, col);
        if (!t || n < 0 || n > max || !store_utf8_valid(t, (size_t) n))
                return NULL;
        return (const char *) t;
}

/* The same, of at most STORE_STRING_MAX bytes. */
const char *store_column_text(sqlite3_stmt *st, int col) {
        return store_column_text_max(st, col, STORE_STRING_MAX);
}

static int store_error(char **ret_error, int error, const char *path, const char *format, ...)
        __attribute__((format(printf, 4, 5)));
static int store_error(char **ret_error, int error, const char *path, const char *format, ...) {
        _cleanup_free_ char *m = NULL;
        va_list ap;

        if (ret_error) {
                va_start(ap, format);
                if (vasprintf(&m, format, ap) < 0)
                        m = NULL;
                va_end(ap);
                free(*ret_error);
                *ret_error = NULL;
                if (m && asprintf(ret_error, "%s: %s", path, m) < 0)
                        *ret_error = NULL;
        }
        return error;
}

int store_exec(sqlite3 *db, const char *sql) {
        return store_sqlite_to_errno(sqlite3_exec(db, sql, NULL, NULL, NULL));
}

/* Runs a one-row pragma and returns its first column as integer. */
static int store_pragma_int(sqlite3 *db, const char *sql, int64_t *ret) {
        sqlite3_stmt *st = NULL;
        int rc, r;

        rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
        if (rc != SQLITE_OK)
                return store_sqlite_to_errno(rc);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
                *ret = sqlite3_column_int64(st, 0);
                r = 0;
        } else
                r = rc == SQLITE_DONE ? -EBADMSG : store_sqlite_to_errno(rc);
        sqlite3_finalize(st);
        return r;
}

/* Runs a one-row pragma and checks that its first column is the text expect. */
static int store_pragma_expect(sqlite3 *db, const char *sql, const char *expect) {
        sqlite3_stmt *st = NULL;
        int rc, r;

        rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
        if (rc != SQLITE_OK)
                return store_sqlite_to_errno(rc);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
                const unsigned char *t = sqlite3_column_text(st, 0);

                r = t && strcasecmp((const char *) t, expect) == 0 ? 0 : -EBADMSG;
        } else
                r = rc == SQLITE_DONE ? -EBADMSG : store_sqlite_to_errno(rc);
        sqlite3_finalize(st);
        return r;
}

int store_step_done(Store *s, StoreStatement which) {
        sqlite3_stmt *st = s->stmt[which];
        int rc;

        rc = sqlite3_step(st);
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return rc == SQLITE_DONE ? 0 : (store_sqlite_to_errno(rc) ?: -EIO);
}

static int store_create_file(const char *path, char **ret_error) {
        _cleanup_close_ int fd = -EBADF;
        struct stat st;

        /* Create it ourselves so the mode is 0600 regardless of SQLite's default; SQLite
         * gives the -wal and -shm files the same mode. Never follow a symlink. */
        fd = open(path, O_RDWR|O_CREAT|O_CLOEXEC|O_NOFOLLOW|O_NOCTTY, 0600);
        if (fd < 0)
                return store_error(ret_error, negative_errno(), path, "cannot open: %s", strerror(errno));
        if (fstat(fd, &st) < 0)
                return store_error(ret_error, negative_errno(), path, "cannot stat: %s", strerror(errno));
        if (!S_ISREG(st.st_mode))
                return store_error(ret_error, -EBADMSG, path, "not a regular file");
        return 0;
}

static int store_read_meta(Store *s, const char *key, char **ret) {
        sqlite3_stmt *st = NULL;
        int rc, r = 0;

        rc = sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = ?1", -1, &st, NULL);
        if (rc != SQLITE_OK)
                return store_sqlite_to_errno(rc);
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
                const char *v = store_column_text(st, 0);

                r = free_and_strdup(ret, v ?: "");
        } else if (rc == SQLITE_DONE)
                r = free_and_strdup(ret, "");
        else
                r = store_sqlite_to_errno(rc);
        sqlite3_finalize(st);
        return r;
}

static int store_write_meta(Store *s, const char *key, const char *value) {
        sqlite3_stmt *st = NULL;
        int rc;

        rc = sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)",
                                -1, &st, NULL);
        if (rc != SQLITE_OK)
                return store_sqlite_to_errno(rc);
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        sqlite3_finalize(st);
        return rc == SQLITE_DONE ? 0 : (store_sqlite_to_errno(rc) ?: -EIO);
}

int store_checkpoint(Store *s) {
        int frames = 0, copied = 0, rc;

        if (!s)
                return -EINVAL;
        s->checkpoint_asked = false;
        /* Passive: copies what no reader still needs, waits for nobody (the busy handler
         * is not called). Synced: the database file is fsynced before the WAL is reused. */
        rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &frames, &copied);
        if (rc != SQLITE_OK)
                return store_sqlite_to_errno(rc) ?: -EIO;
        if (frames > 0 && copied < frames) {
                log_debug("Checkpointed %d of %d WAL frames of %s: a reader holds the rest.", copied, frames,
                          s->path);
                return -EBUSY;
        }
        /* All copied: the next commit writes the WAL from its start. */
        s->wal_frames = 0;
        return 0;
}

/* SQLite calls this after every commit in WAL mode, in place of its autocheckpoint.
 * frames: the WAL's length now, in pages. It never fails the commit (that has happened):
 * a checkpoint that cannot be done now is tried again after the next commit. */
static int store_wal_hook(void *userdata, sqlite3 *db, const char *name, int frames) {
        Store *s = userdata;
        int r;

        s->wal_frames = frames > 0 ? (size_t) frames : 0;
        if (s->wal_frames < STORE_WAL_CHECKPOINT_FRAMES)
                return SQLITE_OK;
        if (s->checkpoint && s->wal_frames < STORE_WAL_FRAMES_MAX) {
                if (!s->checkpoint_asked) {
                        s->checkpoint_asked = true;
                        s->checkpoint(s, s->checkpoint_userdata);
                }
                return SQLITE_OK;
        }
        r = store_checkpoint(s);
        if (r < 0 && r != -EBUSY)
                log_debug("Checkpoint of %s after a commit failed, trying again after the next one: %s",
                          s->path, strerror(-r));
        return SQLITE_OK;
}

/* The read-only checks of a file not trusted yet: a SQLite database, of a schema
 * version this broker knows, intact, and no foreign tables. */
static int store_check(Store *s, int64_t *ret_version, char **ret_error) {
        int64_t version = 0, n_objects = 0;
        int r;

        r = store_pragma_int(s->db, "PRAGMA user_version", &version);
        if (r == -EBADMSG)
                return store_error(ret_error, r, s->path, "not a SQLite database or corrupt: %s",
                                   sqlite3_errmsg(s->db));
        if (r < 0)
                return store_error(ret_error, r, s->path, "cannot read schema version: %s",
                                   sqlite3_errmsg(s->db));
        if (version > STORE_SCHEMA_VERSION)
                return store_error(ret_error, -EPROTONOSUPPORT, s->path,
                                   "schema version %" PRIi64 " is newer than the supported version %d "
                                   "(written by a newer kgpu?); refusing to use it",
                                   version, STORE_SCHEMA_VERSION);
        if (version < 0)
                return store_error(ret_error, -EBADMSG, s->path,
                                   "invalid schema version %" PRIi64 ", not a kgpu database", version);

        r = store_pragma_expect(s->db, "PRAGMA quick_check(1)", "ok");
        if (r < 0)
                return store_error(ret_error, r == -EBADMSG || r == -EIO ? -EBADMSG : r, s->path,
                                   "integrity check failed, database corrupt: %s",
                                   sqlite3_errmsg(s->db));

        r = store_pragma_int(s->db, "SELECT count(*) FROM sqlite_master", &n_objects);
        if (r < 0)
                return store_error(ret_error, r, s->path, "cannot read schema: %s", sqlite3_errmsg(s->db));
        if (version == 0 && n_objects > 0)
                return store_error(ret_error, -EBADMSG, s->path,
                                   "has tables but no schema version, not a kgpu database; refusing to use it");

        *ret_version = version;
        return 0;
}

/* WAL mode, pragmas, the WAL hook, then each schema step from version up. */
static int store_migrate(Store *s, int64_t version, char **ret_error) {
        char pragmas[128];
        int r;

        r = store_pragma_expect(s->db, "PRAGMA journal_mode = WAL", "wal");
        if (r < 0)
                return store_error(ret_error, r, s->path, "cannot switch to WAL mode: %s",
                                   sqlite3_errmsg(s->db));
        snprintf(pragmas, sizeof(pragmas), "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; "
                 "PRAGMA journal_size_limit = %d;", STORE_WAL_SIZE_MAX);
        r = store_exec(s->db, pragmas);
        if (r < 0)
                return store_error(ret_error, r, s->path, "cannot set pragmas: %s", sqlite3_errmsg(s->db));
        /* Replaces SQLite's autocheckpoint (every 1000 frames, in the committing call, never
         * cutting the file back): see the WAL bound in store.h. */
        (void) sqlite3_wal_hook(s->db, store_wal_hook, s);

        /* Each step is its own transaction that also sets user_version, so a crash in
         * between leaves a database of a complete older version. */
        for (int64_t v = version; v < STORE_SCHEMA_VERSION; v++) {
                r = store_exec(s->db, "BEGIN IMMEDIATE");
                if (r >= 0) {
                        r = schema_steps[v].run ? schema_steps[v].run(s->db) : store_exec(s->db, schema_steps[v].sql);
                        if (r >= 0)
                                r = store_exec(s->db, "COMMIT");
                        if (r < 0 && !sqlite3_get_autocommit(s->db))
                                (void) store_exec(s->db, "ROLLBACK");
                }
                if (r < 0)
                        return store_error(ret_error, r, s->path, "cannot %s schema version %" PRIi64 ": %s",
                                           v == 0 ? "create" : "migrate to", v + 1, sqlite3_errmsg(s->db));
                if (v > 0)
                        log_debug("Migrated %s from schema version %" PRIi64 " to %" PRIi64 ".", s->path, v, v + 1);
        }

        return 0;
}

/* Where allocation ids go on: above the reserved mark and above every stored id (a file
 * edited by hand may have either wrong; the larger is safe). */
static int store_load_ids(Store *s) {
        _cleanup_free_ char *v = NULL;
        int64_t max_id = 0;
        uint64_t reserved = 0;
        char *end = NULL;
        int r;

        r = store_read_meta(s, "id_reserved", &v);
        if (r < 0)
                return r;
        if (!isempty(v)) {
                errno = 0;
                reserved = strtoull(v, &end, 10);
                if (errno != 0 || !end || *end || v[0] < '0' || v[0] > '9' || reserved > INT64_MAX) {
                        log_debug("%s: ignoring the invalid meta id_reserved \"%s\".", s->path, v);
                        reserved = 0;
                }
        }
        r = store_pragma_int(s->db, "SELECT coalesce(max(id), 0) FROM allocations", &max_id);
        if (r < 0)
                return r;
        s->id_reserved = reserved;
        s->next_id = MAX(reserved, (uint64_t) MAX(max_id, 0)) + 1;
        return 0;
}

static int store_prepare(Store *s, char **ret_error) {
        int rc;

        for (size_t i = 0; i < _STMT_MAX; i++) {
                rc = sqlite3_prepare_v3(s->db, statement_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                        &s->stmt[i], NULL);
                if (rc != SQLITE_OK)
                        return store_error(ret_error, -EBADMSG, s->path,
                                           "schema does not match version %d: %s",
                                           STORE_SCHEMA_VERSION, sqlite3_errmsg(s->db));
        }

        return 0;
}

int store_open(const char *directory, const char *boot_id, Store **ret, char **ret_error) {
        _cleanup_(store_freep) Store *s = NULL;
        int64_t version = 0;
        int rc, r;

        if (isempty(directory) || directory[0] != '/')
                return store_error(ret_error, -EINVAL, directory ?: "(null)",
                                   "state directory must be an absolute path");

        s = calloc(1, sizeof(Store));
        if (!s)
                return -ENOMEM;
        if (asprintf(&s->path, "%s/%s", directory, STORE_FILE_NAME) < 0) {
                s->path = NULL;
                return -ENOMEM;
        }
        s->boot_id = strdup(boot_id ?: "");
        if (!s->boot_id)
                return -ENOMEM;

        r = store_create_file(s->path, ret_error);
        if (r < 0)
                return r;

        rc = sqlite3_open_v2(s->path, &s->db,
                             SQLITE_OPEN_READWRITE|SQLITE_OPEN_NOFOLLOW|SQLITE_OPEN_NOMUTEX, NULL);
        if (rc != SQLITE_OK)
                return store_error(ret_error, store_sqlite_to_errno(rc), s->path, "cannot open database: %s",
                                   s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));

        /* Until the file has passed the checks, closing must not write to it (a WAL
         * checkpoint on close would). */
        (void) sqlite3_db_config(s->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
        (void) sqlite3_db_config(s->db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
        (void) sqlite3_db_config(s->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, NULL);
        (void) sqlite3_db_config(s->db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, NULL);
        (void) sqlite3_db_config(s->db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, NULL);
        sqlite3_extended_result_codes(s->db, 1);
        sqlite3_busy_timeout(s->db, STORE_BUSY_TIMEOUT_MS);

        /* Read-only checks first. */
        r = store_check(s, &version, ret_error);
        if (r < 0)
                return r;
        /* Checked: from here on we write. */
        r = store_migrate(s, version, ret_error);
        if (r < 0)
                return r;
        r = store_prepare(s, ret_error);
        if (r < 0)
                return r;

        r = store_read_meta(s, "boot_id", &s->previous_boot_id);
        if (r >= 0)
                r = store_write_meta(s, "boot_id", s->boot_id);
        if (r < 0)
                return store_error(ret_error, r, s->path, "cannot record the boot id: %s",
                                   sqlite3_errmsg(s->db));

        r = store_load_ids(s);
        if (r < 0)
                return store_error(ret_error, r, s->path, "cannot read the allocation ids: %s",
                                   sqlite3_errmsg(s->db));

        r = store_rows_load(s);
        if (r < 0)
                return store_error(ret_error, r, s->path, "cannot read the allocations: %s",
                                   r == -ENOMEM ? strerror(-r) : sqlite3_errmsg(s->db));

        (void) sqlite3_db_config(s->db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, NULL);
        log_debug("Opened %s (schema version %d, previous boot %s).", s->path, STORE_SCHEMA_VERSION,
                  isempty(s->previous_boot_id) ? "none" : s->previous_boot_id);
        *ret = TAKE_PTR(s);
        return 0;
}

Store *store_free(Store *s) {
        if (!s)
                return NULL;
        store_rows_drop(s);
        strv_free(s->names);
        for (size_t i = 0; i < _STMT_MAX; i++)
                sqlite3_finalize(s->stmt[i]);
        sqlite3_close(s->db);
        free(s->path);
        free(s->boot_id);
        free(s->previous_boot_id);
        free(s->skipped_first);
        return mfree(s);
}

const char *store_get_path(const Store *s) {
        return s->path;
}

const char *store_get_previous_boot_id(const Store *s) {
        return s->previous_boot_id ?: "";
}

size_t store_get_skipped_rows(const Store *s, const char **ret_first) {
        if (ret_first)
                *ret_first = s->skipped_first ?: "";
        return s->n_skipped;
}

void store_set_before_commit(Store *s, StoreBeforeCommitFunc cb, void *userdata) {
        s->before_commit = cb;
        s->before_commit_userdata = userdata;
}

