/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-store-schema.c — the store's schema v4: a v3 file written by the v3 store migrates
 * with everything in it, a migration killed at any step leaves v3 or v4 and never half,
 * and one commit writes the few pages v4 was made for.
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
#include "daemons/broker/store-internal.h"
#include "daemons/broker/store.h"
#include "tests/unit/test-main.h"

static char dir[] = "/tmp/kgpu-test-store-schema-XXXXXX";
static char db_path[256];

static void setup(void) {
        strcpy(dir, "/tmp/kgpu-test-store-schema-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(db_path, sizeof(db_path), "%s/%s", dir, STORE_FILE_NAME);
}

static void teardown(void) {
        char cmd[300];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
}

/* Plays another program: opened read-write so that it can read a WAL a killed writer left
 * (it writes nothing). */
static long long raw_int(const char *sql) {
        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        long long v;

        ck_assert_int_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
        ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
        ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
        v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        sqlite3_close(db);
        return v;
}

static void raw_exec(const char *sql) {
        sqlite3 *db = NULL;

        ck_assert_int_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, NULL), SQLITE_OK);
        ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
        ck_assert_int_eq(sqlite3_close(db), SQLITE_OK);
}

static void copy_fixture(void) {
        char src[4096], buf[65536];
        int in, out;
        ssize_t n;

        snprintf(src, sizeof(src), "%s/tests/data/store/kgpu-v3.db", getenv("KGPU_SOURCE_ROOT") ?: ".");
        in = open(src, O_RDONLY|O_CLOEXEC);
        ck_assert_msg(in >= 0, "%s: %s", src, strerror(errno));
        out = open(db_path, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0600);
        ck_assert_int_ge(out, 0);
        while ((n = read(in, buf, sizeof(buf))) > 0)
                ck_assert_int_eq(write(out, buf, (size_t) n), n);
        ck_assert_int_eq(n, 0);
        close(in);
        close(out);
}

static Store *open_ok(const char *boot) {
        _cleanup_free_ char *err = NULL;
        Store *s = NULL;
        int r;

        r = store_open(dir, boot, &s, &err);
        ck_assert_msg(r == 0, "store_open: %d %s", r, err ?: "");
        return s;
}

typedef struct Dump {
        char text[8192];
        size_t len;
} Dump;

static int dump_cb(uint64_t id, const char *resource, char * const *device_ids, uint64_t created_usec,
                   const char *boot_id, bool seen, void *userdata) {
        Dump *d = userdata;
        _cleanup_free_ char *ids = strv_join((char **) device_ids, ",");
        int n;

        n = snprintf(d->text + d->len, sizeof(d->text) - d->len, "%" PRIu64 " %s %s %" PRIu64 " %s %s\n",
                     id, resource, ids, created_usec, boot_id, seen ? "seen" : "-");
        ck_assert_int_gt(n, 0);
        ck_assert_uint_lt(d->len + (size_t) n, sizeof(d->text));
        d->len += (size_t) n;
        return 0;
}

static int inv_cb(const StoreInventoryGpu *g, void *userdata) {
        Dump *d = userdata;
        int n;

        n = snprintf(d->text + d->len, sizeof(d->text) - d->len, "%s %s %s %s %s %s [%s] %d %04x %d\n", g->path,
                     g->id, g->vendor, g->driver, g->card_node, g->render_node, g->device_nodes ?: "-",
                     g->numa_node, g->device_id, g->healthy);
        ck_assert_int_gt(n, 0);
        d->len += (size_t) n;
        return 0;
}

#define BOOT "3b1f0c2e-5d4a-4f6b-9e8d-7c6b5a4f3e2d"

/* What the v3 store wrote into tests/data/store/kgpu-v3.db (gen-v3.c). */
static const char v3_allocations[] =
        "1 gpu.intel.com/i915 0000:03:00.0 1764200000000000 " BOOT " seen\n"
        "3 gpu.intel.com/i915 0000:04:00.0 1764200003000000 " BOOT " -\n"
        "4 nvidia.com/gpu GPU-4a5e1f3c-9d2b-4e8f-a1c7-0b3d5e7f9a11::0,GPU-4a5e1f3c-9d2b-4e8f-a1c7-0b3d5e7f9a11::1 "
        "1764200004000000 " BOOT " -\n"
        "5 nvidia.com/gpu GPU-7c8d9e0f-1a2b-4c3d-8e5f-6a7b8c9d0e22::0 1764200004000000 " BOOT " seen\n"
        "6 nvidia.com/mig-1g.10gb MIG-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0,MIG-1f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0,"
        "MIG-2f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0 1764200006000000 " BOOT " -\n";
static const char v3_inventory[] =
        "/io/kgpu/Probe1/gpu/_30000_3a03_3a00_2e0 0000:03:00.0 intel i915 /dev/dri/card0 /dev/dri/renderD128 "
        "[/dev/dri/card0\n/dev/dri/renderD128] 0 56a0 1\n"
        "/io/kgpu/Probe1/gpu/_30000_3a04_3a00_2e0 0000:04:00.0 intel xe /dev/dri/card1 /dev/dri/renderD129 [-] -1 e20b 1\n";

static void check_v3_content(Store *s) {
        Dump d = {}, inv = {};
        StoreHolder h = {};
        uint64_t seen = 0;

        ck_assert_int_eq(store_foreach_allocation(s, 0, dump_cb, &d), 5);
        ck_assert_str_eq(d.text, v3_allocations);
        ck_assert_int_eq(store_foreach_inventory(s, inv_cb, &inv), 2);
        ck_assert_str_eq(inv.text, v3_inventory);
        ck_assert_int_eq(store_get_holder(s, 1, &h, &seen), 0);
        ck_assert_str_eq(h.pod_namespace, "default");
        ck_assert_str_eq(h.pod_name, "render-0");
        ck_assert_str_eq(h.container_name, "main");
        ck_assert_uint_eq(seen, 1764200001000000ULL);
        store_holder_done(&h);
        ck_assert_int_eq(store_get_holder(s, 5, &h, &seen), 0);
        ck_assert_str_eq(h.pod_name, "train-7f9c");
        ck_assert_uint_eq(seen, 1764200005000000ULL);
        store_holder_done(&h);
        ck_assert_int_eq(store_get_holder(s, 3, &h, &seen), 0);
        ck_assert_str_eq(h.pod_name, "");
        ck_assert_uint_eq(seen, 0);
        store_holder_done(&h);
        ck_assert_uint_eq(store_get_skipped_rows(s, NULL), 0);
}

/* The file the v3 store wrote: every allocation (ids, resources, device ids in their
 * order, times, boot), holder and inventory row is there after the migration, the
 * previous boot id too, and no id is handed out again (AUTOINCREMENT had reached 7). */
START_TEST(test_store_migrates_v3) {
        _cleanup_(store_freep) Store *s = NULL;
        _cleanup_free_ StoreSuperseded *old = NULL;
        char *x[] = { (char *) "0000:03:00.0", NULL };
        char **rx[] = { x };
        size_t n_old = 0;
        uint64_t id;

        copy_fixture();
        ck_assert_int_eq(raw_int("PRAGMA user_version"), 3);
        s = open_ok("boot-new");
        ck_assert_str_eq(store_get_previous_boot_id(s), BOOT);
        check_v3_content(s);
        /* Superseding reads the migrated ids; the new id is above the old sequence. */
        ck_assert_int_eq(store_allocate(s, "gpu.intel.com/i915", rx, 1, 1764300000000000ULL, &id, &old, &n_old), 0);
        ck_assert_uint_eq(id, 8);
        ck_assert_uint_eq(n_old, 1);
        ck_assert_uint_eq(old[0].id, 1);
        s = store_free(s);

        ck_assert_int_eq(raw_int("PRAGMA user_version"), 4);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM sqlite_master WHERE name IN ('allocation_devices', "
                                 "'allocation_devices_device', 'allocations_v4')"), 0);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM pragma_quick_check WHERE quick_check = 'ok'"), 1);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations WHERE id = 6 AND device_ids = "
                                 "'MIG-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0' || char(10) || "
                                 "'MIG-1f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0' || char(10) || "
                                 "'MIG-2f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0'"), 1);
        s = open_ok("boot-new");
        ck_assert_uint_eq(store_get_n_allocations(s), 5);
}
END_TEST

static unsigned kill_at;

static void kill_at_step(unsigned step) {
        if (step == kill_at)
                raise(SIGKILL);
}

/* A child opens the store (which migrates) and is killed as the hook says, or after
 * delay_us when kill_step is UINT_MAX. Returns once it is dead. */
static void open_killed(unsigned kill_step, useconds_t delay_us) {
        int status;
        pid_t pid;

        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                _cleanup_free_ char *err = NULL;
                Store *t = NULL;

                kill_at = kill_step;
                store_migrate_step_hook = kill_at_step;
                (void) store_open(dir, "boot-new", &t, &err);
                /* Not killed by the hook: waits for the parent's SIGKILL. */
                for (;;)
                        pause();
        }
        if (kill_step == UINT32_MAX) {
                usleep(delay_us);
                ck_assert_int_eq(kill(pid, SIGKILL), 0);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %d", status);
}

/* kill -9 after each statement of the migration: the file is the complete v3 every time,
 * and the next open migrates it whole. */
START_TEST(test_store_migration_killed_at_each_step) {
        _cleanup_(store_freep) Store *s = NULL;

        copy_fixture();
        for (unsigned step = 0; step <= 4; step++) {
                open_killed(step, 0);
                ck_assert_int_eq(raw_int("PRAGMA user_version"), 3);
                ck_assert_int_eq(raw_int("SELECT count(*) FROM allocation_devices"), 8);
                ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations"), 5);
                ck_assert_int_eq(raw_int("SELECT count(*) FROM sqlite_master WHERE name = 'allocations_v4'"), 0);
                ck_assert_int_eq(raw_int("SELECT seq FROM sqlite_sequence WHERE name = 'allocations'"), 7);
        }
        s = open_ok("boot-new");
        check_v3_content(s);
}
END_TEST

/* A larger v3 file (3000 allocations, 4500 device rows, holders) migrated by brokers
 * killed at random instants: after each kill the file is a whole v3 or a whole v4. */
#define BIG 3000
START_TEST(test_store_migration_killed_anytime) {
        _cleanup_(store_freep) Store *s = NULL;
        int v3 = 0, v4 = 0;
        size_t n;

        raw_exec("CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);"
                 "CREATE TABLE allocations (id INTEGER PRIMARY KEY AUTOINCREMENT, resource TEXT NOT NULL,"
                 "  created_usec INTEGER NOT NULL, boot_id TEXT NOT NULL, pod_namespace TEXT NOT NULL DEFAULT '',"
                 "  pod_name TEXT NOT NULL DEFAULT '', container_name TEXT NOT NULL DEFAULT '',"
                 "  seen_usec INTEGER NOT NULL DEFAULT 0);"
                 "CREATE TABLE allocation_devices (allocation_id INTEGER NOT NULL REFERENCES allocations (id)"
                 "  ON DELETE CASCADE, device_id TEXT NOT NULL, UNIQUE (allocation_id, device_id));"
                 "CREATE INDEX allocation_devices_device ON allocation_devices (device_id);"
                 "CREATE TABLE inventory (path TEXT PRIMARY KEY NOT NULL, id TEXT NOT NULL, vendor TEXT NOT NULL,"
                 "  driver TEXT NOT NULL, card_node TEXT NOT NULL, render_node TEXT NOT NULL,"
                 "  health_reason TEXT NOT NULL, device_nodes TEXT, by_path_nodes TEXT, numa_node INTEGER NOT NULL,"
                 "  device_id INTEGER NOT NULL, healthy INTEGER NOT NULL);"
                 "INSERT INTO meta VALUES ('boot_id', 'old');"
                 "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000) "
                 "INSERT INTO allocations (resource, created_usec, boot_id, pod_name, seen_usec) "
                 "SELECT 'r' || (i % 3), i, 'old', CASE WHEN i % 5 = 0 THEN 'pod-' || i ELSE '' END, i FROM c;"
                 "INSERT INTO allocation_devices SELECT id, 'dev-' || id FROM allocations;"
                 "INSERT INTO allocation_devices SELECT id, 'dev-' || id || '-b' FROM allocations WHERE id % 2 = 0;"
                 "PRAGMA user_version = 3;");

        for (int round = 0; round < 12; round++) {
                long long version;

                /* From at once to well after a whole migration (about 50 ms here). */
                open_killed(UINT32_MAX, (useconds_t) (rand() % (round % 2 ? 60000 : 300000)));
                version = raw_int("PRAGMA user_version");
                ck_assert(version == 3 || version == 4);
                ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations"), BIG);
                ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations WHERE pod_name != ''"), BIG / 5);
                if (version == 3) {
                        v3++;
                        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocation_devices"), BIG + BIG / 2);
                        ck_assert_int_eq(raw_int("SELECT count(*) FROM sqlite_master WHERE name = 'allocations_v4'"), 0);
                } else {
                        v4++;
                        ck_assert_int_eq(raw_int("SELECT count(*) FROM sqlite_master WHERE name = 'allocation_devices'"), 0);
                        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations WHERE device_ids = 'dev-' || id OR "
                                                 "device_ids = 'dev-' || id || char(10) || 'dev-' || id || '-b'"), BIG);
                        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations WHERE instr(device_ids, '-b') > 0"),
                                         BIG / 2);
                }
        }
        fprintf(stderr, "migration killed at random: left v3 %d times, v4 %d times\n", v3, v4);
        s = open_ok("boot-new");
        n = store_get_n_allocations(s);
        ck_assert_uint_eq(n, BIG);
        ck_assert_uint_eq(store_get_skipped_rows(s, NULL), 0);
}
END_TEST

/* v3 rows that v4 cannot hold as they are (an id with a line break, no device row, an id
 * too long) are skipped at open with their reason, as v3 skipped all but the first; the
 * others migrate; a file without AUTOINCREMENT's table (edited by hand) migrates too and
 * ids go on above the largest. */
START_TEST(test_store_migrates_hostile_v3) {
        _cleanup_(store_freep) Store *s = NULL;
        Dump d = {};
        const char *first = NULL;
        uint64_t id;

        raw_exec("CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);"
                 "CREATE TABLE allocations (id INTEGER PRIMARY KEY, resource TEXT NOT NULL,"
                 "  created_usec INTEGER NOT NULL, boot_id TEXT NOT NULL, pod_namespace TEXT NOT NULL DEFAULT '',"
                 "  pod_name TEXT NOT NULL DEFAULT '', container_name TEXT NOT NULL DEFAULT '',"
                 "  seen_usec INTEGER NOT NULL DEFAULT 0);"
                 "CREATE TABLE allocation_devices (allocation_id INTEGER NOT NULL, device_id TEXT NOT NULL,"
                 "  UNIQUE (allocation_id, device_id));"
                 "CREATE TABLE inventory (path TEXT PRIMARY KEY NOT NULL, id TEXT NOT NULL, vendor TEXT NOT NULL,"
                 "  driver TEXT NOT NULL, card_node TEXT NOT NULL, render_node TEXT NOT NULL,"
                 "  health_reason TEXT NOT NULL, device_nodes TEXT, by_path_nodes TEXT, numa_node INTEGER NOT NULL,"
                 "  device_id INTEGER NOT NULL, healthy INTEGER NOT NULL);"
                 "INSERT INTO allocations (id, resource, created_usec, boot_id) VALUES (2, 'r', 1, 'b'), (3, 'r', 1, 'b'),"
                 "  (4, 'r', 1, 'b'), (5, 'r', 1, 'b'), (9, 'r', 1, 'b');"
                 "INSERT INTO allocation_devices VALUES (2, 'a'), (3, 'x' || char(10) || 'y'), (3, 'z'),"
                 "  (5, printf('%.300c', 'l')), (9, 'c'), (9, 'b');"
                 "PRAGMA user_version = 3;");
        s = open_ok("b");
        ck_assert_int_eq(store_foreach_allocation(s, 0, dump_cb, &d), 2);
        ck_assert_str_eq(d.text, "2 r a 1 b -\n9 r c,b 1 b -\n");
        ck_assert_uint_eq(store_get_skipped_rows(s, &first), 3);
        ck_assert_str_eq(first, "allocation row 3: no device ids");
        {
                char *c[] = { (char *) "c", NULL };
                char **rc[] = { c };

                ck_assert_int_eq(store_allocate(s, "r", rc, 1, 2, &id, NULL, NULL), 0);
                ck_assert_uint_gt(id, 9);
        }
        s = store_free(s);
        /* Kept in the file as they were migrated, never deleted. */
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations WHERE id IN (3, 4, 5)"), 3);
}
END_TEST

/* Frames (pages) the next commit writes: the WAL is checkpointed first, so its length
 * after the commit is that commit's. */
static void checkpoint(Store *s) {
        ck_assert_int_eq(store_checkpoint(s), 0);
}

static int allocate_one(Store *s, const char *id, uint64_t *ret) {
        char *ids[] = { (char *) id, NULL };
        char **reqs[] = { ids };

        return store_allocate(s, "gpu.intel.com/i915", reqs, 1, 1764200000000000ULL, ret, NULL, NULL);
}

/*
 * Pages per commit with 600 allocations stored (a table of a few dozen leaves, two levels).
 * In schema v4 a commit writes the table leaf its row is in: an Allocate of a new id 1
 * (the rightmost leaf), a superseding one 2 (the old row's leaf, the new row's), a release
 * 1, a holder 1. A leaf split or a leaf merged after a delete adds the sibling, the parent
 * and page 1 (the file's size in pages, the free list): up to 4 more now and then (a
 * holder makes its row longer, so on a full leaf it splits too), and raising the reserved
 * ids adds the meta page once per STORE_ID_BLOCK. Bounds: means of 1.5 (new), 2.5
 * (superseding), 2.0 (release, holder) and no commit above 8 (two leaves with a sibling
 * each, their parent, page 1, meta: measured at most 6). Schema v3 wrote 5, 5-8, 4
 * and 1 (the device row, its two indexes, the sequence).
 */
START_TEST(test_store_pages_per_commit) {
        _cleanup_(store_freep) Store *s = NULL;
        uint64_t ids[600], id;
        size_t sum_new = 0, sum_super = 0, sum_rel = 0, sum_holder = 0, max = 0;
        char name[32];

        s = open_ok("b");
        for (int i = 0; i < 600; i++) {
                snprintf(name, sizeof(name), "0000:%02x:%02x.0", i / 256, i % 256);
                ck_assert_int_eq(allocate_one(s, name, &ids[i]), 0);
        }
        for (int i = 0; i < 100; i++) {
                StoreHolder h = { .id = ids[300 + i], .pod_namespace = (char *) "default", .pod_name = name,
                                  .container_name = (char *) "main" };
                size_t f;

                /* A new id. */
                snprintf(name, sizeof(name), "0000:%02x:%02x.1", i / 256, i % 256);
                checkpoint(s);
                ck_assert_int_eq(allocate_one(s, name, &id), 0);
                f = store_get_wal_frames(s);
                sum_new += f;
                max = MAX(max, f);
                /* An id an old allocation holds. */
                snprintf(name, sizeof(name), "0000:%02x:%02x.0", i / 256, i % 256);
                checkpoint(s);
                ck_assert_int_eq(allocate_one(s, name, &ids[i]), 0);
                f = store_get_wal_frames(s);
                sum_super += f;
                max = MAX(max, f);
                /* A release (of the one allocated first above). */
                checkpoint(s);
                ck_assert_int_eq(store_reconcile(s, &id, 1, NULL, 0, 1), 0);
                f = store_get_wal_frames(s);
                sum_rel += f;
                max = MAX(max, f);
                /* A holder. */
                checkpoint(s);
                ck_assert_int_eq(store_reconcile(s, NULL, 0, &h, 1, 2), 0);
                f = store_get_wal_frames(s);
                sum_holder += f;
                max = MAX(max, f);
        }
        fprintf(stderr, "pages per commit, 100 each: new %.2f, superseding %.2f, release %.2f, holder %.2f, max %zu\n",
                sum_new / 100.0, sum_super / 100.0, sum_rel / 100.0, sum_holder / 100.0, max);
        ck_assert_uint_le(sum_holder, 200);
        ck_assert_uint_le(sum_new, 150);
        ck_assert_uint_le(sum_super, 250);
        ck_assert_uint_le(sum_rel, 200);
        ck_assert_uint_le(max, 8);
        ck_assert_uint_eq(store_get_n_allocations(s), 600);
}
END_TEST

static Suite *store_schema_suite(void) {
        Suite *s = suite_create("store-schema");
        TCase *tc = tcase_create("v4");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_store_migrates_v3);
        tcase_add_test(tc, test_store_migration_killed_at_each_step);
        tcase_add_test(tc, test_store_migrates_hostile_v3);
        tcase_add_test(tc, test_store_migration_killed_anytime);
        tcase_add_test(tc, test_store_pages_per_commit);
        suite_add_tcase(s, tc);
        return s;
}

static int store_schema_prepare(void) {
        srand((unsigned) time(NULL));
        return 0;
}

KGPU_TEST_PREPARE(store_schema_prepare)
KGPU_TEST_SUITE(store_schema_suite)
