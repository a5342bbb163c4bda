/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-store.c — the broker's SQLite store: create, reopen, versions, corruption, crashes. */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common/util.h"
#include "daemons/broker/holders.h"
#include "daemons/broker/store.h"
#include "tests/unit/test-main.h"

/* Schema v4 keeps an allocation's ids in one column, joined by line breaks: the number
 * of ids stored, and whether an allocation holds one. */
#define N_IDS_SQL "SELECT coalesce(sum(length(device_ids) - length(replace(device_ids, char(10), '')) + 1), 0) FROM allocations"
#define HOLDS(id) "instr(char(10) || device_ids || char(10), char(10) || '" id "' || char(10)) > 0"

static char dir[] = "/tmp/kgpu-test-store-XXXXXX";
static char db_path[256];

static void setup(void) {
        strcpy(dir, "/tmp/kgpu-test-store-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(db_path, sizeof(db_path), "%s/%s", dir, STORE_FILE_NAME);
}

static void teardown(void) {
        static const char * const names[] = { STORE_FILE_NAME, STORE_FILE_NAME "-wal", STORE_FILE_NAME "-shm",
                                              STORE_FILE_NAME "-journal" };
        char p[300];

        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
                (void) unlink(p);
        }
        (void) rmdir(dir);
}

static bool file_exists(const char *suffix) {
        char p[300];

        snprintf(p, sizeof(p), "%s%s", db_path, suffix);
        return access(p, F_OK) == 0;
}

/* Reads the whole database file (to prove it was left untouched). */
static char *read_file(size_t *ret_len) {
        FILE *f = fopen(db_path, "re");
        char *buf;
        long n;

        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
        n = ftell(f);
        ck_assert_int_ge(n, 0);
        rewind(f);
        buf = malloc((size_t) n + 1);
        ck_assert_ptr_nonnull(buf);
        ck_assert_uint_eq(fread(buf, 1, (size_t) n, f), (size_t) n);
        fclose(f);
        *ret_len = (size_t) n;
        return buf;
}

static void write_file(const void *data, size_t len) {
        int fd = open(db_path, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0600);

        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, data, len), (ssize_t) len);
        ck_assert_int_eq(fsync(fd), 0);
        close(fd);
}

/* Runs SQL directly, bypassing the store (plays the part of another program). */
static void raw_exec(const char *sql) {
        sqlite3 *db = NULL;

        ck_assert_int_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, NULL), SQLITE_OK);
        ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
        ck_assert_int_eq(sqlite3_close(db), SQLITE_OK);
}

static long long raw_int(const char *sql) {
        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        long long v;

        ck_assert_int_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
        ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
        v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        sqlite3_close(db);
        return v;
}

typedef struct Seen {
        size_t n;
        uint64_t ids[64];
        char resources[64][64];
        char devices[64][128];
        size_t n_devices[64];
        uint64_t created[64];
        char boot[64][40];
} Seen;

static int collect(uint64_t id, const char *resource, char * const *device_ids, uint64_t created_usec,
                   const char *boot_id, bool seen, void *userdata) {
        Seen *s = userdata;
        _cleanup_free_ char *j = strv_join((char **) device_ids, ",");

        ck_assert_uint_lt(s->n, 64);
        s->ids[s->n] = id;
        snprintf(s->resources[s->n], sizeof(s->resources[0]), "%s", resource);
        snprintf(s->devices[s->n], sizeof(s->devices[0]), "%s", j);
        s->n_devices[s->n] = strv_length((char **) device_ids);
        s->created[s->n] = created_usec;
        snprintf(s->boot[s->n], sizeof(s->boot[0]), "%s", boot_id);
        s->n++;
        return 0;
}

static int count_cb(uint64_t id, const char *resource, char * const *device_ids, uint64_t created_usec,
                    const char *boot_id, bool seen, void *userdata) {
        return 0;
}

static Store *open_ok(const char *boot) {
        _cleanup_free_ char *err = NULL;
        Store *s = NULL;
        int r;

        r = store_open(dir, boot, &s, &err);
        ck_assert_msg(r == 0, "store_open: %d %s", r, err ?: "");
        ck_assert_ptr_null(err);
        return s;
}

START_TEST(test_store_create) {
        _cleanup_(store_freep) Store *s = NULL;
        struct stat st;
        Seen seen = {};

        s = open_ok("boot-1");
        ck_assert_int_eq(stat(db_path, &st), 0);
        ck_assert_int_eq(st.st_mode & 07777, 0600);
        ck_assert_str_eq(store_get_previous_boot_id(s), "");
        ck_assert_str_eq(store_get_path(s), db_path);
        ck_assert_int_eq(store_foreach_allocation(s, 0, collect, &seen), 0);
        ck_assert_uint_eq(seen.n, 0);
        /* WAL mode: the -wal file exists while open, and has our mode. */
        ck_assert(file_exists("-wal"));
        {
                char wal[300];

                snprintf(wal, sizeof(wal), "%s-wal", db_path);
                ck_assert_int_eq(stat(wal, &st), 0);
                ck_assert_int_eq(st.st_mode & 07777, 0600);
        }
        s = store_free(s);

        ck_assert_int_eq(raw_int("PRAGMA user_version"), STORE_SCHEMA_VERSION);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                                 "('meta', 'allocations', 'inventory')"), 3);
        /* Schema v4: no device table, no index on the allocations beside the rowid. */
        ck_assert_int_eq(raw_int("SELECT count(*) FROM sqlite_master WHERE name = 'allocation_devices'"), 0);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'allocations'"), 0);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM pragma_journal_mode WHERE journal_mode = 'wal'"), 1);

        s = open_ok("boot-2");
        ck_assert_str_eq(store_get_previous_boot_id(s), "boot-1");
}
END_TEST

START_TEST(test_store_reopen_sees_commits) {
        _cleanup_(store_freep) Store *s = NULL;
        char *c1[] = { (char *) "0000:03:00.0", NULL };
        char *c2[] = { (char *) "0000:04:00.0", (char *) "0000:05:00.0", NULL };
        char **reqs[] = { c1, c2 };
        uint64_t ids[2] = {}, ids2[1] = {};
        Seen seen = {};

        s = open_ok("boot-a");
        ck_assert_int_eq(store_allocate(s, "gpu.intel.com/i915", reqs, 2, 1234, ids, NULL, NULL), 0);
        ck_assert_uint_gt(ids[0], 0);
        ck_assert_uint_gt(ids[1], ids[0]);
        s = store_free(s);

        s = open_ok("boot-b");
        ck_assert_int_eq(store_foreach_allocation(s, 0, collect, &seen), 2);
        ck_assert_uint_eq(seen.n, 2);
        ck_assert_uint_eq(seen.ids[0], ids[0]);
        ck_assert_str_eq(seen.resources[0], "gpu.intel.com/i915");
        ck_assert_str_eq(seen.devices[0], "0000:03:00.0");
        ck_assert_str_eq(seen.devices[1], "0000:04:00.0,0000:05:00.0");
        ck_assert_uint_eq(seen.created[1], 1234);
        ck_assert_str_eq(seen.boot[1], "boot-a");

        /* Ids are never reused, limits apply. */
        ck_assert_int_eq(store_allocate(s, "gpu.intel.com/xe", &reqs[0], 1, 99, ids2, NULL, NULL), 0);
        ck_assert_uint_gt(ids2[0], ids[1]);
        /* A limit keeps the newest, listed oldest first. */
        memset(&seen, 0, sizeof(seen));
        ck_assert_int_eq(store_foreach_allocation(s, 2, collect, &seen), 2);
        ck_assert_uint_eq(seen.n, 2);
        ck_assert_uint_eq(seen.ids[0], ids[1]);
        ck_assert_uint_eq(seen.ids[1], ids2[0]);
        ck_assert_str_eq(seen.resources[1], "gpu.intel.com/xe");
        memset(&seen, 0, sizeof(seen));
        ck_assert_int_eq(store_foreach_allocation(s, 0, collect, &seen), 3);
}
END_TEST

START_TEST(test_store_invalid_args) {
        _cleanup_(store_freep) Store *s = NULL;
        _cleanup_free_ char *err = NULL;
        char *empty[] = { NULL };
        char *one[] = { (char *) "x", NULL };
        char **reqs[] = { one, empty };
        Store *t = NULL;

        s = open_ok("b");
        ck_assert_int_eq(store_allocate(s, "r", reqs, 0, 1, NULL, NULL, NULL), -EINVAL);
        ck_assert_int_eq(store_allocate(s, "r", reqs, 2, 1, NULL, NULL, NULL), -EINVAL);
        ck_assert_int_eq(store_allocate(s, "", reqs, 1, 1, NULL, NULL, NULL), -EINVAL);
        ck_assert_int_eq(store_open("relative/dir", "b", &t, &err), -EINVAL);
        ck_assert_ptr_null(t);
        ck_assert_ptr_nonnull(err);
}
END_TEST

START_TEST(test_store_newer_version_refused) {
        _cleanup_free_ char *err = NULL, *before = NULL, *after = NULL;
        size_t n_before, n_after;
        Store *s = NULL;
        char sql[64];

        s = open_ok("b");
        s = store_free(s);
        snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", STORE_SCHEMA_VERSION + 1);
        raw_exec(sql);
        /* A WAL database left by "a newer broker": keep its WAL around too. */
        before = read_file(&n_before);

        ck_assert_int_eq(store_open(dir, "b", &s, &err), -EPROTONOSUPPORT);
        ck_assert_ptr_null(s);
        ck_assert_ptr_nonnull(err);
        ck_assert_msg(strstr(err, "newer") && strstr(err, db_path), "message: %s", err);

        after = read_file(&n_after);
        ck_assert_uint_eq(n_before, n_after);
        ck_assert(memcmp(before, after, n_before) == 0);
        ck_assert_int_eq(raw_int("PRAGMA user_version"), STORE_SCHEMA_VERSION + 1);
}
END_TEST

START_TEST(test_store_garbage_refused) {
        _cleanup_free_ char *err = NULL, *after = NULL;
        char garbage[8192];
        size_t n;
        Store *s = NULL;

        for (size_t i = 0; i < sizeof(garbage); i++)
                garbage[i] = (char) ("not a database "[i % 15]);
        write_file(garbage, sizeof(garbage));

        ck_assert_int_eq(store_open(dir, "b", &s, &err), -EBADMSG);
        ck_assert_ptr_null(s);
        ck_assert_msg(err && strstr(err, db_path), "message: %s", err ?: "(null)");

        after = read_file(&n);
        ck_assert_uint_eq(n, sizeof(garbage));
        ck_assert(memcmp(after, garbage, n) == 0);
        ck_assert(!file_exists("-wal"));
        ck_assert(!file_exists("-journal"));
}
END_TEST

START_TEST(test_store_corrupt_page_refused) {
        _cleanup_free_ char *err = NULL, *before = NULL, *after = NULL;
        size_t n_before, n_after;
        Store *s = NULL;
        int fd;

        /* Enough rows for several pages (distinct ids: an id allocated again supersedes its
         * older allocation), then checkpointed into the main file on close. */
        s = open_ok("b");
        for (int i = 0; i < 300; i++) {
                char a[32], b[32];
                char *ids[] = { a, b, NULL };
                char **reqs[] = { ids };

                snprintf(a, sizeof(a), "0000:%02x:00.0-%d", i % 256, i);
                snprintf(b, sizeof(b), "0000:%02x:00.1-%d", i % 256, i);
                ck_assert_int_eq(store_allocate(s, "gpu.intel.com/i915", reqs, 1, (uint64_t) i, NULL, NULL, NULL), 0);
        }
        s = store_free(s);
        ck_assert(!file_exists("-wal"));

        before = read_file(&n_before);
        ck_assert_uint_gt(n_before, 4 * 4096);
        /* Scribble over the middle of the third page (a b-tree page of a table). */
        fd = open(db_path, O_WRONLY|O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(pwrite(fd, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 16,
                                2 * 4096 + 8), 16);
        ck_assert_int_eq(pwrite(fd, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 16,
                                3 * 4096), 16);
        close(fd);
        free(before);
        before = read_file(&n_before);

        ck_assert_int_eq(store_open(dir, "b", &s, &err), -EBADMSG);
        ck_assert_ptr_null(s);
        ck_assert_msg(err && strstr(err, "corrupt"), "message: %s", err ?: "(null)");

        after = read_file(&n_after);
        ck_assert_uint_eq(n_before, n_after);
        ck_assert(memcmp(before, after, n_before) == 0);
}
END_TEST

START_TEST(test_store_foreign_database_refused) {
        _cleanup_free_ char *err = NULL;
        Store *s = NULL;

        raw_exec("CREATE TABLE something (x INTEGER)");
        ck_assert_int_eq(store_open(dir, "b", &s, &err), -EBADMSG);
        ck_assert_msg(err && strstr(err, "not a kgpu database"), "message: %s", err ?: "(null)");
        ck_assert_int_eq(raw_int("SELECT count(*) FROM sqlite_master"), 1);
}
END_TEST

START_TEST(test_store_symlink_refused) {
        _cleanup_free_ char *err = NULL;
        char target[300];
        Store *s = NULL;

        snprintf(target, sizeof(target), "%s/elsewhere", dir);
        ck_assert_int_eq(symlink(target, db_path), 0);
        ck_assert_int_eq(store_open(dir, "b", &s, &err), -ELOOP);
        ck_assert_ptr_nonnull(err);
        ck_assert_int_ne(access(target, F_OK), 0);
        (void) unlink(target);
}
END_TEST

START_TEST(test_store_unreadable_refused) {
        pid_t pid;
        int status;

        store_free(open_ok("b"));
        ck_assert_int_eq(chmod(db_path, 0), 0);

        /* root ignores file modes: check as another user in a child. */
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                _cleanup_free_ char *err = NULL;
                Store *s = NULL;
                int r;

                if (geteuid() == 0 && setresuid(65534, 65534, 65534) < 0)
                        _exit(2);
                r = store_open(dir, "b", &s, &err);
                _exit(r == -EACCES && err && strstr(err, "cannot open") ? 0 : 1);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status));
        ck_assert_int_eq(WEXITSTATUS(status), 0);
        ck_assert_int_eq(chmod(db_path, 0600), 0);
}
END_TEST

static int hook_fail(Store *s, void *userdata) {
        int *calls = userdata;

        (*calls)++;
        return -EIO;
}

START_TEST(test_store_failed_commit_rolls_back) {
        _cleanup_(store_freep) Store *s = NULL;
        char *a[] = { (char *) "dev-a", NULL };
        char *b[] = { (char *) "dev-b", (char *) "dev-c", NULL };
        char **reqs[] = { a, b };
        Seen seen = {};
        int calls = 0;

        s = open_ok("b");
        store_set_before_commit(s, hook_fail, &calls);
        ck_assert_int_eq(store_allocate(s, "res", reqs, 2, 1, NULL, NULL, NULL), -EIO);
        ck_assert_int_eq(calls, 1);
        ck_assert_int_eq(store_foreach_allocation(s, 0, collect, &seen), 0);

        /* The store is usable again, and the failed call left no trace. */
        store_set_before_commit(s, NULL, NULL);
        ck_assert_int_eq(store_allocate(s, "res", reqs, 2, 1, NULL, NULL, NULL), 0);
        ck_assert_int_eq(store_foreach_allocation(s, 0, collect, &seen), 2);
        ck_assert_str_eq(seen.devices[1], "dev-b,dev-c");
        s = store_free(s);
        ck_assert_int_eq(raw_int(N_IDS_SQL), 3);
}
END_TEST

static int hook_die(Store *s, void *userdata) {
        raise(SIGKILL);
        return 0;
}

START_TEST(test_store_killed_before_commit) {
        _cleanup_(store_freep) Store *s = NULL;
        char *a[] = { (char *) "committed", NULL };
        char *b[] = { (char *) "lost-1", NULL };
        char *c[] = { (char *) "lost-2", (char *) "lost-3", NULL };
        char **first[] = { a };
        char **second[] = { b, c };
        Seen seen = {};
        pid_t pid;
        int status;

        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                Store *t = NULL;
                _cleanup_free_ char *err = NULL;

                if (store_open(dir, "b", &t, &err) < 0)
                        _exit(3);
                if (store_allocate(t, "res", first, 1, 1, NULL, NULL, NULL) < 0)
                        _exit(4);
                /* Dies inside the transaction, after both inserts, before COMMIT. */
                store_set_before_commit(t, hook_die, NULL);
                (void) store_allocate(t, "res", second, 2, 2, NULL, NULL, NULL);
                _exit(5);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %d", status);

        s = open_ok("b");
        ck_assert_int_eq(store_foreach_allocation(s, 0, collect, &seen), 1);
        ck_assert_str_eq(seen.devices[0], "committed");
        s = store_free(s);
        ck_assert_int_eq(raw_int(N_IDS_SQL), 1);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations"), 1);
}
END_TEST

static int check_whole(uint64_t id, const char *resource, char * const *device_ids, uint64_t created_usec,
                       const char *boot_id, bool seen, void *userdata) {
        size_t *n = userdata;

        /* Every allocation was written with exactly three devices. */
        ck_assert_uint_eq(strv_length((char **) device_ids), 3);
        ck_assert_uint_eq(created_usec, 7);
        (*n)++;
        return 0;
}

START_TEST(test_store_kill_anytime) {
        /* kill -9 at random instants: every acknowledged allocation survives, and no
         * allocation is ever half written. */
        for (int round = 0; round < 5; round++) {
                _cleanup_(store_freep) Store *s = NULL;
                uint64_t acked = 0, v;
                int p[2], status;
                size_t n = 0;
                pid_t pid;

                ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
                pid = fork();
                ck_assert_int_ge(pid, 0);
                if (pid == 0) {
                        char *ids[] = { (char *) "a", (char *) "b", (char *) "c", NULL };
                        char **reqs[] = { ids };
                        _cleanup_free_ char *err = NULL;
                        Store *t = NULL;

                        close(p[0]);
                        if (store_open(dir, "b", &t, &err) < 0)
                                _exit(3);
                        for (;;) {
                                uint64_t id;

                                if (store_allocate(t, "res", reqs, 1, 7, &id, NULL, NULL) < 0)
                                        _exit(4);
                                if (write(p[1], &id, sizeof(id)) != sizeof(id))
                                        _exit(5);
                        }
                }
                close(p[1]);
                usleep(20000 + (useconds_t) (rand() % 30000));
                ck_assert_int_eq(kill(pid, SIGKILL), 0);
                ck_assert_int_eq(waitpid(pid, &status, 0), pid);
                ck_assert(WIFSIGNALED(status));
                while (read(p[0], &v, sizeof(v)) == sizeof(v))
                        acked = MAX(acked, v);
                close(p[0]);

                s = open_ok("b");
                ck_assert_int_ge(store_foreach_allocation(s, 0, check_whole, &n), 0);
                ck_assert_uint_ge(n, acked > 0 ? 1 : 0);
                s = store_free(s);
                /* Nothing acknowledged was lost; nothing half written is there. */
                ck_assert_int_ge(raw_int("SELECT coalesce(max(id), 0) FROM allocations"), (long long) acked);
                ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations WHERE "
                                         "device_ids != 'a' || char(10) || 'b' || char(10) || 'c'"), 0);
                ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations"), (long long) n);
        }
}
END_TEST

/* Rows a hostile hand wrote into the file (schema v4, the packed device ids above all):
 * each is skipped with its reason, every other row is kept, the file keeps them as they
 * are, and the store goes on allocating above every id in it. */
START_TEST(test_store_bad_rows_skipped) {
        _cleanup_(store_freep) Store *s = NULL;
        char *ids[] = { (char *) "good", NULL };
        char **reqs[] = { ids };
        const char *first = NULL;
        uint64_t id;
        Seen seen = {};

        s = open_ok("b");
        ck_assert_int_eq(store_allocate(s, "res", reqs, 1, 1, NULL, NULL, NULL), 0);
        s = store_free(s);
#define BAD(idv, res, created, devs) \
        "INSERT INTO allocations (id, resource, created_usec, boot_id, device_ids) VALUES (" idv ", " res ", " created ", 'b', " devs ");"
        raw_exec(BAD("10", "x'0102'", "3", "'x'")                                       /* resource not text */
                 BAD("11", "'res'", "-5", "'y'")                                        /* negative time */
                 BAD("12", "'res'", "'soon'", "'y'")                                    /* time not an integer */
                 BAD("13", "'res'", "4", "''")                                          /* no ids */
                 BAD("14", "'res'", "4", "'a' || char(10)")                             /* truncated: empty last id */
                 BAD("15", "'res'", "4", "char(10) || 'a'")                             /* empty first id */
                 BAD("16", "'res'", "4", "'a' || char(10) || char(10) || 'b'")          /* empty id inside */
                 BAD("17", "'res'", "4", "printf('%.257c', 'a')")                       /* id over 256 bytes */
                 BAD("18", "'res'", "4", "replace(printf('%.1024c', 'x'), 'x', 'i' || char(10)) || 'last'") /* 1025 ids */
                 BAD("19", "'res'", "4", "printf('%.300000c', 'a')")                    /* overlong column */
                 BAD("20", "'res'", "4", "CAST(x'ff41' AS TEXT)")                       /* not UTF-8 */
                 BAD("21", "'res'", "4", "CAST(x'610062' AS TEXT)")                     /* a NUL inside */
                 BAD("22", "'res'", "4", "x'61'")                                       /* a blob */
                 BAD("23", "'res'", "4", "(WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c "
                                         "WHERE i < 1025) SELECT group_concat('id' || i, char(10)) FROM c)") /* 1025 distinct */
                 BAD("24", "'res'", "4", "'d' || char(10) || 'e' || char(10) || 'd'")   /* an id twice */
                 /* The limits themselves are allowed: 1024 ids, an id of 256 bytes. */
                 "INSERT INTO allocations (id, resource, created_usec, boot_id, device_ids) VALUES (30, 'res', 5, 'b', "
                 "  (WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1024) "
                 "   SELECT group_concat('id' || i, char(10)) FROM c));"
                 BAD("31", "'res'", "6", "printf('%.256c', 'z') || char(10) || 'w'")
                 BAD("1000", "'res'", "7", "'a' || char(10) || 'b'"));           /* after the bad ones */
#undef BAD
        s = open_ok("b");
        ck_assert_int_eq(store_foreach_allocation(s, 0, collect, &seen), 4);
        ck_assert_str_eq(seen.devices[0], "good");
        ck_assert_uint_eq(seen.ids[1], 30);
        ck_assert_uint_eq(seen.n_devices[1], 1024);
        ck_assert_uint_eq(seen.ids[2], 31);
        ck_assert_uint_eq(seen.n_devices[2], 2);
        ck_assert_uint_eq(seen.ids[3], 1000);
        ck_assert_str_eq(seen.devices[3], "a,b");
        ck_assert_uint_eq(store_get_skipped_rows(s, &first), 15);
        ck_assert_str_eq(first, "allocation row 10: resource name missing, too long or not UTF-8");
        /* Allocating goes on above every id in the file; superseding sees the kept rows. */
        {
                char *a[] = { (char *) "a", NULL };
                char **ra[] = { a };
                _cleanup_free_ StoreSuperseded *old = NULL;
                size_t n_old = 0;

                ck_assert_int_eq(store_allocate(s, "res", ra, 1, 8, &id, &old, &n_old), 0);
                ck_assert_uint_gt(id, 1000);
                ck_assert_uint_eq(n_old, 1);
                ck_assert_uint_eq(old[0].id, 1000);
        }
        s = store_free(s);
        /* The bad rows are left as they were (never rewritten, never deleted). */
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations WHERE id BETWEEN 10 AND 24"), 15);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations WHERE id = 24 AND device_ids = "
                                 "'d' || char(10) || 'e' || char(10) || 'd'"), 1);
        s = open_ok("b");
        ck_assert_uint_eq(store_get_skipped_rows(s, NULL), 15);
}
END_TEST

/* What the store could not read back is refused when written, and changes nothing. */
START_TEST(test_store_refuses_unpackable_ids) {
        _cleanup_(store_freep) Store *s = NULL;
        char long_id[258], max_id[257];
        char *nl[] = { (char *) "a\nb", NULL }, *too_long[] = { long_id, NULL }, *utf[] = { (char *) "\xff", NULL };
        char *empty[] = { (char *) "", NULL }, *longest[] = { max_id, NULL };
        char **r_nl[] = { nl }, **r_long[] = { too_long }, **r_utf[] = { utf }, **r_empty[] = { empty };
        char **r_longest[] = { longest };
        _cleanup_strv_free_ char **many = NULL;
        char **r_many[1];
        Seen seen = {};

        memset(long_id, 'x', 257);
        long_id[257] = 0;
        memset(max_id, 'y', 256);
        max_id[256] = 0;
        for (int i = 0; i < 1025; i++) {
                char v[16];

                snprintf(v, sizeof(v), "id%d", i);
                ck_assert_int_eq(strv_extend(&many, v), 0);
        }
        r_many[0] = many;
        s = open_ok("b");
        ck_assert_int_eq(store_allocate(s, "res", r_nl, 1, 1, NULL, NULL, NULL), -EINVAL);
        ck_assert_int_eq(store_allocate(s, "res", r_long, 1, 1, NULL, NULL, NULL), -EINVAL);
        ck_assert_int_eq(store_allocate(s, "res", r_utf, 1, 1, NULL, NULL, NULL), -EINVAL);
        ck_assert_int_eq(store_allocate(s, "res", r_empty, 1, 1, NULL, NULL, NULL), -EINVAL);
        ck_assert_int_eq(store_allocate(s, "res", r_many, 1, 1, NULL, NULL, NULL), -EINVAL);
        ck_assert_uint_eq(store_get_n_allocations(s), 0);
        free(many[1024]);
        many[1024] = NULL;      /* 1024: the most */
        ck_assert_int_eq(store_allocate(s, "res", r_many, 1, 1, NULL, NULL, NULL), 0);
        ck_assert_int_eq(store_allocate(s, "res", r_longest, 1, 1, NULL, NULL, NULL), 0);
        s = store_free(s);
        s = open_ok("b");
        ck_assert_int_eq(store_foreach_allocation(s, 0, collect, &seen), 2);
        ck_assert_uint_eq(seen.n_devices[0], 1024);
        ck_assert_uint_eq(store_get_skipped_rows(s, NULL), 0);
}
END_TEST

/* An id allocated again supersedes the allocation that held it: deleted in the same
 * transaction, in the file and in the store's copy, whatever its boot; other resources
 * and other ids are untouched; a failed commit supersedes nothing. */
START_TEST(test_store_supersedes) {
        _cleanup_(store_freep) Store *s = NULL;
        _cleanup_free_ StoreSuperseded *old = NULL;
        char *x[] = { (char *) "0000:03:00.0", NULL };
        char *xy[] = { (char *) "0000:03:00.0", (char *) "0000:04:00.0", NULL };
        char *y[] = { (char *) "0000:04:00.0", NULL };
        char *z[] = { (char *) "0000:05:00.0", NULL };
        char **one_x[] = { x }, **one_xy[] = { xy }, **one_y[] = { y }, **y_and_z[] = { z, y };
        char **twice[] = { x, xy };
        uint64_t a, b, c, d, e[2], f;
        size_t n_old = 0;
        int calls = 0;
        Seen seen = {};

        s = open_ok("boot-1");
        ck_assert_int_eq(store_allocate(s, "res", one_x, 1, 1, &a, &old, &n_old), 0);
        ck_assert_uint_eq(n_old, 0);
        old = mfree(old);
        /* Another resource's allocation of the same id is not superseded. */
        ck_assert_int_eq(store_allocate(s, "other", one_x, 1, 1, &b, NULL, NULL), 0);

        ck_assert_int_eq(store_allocate(s, "res", one_xy, 1, 2, &c, &old, &n_old), 0);
        ck_assert_uint_eq(n_old, 1);
        ck_assert_uint_eq(old[0].id, a);
        ck_assert_uint_eq(old[0].request, 0);
        old = mfree(old);
        ck_assert_int_eq(store_foreach_allocation(s, 0, collect, &seen), 2);
        ck_assert_uint_eq(seen.ids[0], b);
        ck_assert_uint_eq(seen.ids[1], c);

        /* A failed commit supersedes nothing. */
        store_set_before_commit(s, hook_fail, &calls);
        ck_assert_int_eq(store_allocate(s, "res", one_y, 1, 3, &d, NULL, NULL), -EIO);
        store_set_before_commit(s, NULL, NULL);
        ck_assert_int_eq(store_foreach_allocation(s, 0, count_cb, NULL), 2);

        /* A newer allocation of one of its ids supersedes all of it (its container is gone). */
        s = store_free(s);
        s = open_ok("boot-2");
        ck_assert_int_eq(store_allocate(s, "res", y_and_z, 2, 4, e, &old, &n_old), 0);
        ck_assert_uint_eq(n_old, 1);
        ck_assert_uint_eq(old[0].id, c);
        ck_assert_uint_eq(old[0].request, 1);
        old = mfree(old);
        memset(&seen, 0, sizeof(seen));
        ck_assert_int_eq(store_foreach_allocation(s, 0, collect, &seen), 3);
        ck_assert_uint_eq(seen.ids[0], b);
        ck_assert_uint_eq(seen.ids[1], e[0]);
        ck_assert_uint_eq(seen.ids[2], e[1]);
        ck_assert_uint_eq(holders_size(store_get_holders(s)), 3);

        /* One call naming an id twice is refused whole. */
        ck_assert_int_eq(store_allocate(s, "res", twice, 2, 5, NULL, NULL, NULL), -EINVAL);

        /* Allocating one id over and over keeps one allocation of it. */
        for (int i = 0; i < 1000; i++)
                ck_assert_int_eq(store_allocate(s, "res", one_x, 1, 6, &f, NULL, NULL), 0);
        ck_assert_int_eq(store_foreach_allocation(s, 0, count_cb, NULL), 4);
        s = store_free(s);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations"), 4);
        ck_assert_int_eq(raw_int(N_IDS_SQL), 4);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations WHERE resource = 'res' AND " HOLDS("0000:03:00.0")), 1);
        ck_assert_int_eq(raw_int("SELECT max(id) FROM allocations WHERE resource = 'res'"), (long long) f);
}
END_TEST

/* The cap refuses an Allocate that would leave more allocations stored, and changes
 * nothing then; what a call supersedes makes room for it. */
START_TEST(test_store_cap) {
        _cleanup_(store_freep) Store *s = NULL;
        char *a[] = { (char *) "a", NULL }, *b[] = { (char *) "b", NULL }, *c[] = { (char *) "c", NULL };
        char *d[] = { (char *) "d", NULL };
        char **ra[] = { a }, **rb[] = { b }, **rc[] = { c }, **rd[] = { d }, **ra_d[] = { a, d };
        uint64_t ids[3];

        s = open_ok("b");
        ck_assert_uint_eq(store_get_max_allocations(s), 0);
        store_set_max_allocations(s, 3);
        ck_assert_uint_eq(store_get_max_allocations(s), 3);
        ck_assert_int_eq(store_allocate(s, "res", ra, 1, 1, &ids[0], NULL, NULL), 0);
        ck_assert_int_eq(store_allocate(s, "res", rb, 1, 1, &ids[1], NULL, NULL), 0);
        ck_assert_int_eq(store_allocate(s, "res", rc, 1, 1, &ids[2], NULL, NULL), 0);
        ck_assert_int_eq(store_allocate(s, "res", rd, 1, 1, NULL, NULL, NULL), -EDQUOT);
        /* a is superseded, d would be one more: 4 > 3. */
        ck_assert_int_eq(store_allocate(s, "res", ra_d, 2, 1, NULL, NULL, NULL), -EDQUOT);
        ck_assert_uint_eq(store_get_n_allocations(s), 3);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations"), 3);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations WHERE " HOLDS("a")), 1);
        /* Allocating a again replaces its allocation: allowed at the cap. */
        ck_assert_int_eq(store_allocate(s, "res", ra, 1, 2, NULL, NULL, NULL), 0);

        /* Lowered under what is stored: nothing dropped, only new ones refused... */
        store_set_max_allocations(s, 1);
        ck_assert_int_eq(store_allocate(s, "res", rd, 1, 3, NULL, NULL, NULL), -EDQUOT);
        ck_assert_uint_eq(store_get_n_allocations(s), 3);
        /* ...until reconciliation released enough. */
        ck_assert_int_eq(store_reconcile(s, &ids[1], 2, NULL, 0, 4), 0);
        ck_assert_uint_eq(store_get_n_allocations(s), 1);
        ck_assert_int_eq(store_allocate(s, "res", rd, 1, 5, NULL, NULL, NULL), -EDQUOT);
        store_set_max_allocations(s, 2);
        ck_assert_int_eq(store_allocate(s, "res", rd, 1, 5, NULL, NULL, NULL), 0);
        ck_assert_uint_eq(store_get_n_allocations(s), 2);
}
END_TEST

static long long wal_size(void) {
        char p[300];
        struct stat st;

        snprintf(p, sizeof(p), "%s-wal", db_path);
        if (stat(p, &st) < 0) {
                ck_assert_int_eq(errno, ENOENT);
                return 0;
        }
        return (long long) st.st_size;
}

/* Many commits in one long-lived store: kgpu.db-wal never exceeds STORE_WAL_SIZE_MAX plus
 * one transaction (SQLite's own autocheckpoint lets it reach 1000 frames, over 4 MB, and
 * keeps that size). 40 ids allocated in turn, a holder recorded for every third. */
#define WAL_ROUNDS 600
#define WAL_ONE_TRANSACTION (16 * (4096 + 24))
static long long wal_churn(Store *s, int rounds, bool *asked) {
        long long max = 0;

        for (int i = 0; i < rounds; i++) {
                char id[32], pod[32];
                char *ids[] = { id, NULL };
                char **reqs[] = { ids };
                uint64_t got;
                StoreHolder h = { .pod_namespace = (char *) "ns", .pod_name = pod, .container_name = (char *) "c" };

                snprintf(id, sizeof(id), "0000:%02x:00.0", i % 40);
                snprintf(pod, sizeof(pod), "pod-%d", i);
                ck_assert_int_eq(store_allocate(s, "res", reqs, 1, (uint64_t) i, &got, NULL, NULL), 0);
                max = MAX(max, wal_size());
                if (i % 3 == 0) {
                        h.id = got;
                        ck_assert_int_eq(store_reconcile(s, NULL, 0, &h, 1, (uint64_t) i), 0);
                        max = MAX(max, wal_size());
                }
                /* The broker's event loop: the checkpoint once the call is over. */
                if (asked && *asked) {
                        *asked = false;
                        ck_assert_int_eq(store_checkpoint(s), 0);
                }
        }
        return max;
}

static void count_asks(Store *s, void *userdata) {
        bool *asked = userdata;

        ck_assert(!*asked);
        *asked = true;
}

static void ignore_asks(Store *s, void *userdata) {
        (*(int *) userdata)++;
}

START_TEST(test_store_wal_bounded) {
        _cleanup_(store_freep) Store *s = NULL;
        long long max;
        bool asked = false;
        int ignored = 0, held = 0;

        /* Without a taker: checkpointed after the commit that reached the threshold. */
        s = open_ok("b");
        max = wal_churn(s, WAL_ROUNDS, NULL);
        fprintf(stderr, "no taker: WAL at most %lld bytes (bound %d)\n", max, STORE_WAL_SIZE_MAX);
        ck_assert_int_gt(max, 0);
        ck_assert_int_le(max, STORE_WAL_SIZE_MAX + WAL_ONE_TRANSACTION);
        ck_assert_uint_le(store_get_wal_frames(s), STORE_WAL_CHECKPOINT_FRAMES + 16);

        /* A taker that runs the checkpoint after each call (the broker): about half. */
        store_set_checkpoint_func(s, count_asks, &asked);
        max = wal_churn(s, WAL_ROUNDS, &asked);
        fprintf(stderr, "taker: WAL at most %lld bytes\n", max);
        ck_assert_int_le(max, STORE_WAL_CHECKPOINT_FRAMES * (4096 + 24) + 32 + WAL_ONE_TRANSACTION);

        /* A taker that never gets to it: the store checkpoints at STORE_WAL_FRAMES_MAX. */
        store_set_checkpoint_func(s, ignore_asks, &ignored);
        max = wal_churn(s, WAL_ROUNDS, NULL);
        fprintf(stderr, "stalled taker: WAL at most %lld bytes, asked %d times\n", max, ignored);
        ck_assert_int_gt(ignored, 0);
        ck_assert_int_le(max, STORE_WAL_SIZE_MAX + WAL_ONE_TRANSACTION);

        /* One transaction larger than the bound (an inventory of 1000 GPUs with long node
         * lists) lengthens the file; it is cut back to the bound once the WAL is reused. */
        {
                _cleanup_free_ StoreInventoryGpu *gpus = calloc(1000, sizeof(StoreInventoryGpu));
                _cleanup_free_ char *nodes = malloc(4001), *paths = calloc(1000, 16);

                ck_assert_ptr_nonnull(gpus);
                ck_assert_ptr_nonnull(nodes);
                ck_assert_ptr_nonnull(paths);
                memset(nodes, 'n', 4000);
                nodes[4000] = 0;
                for (int i = 0; i < 1000; i++) {
                        snprintf(paths + 16 * i, 16, "/gpu/%d", i);
                        gpus[i] = (StoreInventoryGpu) { .path = paths + 16 * i, .id = paths + 16 * i, .vendor = "v",
                                                        .driver = "d", .card_node = "c", .render_node = "r",
                                                        .health_reason = "", .device_nodes = nodes,
                                                        .numa_node = -1, .healthy = true };
                }
                store_set_checkpoint_func(s, NULL, NULL);
                ck_assert_int_eq(store_save_inventory(s, gpus, 1000), 0);
                fprintf(stderr, "after 1000 GPUs: WAL %lld bytes\n", wal_size());
                ck_assert_int_gt(wal_size(), STORE_WAL_SIZE_MAX + WAL_ONE_TRANSACTION);
                ck_assert_int_eq(store_save_inventory(s, NULL, 0), 0);
                wal_churn(s, 10, NULL);
                fprintf(stderr, "then: WAL %lld bytes\n", wal_size());
                ck_assert_int_le(wal_size(), STORE_WAL_SIZE_MAX);
        }
        s = store_free(s);

        /* Everything committed is there: the last allocation of each id (the last 10 rounds
         * allocated ids 0-9 again), with its holder. */
        for (int i = WAL_ROUNDS - 30; i < WAL_ROUNDS; i++)
                held += i % 3 == 0;
        for (int i = 0; i < 10; i++)
                held += i % 3 == 0;
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations"), 40);
        ck_assert_int_eq(raw_int("SELECT count(DISTINCT device_ids) FROM allocations"), 40);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations WHERE created_usec >= 10"), 30);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations WHERE pod_name != ''"), held);
}
END_TEST

static Suite *store_suite(void) {
        Suite *s = suite_create("store");
        TCase *tc = tcase_create("core");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_store_create);
        tcase_add_test(tc, test_store_reopen_sees_commits);
        tcase_add_test(tc, test_store_invalid_args);
        tcase_add_test(tc, test_store_newer_version_refused);
        tcase_add_test(tc, test_store_garbage_refused);
        tcase_add_test(tc, test_store_corrupt_page_refused);
        tcase_add_test(tc, test_store_foreign_database_refused);
        tcase_add_test(tc, test_store_symlink_refused);
        tcase_add_test(tc, test_store_unreadable_refused);
        tcase_add_test(tc, test_store_failed_commit_rolls_back);
        tcase_add_test(tc, test_store_killed_before_commit);
        tcase_add_test(tc, test_store_kill_anytime);
        tcase_add_test(tc, test_store_bad_rows_skipped);
        tcase_add_test(tc, test_store_refuses_unpackable_ids);
        tcase_add_test(tc, test_store_supersedes);
        tcase_add_test(tc, test_store_cap);
        tcase_add_test(tc, test_store_wal_bounded);
        suite_add_tcase(s, tc);
        return s;
}

static int store_prepare(void) {
        srand((unsigned) time(NULL));
        return 0;
}

KGPU_TEST_PREPARE(store_prepare)
KGPU_TEST_SUITE(store_suite)
