/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-reconcile.c — which allocations a reconciliation keeps and releases, how the store
 * applies it (one transaction, migration from schemas v1 and v2, the "reported before" fact
 * across a restart), and the saved GPU inventory. */

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common/util.h"
#include "daemons/broker/holders.h"
#include "daemons/broker/reconcile.h"
#include "daemons/broker/store.h"
#include "tests/unit/test-main.h"

#define SEC UINT64_C(1000000)
#define NOW (UINT64_C(1700000000) * SEC)
#define GRACE (60 * SEC)

static char *ids_a[] = { (char *) "a", NULL };
static char *ids_b[] = { (char *) "b", NULL };
static char *ids_c[] = { (char *) "c", NULL };
static char *ids_d[] = { (char *) "d", NULL };
static char *ids_de[] = { (char *) "d", (char *) "e", NULL };

static ReconcileAllocation A(uint64_t id, char **ids, uint64_t created, const char *boot) {
        return (ReconcileAllocation) {
                .id = id, .resource = (char *) "gpu.intel.com/i915", .device_ids = ids,
                .created_usec = created, .boot_id = (char *) boot,
        };
}

/* The same, reported by PodResources before (a holder was recorded). */
static ReconcileAllocation S(uint64_t id, char **ids, uint64_t created, const char *boot) {
        ReconcileAllocation a = A(id, ids, created, boot);

        a.seen = true;
        return a;
}

static LiveContainer L(const char *resource, char **ids, const char *pod) {
        return (LiveContainer) {
                .resource = (char *) resource, .device_ids = ids, .pod_namespace = (char *) "ns",
                .pod_name = (char *) pod, .container_name = (char *) "c",
        };
}

static bool released(const ReconcilePlan *p, uint64_t id) {
        for (size_t i = 0; i < p->n_release; i++)
                if (p->release[i] == id)
                        return true;
        return false;
}

static const char *holder(const ReconcilePlan *p, uint64_t id) {
        for (size_t i = 0; i < p->n_holders; i++)
                if (p->holders[i].id == id)
                        return p->holders[i].pod_name;
        return NULL;
}

START_TEST(test_plan_rules) {
        ReconcileAllocation allocs[] = {
                A(1, ids_a, NOW - 600 * SEC, "boot"),   /* a reused by 4: stale */
                A(2, ids_b, NOW - 600 * SEC, "boot"),   /* not reported, old */
                A(3, ids_c, NOW - 10 * SEC, "boot"),    /* not reported, young */
                A(4, ids_a, NOW - 300 * SEC, "boot"),   /* reported: held by p1 */
                A(5, ids_d, NOW - 1 * SEC, "old"),      /* another boot, young, not reported */
                A(6, ids_de, NOW - 900 * SEC, "old"),   /* another boot, reported (e) */
        };
        LiveContainer live[] = {
                L("gpu.intel.com/i915", ids_a, "p1"),
                L("gpu.intel.com/i915", (char *[]) { (char *) "e", NULL }, "p2"),
                L("nvidia.com/gpu", ids_b, "p3"),       /* same id, other resource */
        };
        /* In id order (as the store lists them), and in any other order. */
        static const size_t orders[][6] = { { 0, 1, 2, 3, 4, 5 }, { 3, 0, 5, 1, 4, 2 }, { 5, 4, 3, 2, 1, 0 } };

        for (size_t o = 0; o < ELEMENTSOF(orders); o++) {
                _cleanup_(reconcile_plan_done) ReconcilePlan p = {};
                ReconcileAllocation in[ELEMENTSOF(allocs)];

                for (size_t i = 0; i < ELEMENTSOF(allocs); i++)
                        in[i] = allocs[orders[o][i]];
                ck_assert_int_eq(reconcile_plan(in, ELEMENTSOF(in), live, ELEMENTSOF(live), "boot", NOW, GRACE, &p), 0);
                ck_assert(released(&p, 1));
                ck_assert(released(&p, 2));
                ck_assert(!released(&p, 3));
                ck_assert_ptr_null(holder(&p, 3));
                ck_assert_str_eq(holder(&p, 4), "p1");
                ck_assert(released(&p, 5));
                ck_assert_str_eq(holder(&p, 6), "p2");
                ck_assert_uint_eq(p.n_release, 3);
                ck_assert_uint_eq(p.n_holders, 2);
                ck_assert_uint_eq(p.n_young, 1);
        }
}
END_TEST

START_TEST(test_plan_grace_edges) {
        ReconcileAllocation allocs[] = {
                A(1, ids_a, NOW - GRACE, "boot"),       /* exactly the grace: released */
                A(2, ids_b, NOW - GRACE + 1, "boot"),   /* just inside */
                A(3, ids_c, NOW, ""),                   /* no boot id recorded, other boot known */
        };
        _cleanup_(reconcile_plan_done) ReconcilePlan p = {}, q = {}, z = {};

        ck_assert_int_eq(reconcile_plan(allocs, ELEMENTSOF(allocs), NULL, 0, "boot", NOW, GRACE, &p), 0);
        ck_assert(released(&p, 1));
        ck_assert(!released(&p, 2));
        ck_assert(released(&p, 3));
        /* Boot id unknown: everything counts as this boot. */
        ck_assert_int_eq(reconcile_plan(allocs, ELEMENTSOF(allocs), NULL, 0, "", NOW, GRACE, &q), 0);
        ck_assert(!released(&q, 3));
        /* Grace 0: nothing unreported survives. */
        ck_assert_int_eq(reconcile_plan(allocs, ELEMENTSOF(allocs), NULL, 0, "boot", NOW, 0, &z), 0);
        ck_assert_uint_eq(z.n_release, 3);
        /* Empty store. */
        reconcile_plan_done(&z);
        ck_assert_int_eq(reconcile_plan(NULL, 0, NULL, 0, "boot", NOW, GRACE, &z), 0);
        ck_assert_uint_eq(z.n_release + z.n_holders + z.n_young, 0);
}
END_TEST

/* The grace period is for allocations PodResources never reported: one it reported and
 * no longer reports is released by that List, however young. */
START_TEST(test_plan_seen_no_grace) {
        ReconcileAllocation allocs[] = {
                S(1, ids_a, NOW - 1 * SEC, "boot"),     /* reported before, not now: gone */
                A(2, ids_b, NOW - 1 * SEC, "boot"),     /* never reported, young: kept */
                S(3, ids_c, NOW - 1 * SEC, "boot"),     /* reported before and now: held */
                S(4, ids_d, NOW - 1 * SEC, ""),         /* seen, no boot id recorded: gone */
                S(5, ids_de, NOW - 2 * SEC, "boot"),    /* e went to 6, which is reported */
                A(6, (char *[]) { (char *) "e", NULL }, NOW - 1 * SEC, "boot"),
                A(7, (char *[]) { (char *) "f", NULL }, NOW - 600 * SEC, "boot"), /* old, never reported */
        };
        LiveContainer live[] = {
                L("gpu.intel.com/i915", ids_c, "p3"),
                L("gpu.intel.com/i915", (char *[]) { (char *) "e", NULL }, "p6"),
        };
        _cleanup_(reconcile_plan_done) ReconcilePlan p = {}, q = {}, u = {};

        ck_assert_int_eq(reconcile_plan(allocs, ELEMENTSOF(allocs), live, ELEMENTSOF(live), "boot", NOW, GRACE, &p), 0);
        ck_assert(released(&p, 1));
        ck_assert(!released(&p, 2));
        ck_assert_ptr_null(holder(&p, 2));
        ck_assert_str_eq(holder(&p, 3), "p3");
        ck_assert(released(&p, 4));
        ck_assert(released(&p, 5));
        ck_assert_str_eq(holder(&p, 6), "p6");
        ck_assert(released(&p, 7));
        ck_assert_uint_eq(p.n_release, 4);
        ck_assert_uint_eq(p.n_gone, 3);
        ck_assert_uint_eq(p.n_young, 1);
        ck_assert_uint_eq(p.n_holders, 2);

        /* Even with an unknown boot (everything counts as this boot's) and the longest
         * grace the configuration allows. */
        ck_assert_int_eq(reconcile_plan(allocs, ELEMENTSOF(allocs), live, ELEMENTSOF(live), "", NOW,
                                        86400 * SEC, &q), 0);
        ck_assert(released(&q, 1));
        ck_assert(released(&q, 4));
        ck_assert(released(&q, 5));
        ck_assert(!released(&q, 2));
        ck_assert(!released(&q, 7));
        ck_assert_uint_eq(q.n_release, 3);

        /* Without the seen flag the same allocations are young, and kept. */
        for (size_t i = 0; i < ELEMENTSOF(allocs); i++)
                allocs[i].seen = false;
        ck_assert_int_eq(reconcile_plan(allocs, ELEMENTSOF(allocs), live, ELEMENTSOF(live), "boot", NOW, GRACE, &u), 0);
        ck_assert_uint_eq(u.n_release, 2);
        ck_assert(released(&u, 4));     /* another boot's (the plan knows "boot") */
        ck_assert(released(&u, 7));
        ck_assert_uint_eq(u.n_gone, 0);
}
END_TEST

/* Many allocations, each reported once: every one held, none released. */
START_TEST(test_plan_many) {
        enum { N = 5000 };
        ReconcileAllocation *allocs = calloc(N, sizeof(ReconcileAllocation));
        LiveContainer *live = calloc(N, sizeof(LiveContainer));
        char ***ids = calloc(N, sizeof(char **));
        _cleanup_(reconcile_plan_done) ReconcilePlan p = {};

        ck_assert(allocs && live && ids);
        for (size_t i = 0; i < N; i++) {
                char buf[32];

                snprintf(buf, sizeof(buf), "card%zu", i);
                ids[i] = calloc(2, sizeof(char *));
                ids[i][0] = strdup(buf);
                allocs[i] = A(i + 1, ids[i], 0, "boot");
                live[N - 1 - i] = L("gpu.intel.com/i915", ids[i], "p");
        }
        ck_assert_int_eq(reconcile_plan(allocs, N, live, N, "boot", NOW, GRACE, &p), 0);
        ck_assert_uint_eq(p.n_holders, N);
        ck_assert_uint_eq(p.n_release, 0);
        for (size_t i = 0; i < N; i++)
                strv_free(ids[i]);
        free(ids);
        free(live);
        free(allocs);
}
END_TEST

/* ---- store ---- */

static char dir[64];

static void setup(void) {
        strcpy(dir, "/tmp/kgpu-test-reconcile-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
        char cmd[128];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
}

static int64_t raw_int(const char *sql) {
        char p[128];
        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        int64_t v;

        snprintf(p, sizeof(p), "%s/%s", dir, STORE_FILE_NAME);
        ck_assert_int_eq(sqlite3_open_v2(p, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
        ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
        ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
        v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        sqlite3_close(db);
        return v;
}

static void raw_exec(const char *sql) {
        char p[128];
        sqlite3 *db = NULL;

        snprintf(p, sizeof(p), "%s/%s", dir, STORE_FILE_NAME);
        ck_assert_int_eq(sqlite3_open_v2(p, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, NULL), SQLITE_OK);
        ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(db);
}

static int count_cb(uint64_t id, const char *resource, char * const *device_ids, uint64_t created_usec,
                    const char *boot_id, bool seen, void *userdata) {
        return 0;
}

static int fail_commit(Store *s, void *userdata) {
        return -EIO;
}

START_TEST(test_store_reconcile) {
        _cleanup_free_ char *err = NULL;
        _cleanup_(store_freep) Store *s = NULL;
        char **req[3] = { ids_a, ids_b, ids_de };
        uint64_t ids[3], seen = 0;
        uint64_t release[] = { 0, 12345 };
        StoreHolder h = {}, set = { .pod_namespace = (char *) "ns", .pod_name = (char *) "pod",
                                    .container_name = (char *) "ctr" };

        ck_assert_int_eq(store_open(dir, "boot", &s, &err), 0);
        ck_assert_int_eq(store_allocate(s, "gpu.intel.com/i915", req, 3, NOW, ids, NULL, NULL), 0);
        ck_assert_int_eq(store_foreach_allocation(s, 0, count_cb, NULL), 3);

        /* A failure before COMMIT changes nothing. */
        release[0] = ids[0];
        set.id = ids[1];
        store_set_before_commit(s, fail_commit, NULL);
        ck_assert_int_eq(store_reconcile(s, release, 2, &set, 1, NOW + 5), -EIO);
        store_set_before_commit(s, NULL, NULL);
        ck_assert_int_eq(store_foreach_allocation(s, 0, count_cb, NULL), 3);
        ck_assert_int_eq(store_get_holder(s, ids[1], &h, &seen), 0);
        ck_assert_str_eq(h.pod_name, "");
        store_holder_done(&h);

        /* Unknown id 12345 ignored; holder recorded; devices of the released row gone. */
        ck_assert_int_eq(store_reconcile(s, release, 2, &set, 1, NOW + 5), 0);
        ck_assert_int_eq(store_foreach_allocation(s, 0, count_cb, NULL), 2);
        ck_assert_int_eq(store_get_holder(s, ids[0], &h, NULL), -ENOENT);
        ck_assert_int_eq(store_get_holder(s, ids[1], &h, &seen), 0);
        ck_assert_str_eq(h.pod_namespace, "ns");
        ck_assert_str_eq(h.pod_name, "pod");
        ck_assert_str_eq(h.container_name, "ctr");
        ck_assert_uint_eq(seen, NOW + 5);
        store_holder_done(&h);
        s = store_free(s);
        /* Schema v4: the ids of an allocation in one column, joined by line breaks. */
        ck_assert_int_eq(raw_int("SELECT sum(length(device_ids) - length(replace(device_ids, char(10), '')) + 1) "
                                 "FROM allocations"), 3);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations WHERE "
                                 "instr(char(10) || device_ids || char(10), char(10) || 'a' || char(10)) > 0"), 0);
}
END_TEST

static int count_commits(Store *s, void *userdata) {
        (*(int *) userdata)++;
        return 0;
}

/* A reconciliation that changes nothing (holders already recorded, unknown ids) runs no
 * transaction: no fsync before every shared Allocate. A changed holder is written. */
START_TEST(test_store_reconcile_writes_only_changes) {
        _cleanup_free_ char *err = NULL;
        _cleanup_(store_freep) Store *s = NULL;
        char **req[3] = { ids_a, ids_b, ids_de };
        uint64_t ids[3], seen = 0, unknown = 99999;
        StoreHolder h = {}, set[2] = {
                { .pod_namespace = (char *) "ns", .pod_name = (char *) "p1", .container_name = (char *) "c" },
                { .pod_namespace = (char *) "ns", .pod_name = (char *) "p2", .container_name = (char *) "c" },
        };
        int commits = 0;

        ck_assert_int_eq(store_open(dir, "boot", &s, &err), 0);
        ck_assert_int_eq(store_allocate(s, "gpu.intel.com/i915", req, 3, NOW, ids, NULL, NULL), 0);
        set[0].id = ids[0];
        set[1].id = ids[1];
        store_set_before_commit(s, count_commits, &commits);

        ck_assert_int_eq(store_reconcile(s, NULL, 0, set, 2, NOW + 1), 0);
        ck_assert_int_eq(commits, 1);
        ck_assert_int_eq(store_reconcile(s, NULL, 0, set, 2, NOW + 2), 0);
        ck_assert_int_eq(store_reconcile(s, &unknown, 1, set, 2, NOW + 3), 0);
        ck_assert_int_eq(store_reconcile(s, NULL, 0, NULL, 0, NOW + 3), 0);
        ck_assert_int_eq(commits, 1);
        /* seen_usec: when this holder was first reported. */
        ck_assert_int_eq(store_get_holder(s, ids[0], &h, &seen), 0);
        ck_assert_uint_eq(seen, NOW + 1);
        store_holder_done(&h);

        /* Another container holds ids[1] now: written, with its time. */
        set[1].pod_name = (char *) "p3";
        ck_assert_int_eq(store_reconcile(s, NULL, 0, set, 2, NOW + 4), 0);
        ck_assert_int_eq(commits, 2);
        ck_assert_int_eq(store_get_holder(s, ids[1], &h, &seen), 0);
        ck_assert_str_eq(h.pod_name, "p3");
        ck_assert_uint_eq(seen, NOW + 4);
        store_holder_done(&h);
        ck_assert_int_eq(store_get_holder(s, ids[0], &h, &seen), 0);
        ck_assert_uint_eq(seen, NOW + 1);
        store_holder_done(&h);

        /* Releasing writes; releasing it again does not. */
        ck_assert_int_eq(store_reconcile(s, &ids[2], 1, set, 2, NOW + 5), 0);
        ck_assert_int_eq(commits, 3);
        ck_assert_int_eq(store_reconcile(s, &ids[2], 1, set, 2, NOW + 6), 0);
        ck_assert_int_eq(commits, 3);
        ck_assert_int_eq(store_foreach_allocation(s, 0, count_cb, NULL), 2);

        /* The holders known in memory are the ones on disk: a reopened store writes
         * nothing for them either. */
        s = store_free(s);
        ck_assert_int_eq(store_open(dir, "boot", &s, &err), 0);
        store_set_before_commit(s, count_commits, &commits);
        ck_assert_int_eq(store_reconcile(s, NULL, 0, set, 2, NOW + 7), 0);
        ck_assert_int_eq(commits, 3);
}
END_TEST

typedef struct Seen {
        size_t n;
        ReconcileAllocation a[8];
        char *ids[8][2];                /* one device id each, NULL-terminated */
} Seen;

/* Copies (the plan below runs on a store that is freed in between). */
static int seen_cb(uint64_t id, const char *resource, char * const *device_ids, uint64_t created_usec,
                   const char *boot_id, bool seen, void *userdata) {
        Seen *l = userdata;

        ck_assert_uint_lt(l->n, ELEMENTSOF(l->a));
        ck_assert_uint_eq(strv_length((char **) device_ids), 1);
        l->ids[l->n][0] = strdup(device_ids[0]);
        ck_assert_ptr_nonnull(l->ids[l->n][0]);
        l->a[l->n] = (ReconcileAllocation) {
                .id = id, .resource = "gpu.intel.com/i915", .created_usec = created_usec, .boot_id = "boot",
                .seen = seen,
        };
        l->n++;
        return 0;
}

static void seen_done(Seen *l) {
        for (size_t i = 0; i < l->n; i++)
                free(l->ids[i][0]);
        *l = (Seen) {};
}

static bool seen_of(Store *s, uint64_t id) {
        Seen l = {};
        int found = -1;

        ck_assert_int_ge(store_foreach_allocation(s, 0, seen_cb, &l), 0);
        for (size_t i = 0; i < l.n; i++)
                if (l.a[i].id == id)
                        found = l.a[i].seen;
        seen_done(&l);
        ck_assert_int_ge(found, 0);
        return found;
}

/* "Reported before" is the recorded holder: set only by a committed reconciliation, kept
 * in the file, so a restarted broker releases a dropped allocation at once too. */
START_TEST(test_store_seen_survives_restart) {
        _cleanup_free_ char *err = NULL;
        _cleanup_(store_freep) Store *s = NULL;
        _cleanup_(reconcile_plan_done) ReconcilePlan p = {};
        char **req[2] = { ids_a, ids_b };
        uint64_t ids[2];
        StoreHolder set = { .pod_namespace = (char *) "ns", .pod_name = (char *) "p1", .container_name = (char *) "" };
        Seen l = {};

        ck_assert_int_eq(store_open(dir, "boot", &s, &err), 0);
        ck_assert_int_eq(store_allocate(s, "gpu.intel.com/i915", req, 2, NOW, ids, NULL, NULL), 0);
        ck_assert(!seen_of(s, ids[0]));
        ck_assert(!seen_of(s, ids[1]));

        /* A reconciliation that did not commit sees nothing. */
        set.id = ids[0];
        store_set_before_commit(s, fail_commit, NULL);
        ck_assert_int_eq(store_reconcile(s, NULL, 0, &set, 1, NOW + 1), -EIO);
        store_set_before_commit(s, NULL, NULL);
        ck_assert(!seen_of(s, ids[0]));

        ck_assert_int_eq(store_reconcile(s, NULL, 0, &set, 1, NOW + 1), 0);
        ck_assert(seen_of(s, ids[0]));
        ck_assert(!seen_of(s, ids[1]));

        /* A restart. Both are young; the one reported before is released by a List that
         * no longer reports it, the other is kept. */
        s = store_free(s);
        ck_assert_int_eq(store_open(dir, "boot", &s, &err), 0);
        ck_assert(seen_of(s, ids[0]));
        ck_assert(!seen_of(s, ids[1]));
        ck_assert_int_eq(store_foreach_allocation(s, 0, seen_cb, &l), 2);
        for (size_t i = 0; i < l.n; i++)
                l.a[i].device_ids = l.ids[i];
        ck_assert_int_eq(reconcile_plan(l.a, l.n, NULL, 0, "boot", NOW + 2 * SEC, GRACE, &p), 0);
        ck_assert_uint_eq(p.n_release, 1);
        ck_assert_uint_eq(p.release[0], ids[0]);
        ck_assert_uint_eq(p.n_young, 1);
        ck_assert_int_eq(store_reconcile(s, p.release, p.n_release, NULL, 0, NOW + 2 * SEC), 0);
        seen_done(&l);
        s = store_free(s);
        ck_assert_int_eq(raw_int("SELECT count(*) FROM allocations"), 1);
        ck_assert_int_eq(raw_int("SELECT id FROM allocations"), (int64_t) ids[1]);
}
END_TEST

/* A holder written by a schema-2 broker counts as seen after the migration; an
 * allocation without one does not. */
START_TEST(test_store_migrates_v2_seen) {
        _cleanup_free_ char *err = NULL;
        _cleanup_(store_freep) Store *s = NULL;

        raw_exec("CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);"
                 "CREATE TABLE allocations (id INTEGER PRIMARY KEY AUTOINCREMENT, resource TEXT NOT NULL,"
                 "  created_usec INTEGER NOT NULL, boot_id TEXT NOT NULL);"
                 "CREATE TABLE allocation_devices (allocation_id INTEGER NOT NULL REFERENCES allocations (id)"
                 "  ON DELETE CASCADE, device_id TEXT NOT NULL, UNIQUE (allocation_id, device_id));"
                 "CREATE INDEX allocation_devices_device ON allocation_devices (device_id);"
                 "ALTER TABLE allocations ADD COLUMN pod_namespace TEXT NOT NULL DEFAULT '';"
                 "ALTER TABLE allocations ADD COLUMN pod_name TEXT NOT NULL DEFAULT '';"
                 "ALTER TABLE allocations ADD COLUMN container_name TEXT NOT NULL DEFAULT '';"
                 "ALTER TABLE allocations ADD COLUMN seen_usec INTEGER NOT NULL DEFAULT 0;"
                 "INSERT INTO meta VALUES ('boot_id', 'boot');"
                 "INSERT INTO allocations (resource, created_usec, boot_id, pod_namespace, pod_name, seen_usec)"
                 "  VALUES ('gpu.intel.com/i915', 5, 'boot', 'ns', 'p1', 6);"
                 "INSERT INTO allocations (resource, created_usec, boot_id) VALUES ('gpu.intel.com/i915', 5, 'boot');"
                 "INSERT INTO allocation_devices VALUES (1, 'a');"
                 "INSERT INTO allocation_devices VALUES (2, 'b');"
                 "PRAGMA user_version = 2;");

        ck_assert_int_eq(store_open(dir, "boot", &s, &err), 0);
        ck_assert(seen_of(s, 1));
        ck_assert(!seen_of(s, 2));
        s = store_free(s);
        ck_assert_int_eq(raw_int("PRAGMA user_version"), STORE_SCHEMA_VERSION);
}
END_TEST

typedef struct Dump {
        char text[65536];
        size_t len;
} Dump;

static int dump_cb(uint64_t id, const char *resource, char * const *device_ids, uint64_t created_usec,
                   const char *boot_id, bool seen, void *userdata) {
        Dump *d = userdata;
        _cleanup_free_ char *ids = strv_join(device_ids, ",");
        int n;

        n = snprintf(d->text + d->len, sizeof(d->text) - d->len, "%" PRIu64 " %s %s %" PRIu64 " %s\n",
                     id, resource, ids, created_usec, boot_id);
        ck_assert_int_gt(n, 0);
        ck_assert_uint_lt(d->len + (size_t) n, sizeof(d->text));
        d->len += (size_t) n;
        return 0;
}

/* The store's copy of the allocations and its holder index follow every commit: after
 * random allocations, releases and holder changes (and failed commits), they equal what a
 * freshly opened store reads from the file. */
START_TEST(test_store_copy_follows_commits) {
        _cleanup_free_ char *err = NULL;
        _cleanup_(store_freep) Store *s = NULL;
        static char *pool[] = { (char *) "0000:03:00.0", (char *) "0000:03:00.0-1", (char *) "0000:04:00.0-0",
                                (char *) "0000:04:00.0-1", (char *) "x" };
        uint64_t live[256];
        size_t n_live = 0;
        unsigned seed = 7;
        int fails = 0;

        ck_assert_int_eq(store_open(dir, "boot", &s, &err), 0);
        for (int step = 0; step < 300; step++) {
                Dump *mem = calloc(1, sizeof(Dump)), *disk = calloc(1, sizeof(Dump));
                _cleanup_(store_freep) Store *t = NULL;
                int what = rand_r(&seed) % 5;

                ck_assert_ptr_nonnull(mem);
                ck_assert_ptr_nonnull(disk);
                if (what <= 2 || n_live == 0) {
                        char *a[3] = { pool[rand_r(&seed) % 5], NULL, NULL };
                        char *b[2] = { pool[rand_r(&seed) % 5], NULL };
                        char **reqs[2] = { a, b };
                        size_t n = 1 + (size_t) (rand_r(&seed) % 2);
                        uint64_t got[2];

                        if (rand_r(&seed) % 2 && !streq(a[0], pool[4]))
                                a[1] = pool[4];
                        /* One call never names an id twice (the broker refuses that). */
                        if (streq(b[0], a[0]) || streq_ptr(b[0], a[1]))
                                n = 1;
                        if (rand_r(&seed) % 8 == 0) {
                                store_set_before_commit(s, fail_commit, NULL);
                                ck_assert_int_eq(store_allocate(s, "r", reqs, n, NOW + (uint64_t) step, got, NULL, NULL), -EIO);
                                store_set_before_commit(s, NULL, NULL);
                                fails++;
                        } else {
                                ck_assert_int_eq(store_allocate(s, rand_r(&seed) % 3 ? "r" : "q", reqs, n,
                                                                NOW + (uint64_t) step, got, NULL, NULL), 0);
                                for (size_t i = 0; i < n && n_live < 256; i++)
                                        live[n_live++] = got[i];
                        }
                } else {
                        /* One to three released at once (and a holder recorded). */
                        uint64_t rel[3];
                        size_t n_rel = 0, want = 1 + (size_t) (rand_r(&seed) % 3);
                        StoreHolder hold = { .id = live[rand_r(&seed) % n_live], .pod_namespace = (char *) "ns",
                                             .pod_name = (char *) (what == 3 ? "a" : "b"),
                                             .container_name = (char *) "c" };

                        while (n_rel < want && n_live > 0) {
                                size_t k = (size_t) rand_r(&seed) % n_live;

                                rel[n_rel++] = live[k];
                                live[k] = live[--n_live];
                        }
                        ck_assert_int_eq(store_reconcile(s, rel, n_rel, &hold, 1, NOW), 0);
                }

                ck_assert_int_ge(store_foreach_allocation(s, 0, dump_cb, mem), 0);
                ck_assert_uint_eq(holders_size(store_get_holders(s)),
                                  (size_t) store_foreach_allocation(s, 0, count_cb, NULL));
                ck_assert_int_eq(store_open(dir, "boot", &t, &err), 0);
                ck_assert_int_ge(store_foreach_allocation(t, 0, dump_cb, disk), 0);
                ck_assert_str_eq(mem->text, disk->text);
                free(mem);
                free(disk);
        }
        ck_assert_int_gt(fails, 0);
        ck_assert_uint_gt(n_live, 0);
}
END_TEST

START_TEST(test_store_migrates_v1) {
        _cleanup_free_ char *err = NULL;
        _cleanup_(store_freep) Store *s = NULL;
        StoreHolder h = {};

        /* A database as the schema-1 broker wrote it. */
        raw_exec("CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);"
                 "CREATE TABLE allocations (id INTEGER PRIMARY KEY AUTOINCREMENT, resource TEXT NOT NULL,"
                 "  created_usec INTEGER NOT NULL, boot_id TEXT NOT NULL);"
                 "CREATE TABLE allocation_devices (allocation_id INTEGER NOT NULL REFERENCES allocations (id)"
                 "  ON DELETE CASCADE, device_id TEXT NOT NULL, UNIQUE (allocation_id, device_id));"
                 "CREATE INDEX allocation_devices_device ON allocation_devices (device_id);"
                 "INSERT INTO meta VALUES ('boot_id', 'old');"
                 "INSERT INTO allocations (resource, created_usec, boot_id) VALUES ('r', 5, 'old');"
                 "INSERT INTO allocation_devices VALUES (1, 'card0');"
                 "PRAGMA user_version = 1;");

        ck_assert_int_eq(store_open(dir, "boot", &s, &err), 0);
        ck_assert_str_eq(store_get_previous_boot_id(s), "old");
        ck_assert_int_eq(store_foreach_allocation(s, 0, count_cb, NULL), 1);
        ck_assert(!seen_of(s, 1));
        ck_assert_int_eq(store_get_holder(s, 1, &h, NULL), 0);
        ck_assert_str_eq(h.pod_name, "");
        store_holder_done(&h);
        s = store_free(s);
        ck_assert_int_eq(raw_int("PRAGMA user_version"), STORE_SCHEMA_VERSION);
}
END_TEST

typedef struct Loaded {
        size_t n;
        char ids[4][64];
        bool has_nodes[4];
        bool healthy[4];
        int32_t numa[4];
} Loaded;

static int load_cb(const StoreInventoryGpu *g, void *userdata) {
        Loaded *l = userdata;

        ck_assert_uint_lt(l->n, 4);
        snprintf(l->ids[l->n], sizeof(l->ids[0]), "%s|%s|%s", g->id, g->device_nodes ?: "-", g->by_path_nodes ?: "-");
        l->has_nodes[l->n] = g->device_nodes != NULL;
        l->healthy[l->n] = g->healthy;
        l->numa[l->n] = g->numa_node;
        l->n++;
        return 0;
}

START_TEST(test_store_inventory) {
        _cleanup_free_ char *err = NULL;
        _cleanup_(store_freep) Store *s = NULL;
        StoreInventoryGpu g[] = {
                { .path = "/io/kgpu/Probe1/gpu/a", .id = "0000:03:00.0", .vendor = "intel", .driver = "i915",
                  .card_node = "/dev/dri/card0", .render_node = "/dev/dri/renderD128", .health_reason = "",
                  .device_nodes = "/dev/dri/card0\n/dev/dri/renderD128", .numa_node = 1, .device_id = 0x56a0,
                  .healthy = true },
                { .path = "/io/kgpu/Probe1/gpu/b", .id = "0000:04:00.0", .vendor = "intel", .driver = "xe",
                  .card_node = "", .render_node = "", .health_reason = "removed", .numa_node = -1,
                  .healthy = false },
        };
        Loaded l = {};

        ck_assert_int_eq(store_open(dir, "boot", &s, &err), 0);
        ck_assert_int_eq(store_foreach_inventory(s, load_cb, &l), 0);
        ck_assert_int_eq(store_save_inventory(s, g, 2), 0);
        s = store_free(s);
        raw_exec("INSERT INTO inventory VALUES ('/bad', 'x', 'v', 'd', '', '', '', NULL, NULL, 0, 0, 5)");

        ck_assert_int_eq(store_open(dir, "boot", &s, &err), 0);
        ck_assert_int_eq(store_foreach_inventory(s, load_cb, &l), 2);
        ck_assert_str_eq(l.ids[0], "0000:03:00.0|/dev/dri/card0\n/dev/dri/renderD128|-");
        ck_assert_str_eq(l.ids[1], "0000:04:00.0|-|-");
        ck_assert(l.has_nodes[0] && !l.has_nodes[1]);
        ck_assert(l.healthy[0] && !l.healthy[1]);
        ck_assert_int_eq(l.numa[0], 1);
        ck_assert_int_eq(l.numa[1], -1);

        /* Saving replaces. */
        l = (Loaded) {};
        ck_assert_int_eq(store_save_inventory(s, g + 1, 1), 0);
        ck_assert_int_eq(store_foreach_inventory(s, load_cb, &l), 1);
        ck_assert_str_eq(l.ids[0], "0000:04:00.0|-|-");
}
END_TEST

static Suite *reconcile_suite(void) {
        Suite *s = suite_create("reconcile");
        TCase *tc = tcase_create("plan");

        tcase_add_test(tc, test_plan_rules);
        tcase_add_test(tc, test_plan_grace_edges);
        tcase_add_test(tc, test_plan_seen_no_grace);
        tcase_add_test(tc, test_plan_many);
        suite_add_tcase(s, tc);

        tc = tcase_create("store");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_store_reconcile);
        tcase_add_test(tc, test_store_migrates_v1);
        tcase_add_test(tc, test_store_migrates_v2_seen);
        tcase_add_test(tc, test_store_seen_survives_restart);
        tcase_add_test(tc, test_store_reconcile_writes_only_changes);
        tcase_add_test(tc, test_store_copy_follows_commits);
        tcase_add_test(tc, test_store_inventory);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(reconcile_suite)
