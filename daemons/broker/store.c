/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store.c — allocation state in SQLite: open/check/migrate, one transaction per Allocate.
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

static const char * const statement_sql[_STMT_MAX] = {
        [STMT_BEGIN] = "BEGIN IMMEDIATE",
        [STMT_COMMIT] = "COMMIT",
        [STMT_ROLLBACK] = "ROLLBACK",
        [STMT_INSERT_ALLOCATION] =
                "INSERT INTO allocations (resource, created_usec, boot_id) VALUES (?1, ?2, ?3)",
        [STMT_INSERT_DEVICE] =
                "INSERT INTO allocation_devices (allocation_id, device_id) VALUES (?1, ?2)",
        /* All of them, oldest first, read once at open into the store's copy (see
         * StoreRow): scanned in rowid order, so only each allocation's few device rows
         * are sorted. */
        [STMT_LIST_ALL] =
                "SELECT a.id, a.resource, a.created_usec, a.boot_id, d.device_id, "
                "a.pod_namespace, a.pod_name, a.container_name "
                "FROM allocations AS a "
                "LEFT JOIN allocation_devices AS d ON d.allocation_id = a.id "
                "ORDER BY a.id, d.rowid",
        [STMT_DELETE_ALLOCATION] = "DELETE FROM allocations WHERE id = ?1",
        [STMT_SET_HOLDER] =
                ("UPDATE allocations SET pod_namespace = ?2, pod_name = ?3, container_name = ?4, "
                 "seen_usec = ?5 WHERE id = ?1"),
        /* The stored allocations of a resource holding a device id (superseded by an
         * Allocate of it): through the index on device_id, one row normally. */
        [STMT_FIND_CLAIMERS] =
                "SELECT d.allocation_id FROM allocation_devices AS d "
                "JOIN allocations AS a ON a.id = d.allocation_id "
                "WHERE d.device_id = ?1 AND a.resource = ?2",
        [STMT_COUNT] = "SELECT count(*) FROM allocations",
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

/* Migration steps: schema_steps[v] takes a database from version v to v + 1. */
static const char * const schema_steps[STORE_SCHEMA_VERSION] = {
        schema_v1,
        schema_v2,
        schema_v3,
};

/* One committed allocation as the broker knows it. The broker is the only writer of
 * the database, so after the rows are read once at open, every commit updates this
 * copy and nothing is read back from SQLite again (the sharing check and the
 * reconciliation used to read every allocation on every call). */
typedef struct StoreRow {
        uint64_t id;
        uint64_t created_usec;
        const char *resource;   /* Store.names; NULL: an emptied row (rows_release()) */
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

static int sqlite_to_errno(int rc) {
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

static bool utf8_valid(const unsigned char *s, size_t n) {
        size_t i = 0;

        while (i < n) {
                unsigned char c = s[i];
                uint32_t cp;
                size_t len;

                if (c == 0)
                        return false;
                if (c < 0x80) {
                        i++;
                        continue;
                }
                if ((c & 0xe0) == 0xc0) {
                        len = 2;
                        cp = c & 0x1f;
                } else if ((c & 0xf0) == 0xe0) {
                        len = 3;
                        cp = c & 0x0f;
                } else if ((c & 0xf8) == 0xf0) {
                        len = 4;
                        cp = c & 0x07;
                } else
                        return false;
                if (n - i < len)
                        return false;
                for (size_t j = 1; j < len; j++) {
                        if ((s[i + j] & 0xc0) != 0x80)
                                return false;
                        cp = (cp << 6) | (s[i + j] & 0x3f);
                }
                if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
                    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                        return false;
                i += len;
        }
        return true;
}

/* A TEXT column of at most STORE_STRING_MAX bytes of valid UTF-8 without NUL, or NULL. */
static const char *column_text(sqlite3_stmt *st, int col) {
        const unsigned char *t;
        int n;

        if (sqlite3_column_type(st, col) != SQLITE_TEXT)
                return NULL;
        t = sqlite3_column_text(st, col);
        n = sqlite3_column_bytes(st, col);
        if (!t || n < 0 || n > STORE_STRING_MAX || !utf8_valid(t, (size_t) n))
                return NULL;
        return (const char *) t;
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

static int store_exec(sqlite3 *db, const char *sql) {
        return sqlite_to_errno(sqlite3_exec(db, sql, NULL, NULL, NULL));
}

/* Runs a one-row pragma and returns its first column as integer. */
static int store_pragma_int(sqlite3 *db, const char *sql, int64_t *ret) {
        sqlite3_stmt *st = NULL;
        int rc, r;

        rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
        if (rc != SQLITE_OK)
                return sqlite_to_errno(rc);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
                *ret = sqlite3_column_int64(st, 0);
                r = 0;
        } else
                r = rc == SQLITE_DONE ? -EBADMSG : sqlite_to_errno(rc);
        sqlite3_finalize(st);
        return r;
}

/* Runs a one-row pragma and checks that its first column is the text expect. */
static int store_pragma_expect(sqlite3 *db, const char *sql, const char *expect) {
        sqlite3_stmt *st = NULL;
        int rc, r;

        rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
        if (rc != SQLITE_OK)
                return sqlite_to_errno(rc);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
                const unsigned char *t = sqlite3_column_text(st, 0);

                r = t && strcasecmp((const char *) t, expect) == 0 ? 0 : -EBADMSG;
        } else
                r = rc == SQLITE_DONE ? -EBADMSG : sqlite_to_errno(rc);
        sqlite3_finalize(st);
        return r;
}

static int store_step_done(Store *s, StoreStatement which) {
        sqlite3_stmt *st = s->stmt[which];
        int rc;

        rc = sqlite3_step(st);
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return rc == SQLITE_DONE ? 0 : (sqlite_to_errno(rc) ?: -EIO);
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
                return sqlite_to_errno(rc);
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
                const char *v = column_text(st, 0);

                r = free_and_strdup(ret, v ?: "");
        } else if (rc == SQLITE_DONE)
                r = free_and_strdup(ret, "");
        else
                r = sqlite_to_errno(rc);
        sqlite3_finalize(st);
        return r;
}

static int store_write_meta(Store *s, const char *key, const char *value) {
        sqlite3_stmt *st = NULL;
        int rc;

        rc = sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)",
                                -1, &st, NULL);
        if (rc != SQLITE_OK)
                return sqlite_to_errno(rc);
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        sqlite3_finalize(st);
        return rc == SQLITE_DONE ? 0 : (sqlite_to_errno(rc) ?: -EIO);
}

static const char *nz(const char *s) {
        return s ?: "";
}

static const char *empty_to_null(const char *s) {
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

static void rows_drop(Store *s) {
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

static StoreRow *rows_find(Store *s, uint64_t id) {
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

/* The row being read (its ids in *ids) is complete: kept, its ids packed, if valid;
 * else dropped (logged). */
static int rows_close_last(Store *s, bool bad, char ***ids) {
        _cleanup_strv_free_ char **l = TAKE_PTR(*ids);
        StoreRow *row = s->n_rows > 0 ? &s->rows[s->n_rows - 1] : NULL;

        if (!row || row->device_ids)
                return 0;               /* nothing open */
        if (bad || strv_length(l) == 0) {
                log_debug("Skipping malformed allocation row %" PRIu64 ".", row->id);
                row_done(row);
                s->n_rows--;
                return 0;
        }
        row->device_ids = strv_pack(l);
        return row->device_ids ? 0 : -ENOMEM;
}

/* Reads every allocation (rows failing validation are skipped). */
static int rows_load(Store *s) {
        sqlite3_stmt *st = s->stmt[STMT_LIST_ALL];
        _cleanup_strv_free_ char **ids = NULL;  /* of the row being read */
        uint64_t cur = 0;
        bool bad = false;
        int rc, r = 0;

        rows_drop(s);
        for (;;) {
                sqlite3_int64 id, created;
                const char *resource, *boot_id, *device_id;
                StoreRow *row;

                rc = sqlite3_step(st);
                if (rc != SQLITE_ROW)
                        break;

                id = sqlite3_column_int64(st, 0);
                if (id <= 0 || (uint64_t) id < cur)
                        continue;
                if ((uint64_t) id != cur) {
                        r = rows_close_last(s, bad, &ids);
                        if (r < 0)
                                break;
                        cur = (uint64_t) id;
                        bad = false;
                        row = rows_push(s);
                        if (!row) {
                                r = -ENOMEM;
                                break;
                        }
                        row->id = cur;
                        resource = column_text(st, 1);
                        created = sqlite3_column_int64(st, 2);
                        boot_id = column_text(st, 3);
                        if (isempty(resource) || !boot_id || created < 0) {
                                bad = true;
                                continue;
                        }
                        row->created_usec = (uint64_t) created;
                        row->resource = intern(s, resource);
                        row->boot_id = intern(s, boot_id);
                        if (!row->resource || !row->boot_id) {
                                r = -ENOMEM;
                                break;
                        }
                        r = free_and_strdup(&row->pod_namespace, empty_to_null(column_text(st, 5)));
                        if (r >= 0)
                                r = free_and_strdup(&row->pod_name, empty_to_null(column_text(st, 6)));
                        if (r >= 0)
                                r = free_and_strdup(&row->container_name, empty_to_null(column_text(st, 7)));
                        if (r < 0)
                                break;
                }
                if (bad || sqlite3_column_type(st, 4) == SQLITE_NULL)
                        continue;       /* an allocation without devices: dropped when closed */
                device_id = column_text(st, 4);
                if (isempty(device_id) || strv_length(ids) >= STORE_IDS_MAX) {
                        bad = true;
                        continue;
                }
                r = strv_extend(&ids, device_id);
                if (r < 0)
                        break;
        }
        if (r >= 0 && rc != SQLITE_DONE)
                r = sqlite_to_errno(rc) ?: -EIO;
        sqlite3_reset(st);
        if (r >= 0)
                r = rows_close_last(s, bad, &ids);
        if (r < 0) {
                rows_drop(s);
                return r;
        }
        s->rows_loaded = true;
        return 0;
}

static int rows_ensure(Store *s) {
        return s->rows_loaded ? 0 : rows_load(s);
}

/* After a COMMIT that recorded it. On failure the copy is dropped (read again later). */
static void rows_add(Store *s, uint64_t id, const char *resource, char * const *device_ids,
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
        rows_drop(s);
}

/* Committed releases, taken out of the rows and the holder index. */
static void rows_release(Store *s, const uint64_t *ids, size_t n) {
        size_t kept = 0;

        if (!s->rows_loaded || n == 0)
                return;
        for (size_t i = 0; i < n; i++) {
                StoreRow *row = rows_find(s, ids[i]);

                if (!row)
                        continue;
                if (s->holders && holders_remove(s->holders, row->id) < 0)
                        s->holders = holders_free(s->holders);
                /* Emptied but left in place (the id keeps the order for rows_find());
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

int store_checkpoint(Store *s) {
        int frames = 0, copied = 0, rc;

        if (!s)
                return -EINVAL;
        s->checkpoint_asked = false;
        /* Passive: copies what no reader still needs, waits for nobody (the busy handler
         * is not called). Synced: the database file is fsynced before the WAL is reused. */
        rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &frames, &copied);
        if (rc != SQLITE_OK)
                return sqlite_to_errno(rc) ?: -EIO;
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

int store_open(const char *directory, const char *boot_id, Store **ret, char **ret_error) {
        _cleanup_(store_freep) Store *s = NULL;
        int64_t version = 0, n_objects = 0;
        char pragmas[128];
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
                return store_error(ret_error, sqlite_to_errno(rc), s->path, "cannot open database: %s",
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

        /* Checked: from here on we write. */
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
                        r = store_exec(s->db, schema_steps[v]);
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

        for (size_t i = 0; i < _STMT_MAX; i++) {
                rc = sqlite3_prepare_v3(s->db, statement_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                        &s->stmt[i], NULL);
                if (rc != SQLITE_OK)
                        return store_error(ret_error, -EBADMSG, s->path,
                                           "schema does not match version %d: %s",
                                           STORE_SCHEMA_VERSION, sqlite3_errmsg(s->db));
        }

        r = store_read_meta(s, "boot_id", &s->previous_boot_id);
        if (r >= 0)
                r = store_write_meta(s, "boot_id", s->boot_id);
        if (r < 0)
                return store_error(ret_error, r, s->path, "cannot record the boot id: %s",
                                   sqlite3_errmsg(s->db));

        r = rows_load(s);
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
        rows_drop(s);
        strv_free(s->names);
        for (size_t i = 0; i < _STMT_MAX; i++)
                sqlite3_finalize(s->stmt[i]);
        sqlite3_close(s->db);
        free(s->path);
        free(s->boot_id);
        free(s->previous_boot_id);
        return mfree(s);
}

const char *store_get_path(const Store *s) {
        return s->path;
}

const char *store_get_previous_boot_id(const Store *s) {
        return s->previous_boot_id ?: "";
}

void store_set_before_commit(Store *s, StoreBeforeCommitFunc cb, void *userdata) {
        s->before_commit = cb;
        s->before_commit_userdata = userdata;
}

static int store_insert_allocation(Store *s, const char *resource, char * const *ids,
                                   uint64_t created_usec, uint64_t *ret_id) {
        sqlite3_stmt *st = s->stmt[STMT_INSERT_ALLOCATION];
        sqlite3_int64 id;
        int r;

        if (sqlite3_bind_text(st, 1, resource, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_int64(st, 2, (sqlite3_int64) MIN(created_usec, (uint64_t) INT64_MAX)) != SQLITE_OK ||
            sqlite3_bind_text(st, 3, s->boot_id, -1, SQLITE_STATIC) != SQLITE_OK) {
                sqlite3_reset(st);
                sqlite3_clear_bindings(st);
                return -ENOMEM;
        }
        r = store_step_done(s, STMT_INSERT_ALLOCATION);
        if (r < 0)
                return r;
        id = sqlite3_last_insert_rowid(s->db);

        st = s->stmt[STMT_INSERT_DEVICE];
        for (char * const *i = ids; *i; i++) {
                if (sqlite3_bind_int64(st, 1, id) != SQLITE_OK ||
                    sqlite3_bind_text(st, 2, *i, -1, SQLITE_STATIC) != SQLITE_OK) {
                        sqlite3_reset(st);
                        sqlite3_clear_bindings(st);
                        return -ENOMEM;
                }
                r = store_step_done(s, STMT_INSERT_DEVICE);
                if (r < 0)
                        return r;
        }
        *ret_id = (uint64_t) id;
        return 0;
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

/* Appends the stored allocations of resource that hold device id, for request. */
static int store_find_claimers(Store *s, const char *resource, const char *id, size_t request,
                               StoreSuperseded **list, size_t *n, size_t *allocated) {
        sqlite3_stmt *st = s->stmt[STMT_FIND_CLAIMERS];
        int rc = SQLITE_DONE, r = 0;

        if (sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC) != SQLITE_OK ||
            sqlite3_bind_text(st, 2, resource, -1, SQLITE_STATIC) != SQLITE_OK)
                r = -ENOMEM;
        while (r >= 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
                sqlite3_int64 v = sqlite3_column_int64(st, 0);

                if (v <= 0)
                        continue;       /* never read at open either */
                r = array_reserve((void **) list, allocated, *n + 1, sizeof(StoreSuperseded));
                if (r >= 0)
                        (*list)[(*n)++] = (StoreSuperseded) { .id = (uint64_t) v, .request = request };
        }
        if (r >= 0 && rc != SQLITE_DONE)
                r = sqlite_to_errno(rc) ?: -EIO;
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return r;
}

/* The allocations stored once the deletions of this transaction are committed. */
static int store_count_kept(Store *s, const uint64_t *deleted, size_t n_deleted, size_t *ret) {
        sqlite3_stmt *st = s->stmt[STMT_COUNT];
        size_t n;
        int rc;

        if (s->rows_loaded) {
                n = s->n_rows;
                for (size_t i = 0; i < n_deleted; i++)
                        if (rows_find(s, deleted[i]) && n > 0)
                                n--;
                *ret = n;
                return 0;
        }
        /* Without the copy (it could not be read): ask SQL, inside the transaction. */
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
                *ret = (size_t) MAX(sqlite3_column_int64(st, 0), 0);
        sqlite3_reset(st);
        return rc == SQLITE_ROW ? 0 : (sqlite_to_errno(rc) ?: -EIO);
}

int store_allocate(Store *s, const char *resource, char ** const *requests, size_t n_requests,
                   uint64_t created_usec, uint64_t *ret_ids,
                   StoreSuperseded **ret_superseded, size_t *ret_n_superseded) {
        _cleanup_free_ uint64_t *ids = NULL, *old_ids = NULL;
        _cleanup_free_ StoreSuperseded *old = NULL;
        size_t n_old = 0, allocated_old = 0, n_kept = 0;
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
        if (!ids)
                return -ENOMEM;
        /* The copy answers the cap's count (SQL does without it). */
        (void) rows_ensure(s);

        r = store_step_done(s, STMT_BEGIN);
        if (r < 0)
                return r;

        /* Superseded: every stored allocation of the resource holding one of the call's
         * ids, each once, with the first request claiming it. Found before anything is
         * inserted, so the call never supersedes itself. */
        for (size_t i = 0; i < n_requests; i++)
                for (char * const *j = requests[i]; *j; j++) {
                        r = store_find_claimers(s, resource, *j, i, &old, &n_old, &allocated_old);
                        if (r < 0)
                                goto rollback;
                }
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

        for (size_t i = 0; i < n_requests; i++) {
                r = store_insert_allocation(s, resource, requests[i], created_usec, &ids[i]);
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

        log_debug("Committed %zu allocation(s) of %s, %zu superseded.", n_requests, resource, n_old);
        rows_release(s, old_ids, n_old);
        for (size_t i = 0; i < n_requests; i++)
                rows_add(s, ids[i], resource, requests[i], created_usec);
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

        if (rows_ensure(s) >= 0)
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

        if (!s || rows_ensure(s) < 0)
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

        r = rows_ensure(s);
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

static int store_bind_text(sqlite3_stmt *st, int i, const char *v) {
        return sqlite3_bind_text(st, i, v ?: "", -1, SQLITE_STATIC) == SQLITE_OK ? 0 : -ENOMEM;
}

static bool holder_unchanged(const StoreRow *row, const StoreHolder *h) {
        return streq(nz(row->pod_namespace), nz(h->pod_namespace)) && streq(nz(row->pod_name), nz(h->pod_name)) &&
               streq(nz(row->container_name), nz(h->container_name));
}

/* Committed holders, copied to the rows. */
static void rows_set_holders(Store *s, const StoreHolder * const *set, size_t n) {
        for (size_t i = 0; s->rows_loaded && i < n; i++) {
                StoreRow *row = rows_find(s, set[i]->id);

                if (row && (free_and_strdup(&row->pod_namespace, empty_to_null(set[i]->pod_namespace)) < 0 ||
                            free_and_strdup(&row->pod_name, empty_to_null(set[i]->pod_name)) < 0 ||
                            free_and_strdup(&row->container_name, empty_to_null(set[i]->container_name)) < 0))
                        rows_drop(s);   /* read again when next needed */
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
        (void) rows_ensure(s);
        for (size_t i = 0; i < n_release; i++)
                if (!s->rows_loaded || rows_find(s, release[i]))
                        del[n_del++] = release[i];
        for (size_t i = 0; i < n_holders; i++) {
                const StoreRow *row = s->rows_loaded ? rows_find(s, holders[i].id) : NULL;

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
        rows_release(s, del, n_del);
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
                return sqlite_to_errno(rc) ?: -EIO;
        sqlite3_bind_int64(st, 1, (sqlite3_int64) MIN(id, (uint64_t) INT64_MAX));
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
                const char *ns = column_text(st, 0), *pod = column_text(st, 1), *c = column_text(st, 2);

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
                r = rc == SQLITE_DONE ? -ENOENT : (sqlite_to_errno(rc) ?: -EIO);
        sqlite3_finalize(st);
        return r;
}

void store_holder_done(StoreHolder *h) {
        h->pod_namespace = mfree(h->pod_namespace);
        h->pod_name = mfree(h->pod_name);
        h->container_name = mfree(h->container_name);
}

#define STORE_NODES_MAX 4096    /* joined device node lists read back */

static const char *column_text_max(sqlite3_stmt *st, int col, int max) {
        const unsigned char *t;
        int n;

        if (sqlite3_column_type(st, col) != SQLITE_TEXT)
                return NULL;
        t = sqlite3_column_text(st, col);
        n = sqlite3_column_bytes(st, col);
        if (!t || n < 0 || n > max || !utf8_valid(t, (size_t) n))
                return NULL;
        return (const char *) t;
}

int store_save_inventory(Store *s, const StoreInventoryGpu *gpus, size_t n) {
        sqlite3_stmt *st = NULL;
        int rc, r;

        if (!s || (n > 0 && !gpus))
                return -EINVAL;

        r = store_step_done(s, STMT_BEGIN);
        if (r < 0)
                return r;
        r = store_exec(s->db, "DELETE FROM inventory");
        if (r < 0)
                goto rollback;
        rc = sqlite3_prepare_v2(s->db,
                                "INSERT OR REPLACE INTO inventory (path, id, vendor, driver, card_node, render_node, "
                                "health_reason, device_nodes, by_path_nodes, numa_node, device_id, healthy) "
                                "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)", -1, &st, NULL);
        if (rc != SQLITE_OK) {
                r = sqlite_to_errno(rc) ?: -EIO;
                goto rollback;
        }
        for (size_t i = 0; i < n; i++) {
                const StoreInventoryGpu *g = &gpus[i];

                if (isempty(g->path) || isempty(g->id))
                        continue;
                if (store_bind_text(st, 1, g->path) < 0 || store_bind_text(st, 2, g->id) < 0 ||
                    store_bind_text(st, 3, g->vendor) < 0 || store_bind_text(st, 4, g->driver) < 0 ||
                    store_bind_text(st, 5, g->card_node) < 0 || store_bind_text(st, 6, g->render_node) < 0 ||
                    store_bind_text(st, 7, g->health_reason) < 0 ||
                    (g->device_nodes ? store_bind_text(st, 8, g->device_nodes) < 0
                                     : sqlite3_bind_null(st, 8) != SQLITE_OK) ||
                    (g->by_path_nodes ? store_bind_text(st, 9, g->by_path_nodes) < 0
                                      : sqlite3_bind_null(st, 9) != SQLITE_OK) ||
                    sqlite3_bind_int64(st, 10, g->numa_node) != SQLITE_OK ||
                    sqlite3_bind_int64(st, 11, g->device_id) != SQLITE_OK ||
                    sqlite3_bind_int(st, 12, g->healthy ? 1 : 0) != SQLITE_OK) {
                        r = -ENOMEM;
                        goto rollback;
                }
                rc = sqlite3_step(st);
                sqlite3_reset(st);
                sqlite3_clear_bindings(st);
                if (rc != SQLITE_DONE) {
                        r = sqlite_to_errno(rc) ?: -EIO;
                        goto rollback;
                }
        }
        sqlite3_finalize(st);
        st = NULL;
        r = store_step_done(s, STMT_COMMIT);
        if (r < 0)
                goto rollback;
        return 0;

rollback:
        sqlite3_finalize(st);
        if (!sqlite3_get_autocommit(s->db))
                (void) store_step_done(s, STMT_ROLLBACK);
        return r;
}

int store_foreach_inventory(Store *s, StoreInventoryFunc cb, void *userdata) {
        sqlite3_stmt *st = NULL;
        int rc, r = 0, n = 0;

        rc = sqlite3_prepare_v2(s->db,
                                "SELECT path, id, vendor, driver, card_node, render_node, health_reason, "
                                "device_nodes, by_path_nodes, numa_node, device_id, healthy FROM inventory "
                                "ORDER BY path LIMIT 4096", -1, &st, NULL);
        if (rc != SQLITE_OK)
                return sqlite_to_errno(rc) ?: -EIO;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                StoreInventoryGpu g = {
                        .path = column_text(st, 0),
                        .id = column_text(st, 1),
                        .vendor = column_text(st, 2),
                        .driver = column_text(st, 3),
                        .card_node = column_text(st, 4),
                        .render_node = column_text(st, 5),
                        .health_reason = column_text(st, 6),
                        .device_nodes = column_text_max(st, 7, STORE_NODES_MAX),
                        .by_path_nodes = column_text_max(st, 8, STORE_NODES_MAX),
                };
                int64_t numa = sqlite3_column_int64(st, 9), dev = sqlite3_column_int64(st, 10),
                        healthy = sqlite3_column_int64(st, 11);

                if (isempty(g.path) || isempty(g.id) || !g.vendor || !g.driver || !g.card_node ||
                    !g.render_node || !g.health_reason || numa < -1 || numa > INT32_MAX ||
                    dev < 0 || dev > UINT16_MAX || (healthy != 0 && healthy != 1) ||
                    (sqlite3_column_type(st, 7) != SQLITE_NULL && !g.device_nodes) ||
                    (sqlite3_column_type(st, 8) != SQLITE_NULL && !g.by_path_nodes)) {
                        log_debug("Skipping a malformed inventory row.");
                        continue;
                }
                g.numa_node = (int32_t) numa;
                g.device_id = (uint16_t) dev;
                g.healthy = healthy == 1;
                r = cb(&g, userdata);
                if (r < 0)
                        break;
                n++;
        }
        if (r >= 0 && rc != SQLITE_DONE)
                r = sqlite_to_errno(rc) ?: -EIO;
        sqlite3_finalize(st);
        return r < 0 ? r : n;
}
