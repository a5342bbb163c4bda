/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store-pages.c — pages written per commit of the broker's store (daemons/broker/store.h),
 * in process, no D-Bus: kgpu-bench-store [--quick] [DIRECTORY] [N...].
 *
 * Contract: for each N (default 1000 and 16384, the default broker.maxAllocations;
 * --quick: 200) a fresh store in DIRECTORY (default: a new directory under /tmp) is
 * filled with N allocations of one device id each, then each case runs ROUNDS times:
 *   allocate   an Allocate of an id nobody holds (one more allocation; the oldest one is
 *              released first so the count stays N)
 *   supersede  an Allocate of an id an older allocation holds (that one is deleted)
 *   release    a Reconcile that releases one allocation
 *   holder     a Reconcile that records the holder of one allocation
 * Before each measured call the WAL is checkpointed, so the WAL's length after the call
 * (store_get_wal_frames(): SQLite's wal hook) is the number of pages that commit wrote.
 * Prints one JSON object: per N and case the frames per commit (mean, p50, max) and the
 * call's wall time and thread CPU time (p50, p99, microseconds), and the open time with
 * N allocations stored. Uses only store.h, so it builds against older trees too (the
 * numbers before and after a schema change come from the same program).
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemons/broker/store.h"

#define ROUNDS_MAX 2000

static uint64_t clock_ns(clockid_t c) {
        struct timespec ts;

        clock_gettime(c, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

static int u64_cmp(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

static uint64_t pct(uint64_t *v, size_t n, unsigned p) {
        size_t i = (n * p + 99) / 100;

        return v[i > 0 ? i - 1 : 0];
}

typedef struct Sample {
        uint64_t frames[ROUNDS_MAX], wall[ROUNDS_MAX], cpu[ROUNDS_MAX];
        size_t n;
} Sample;

static void print_case(const char *name, Sample *s, bool last) {
        double sum = 0;

        for (size_t i = 0; i < s->n; i++)
                sum += (double) s->frames[i];
        qsort(s->frames, s->n, sizeof(uint64_t), u64_cmp);
        qsort(s->wall, s->n, sizeof(uint64_t), u64_cmp);
        qsort(s->cpu, s->n, sizeof(uint64_t), u64_cmp);
        printf("      \"%s\": {\"rounds\": %zu, \"frames_mean\": %.3f, \"frames_p50\": %llu, \"frames_max\": %llu, "
               "\"wall_p50_us\": %.1f, \"wall_p99_us\": %.1f, \"cpu_p50_us\": %.1f, \"cpu_p99_us\": %.1f}%s\n",
               name, s->n, s->n ? sum / (double) s->n : 0.0, (unsigned long long) pct(s->frames, s->n, 50),
               (unsigned long long) s->frames[s->n - 1], pct(s->wall, s->n, 50) / 1e3, pct(s->wall, s->n, 99) / 1e3,
               pct(s->cpu, s->n, 50) / 1e3, pct(s->cpu, s->n, 99) / 1e3, last ? "" : ",");
}

static void die(const char *what, int r) {
        fprintf(stderr, "kgpu-bench-store: %s: %s\n", what, strerror(r < 0 ? -r : r));
        exit(1);
}

/* The ids stored now, oldest first (a ring: ids[head .. head + n)). */
typedef struct Ring {
        uint64_t *id;
        unsigned *dev;
        size_t head, n, size;
} Ring;

static int allocate_dev(Store *s, unsigned dev, uint64_t *ret_id) {
        char name[32];
        char *ids[] = { name, NULL };
        char **reqs[] = { ids };

        snprintf(name, sizeof(name), "0000:%02x:%02x.%u", (dev >> 8) & 0xff, dev & 0xff, (dev >> 16) & 7);
        return store_allocate(s, "gpu.intel.com/i915", reqs, 1, 1764200000000000ULL + dev, ret_id, NULL, NULL);
}

static void measure_begin(Store *s, uint64_t *wall, uint64_t *cpu) {
        int r = store_checkpoint(s);

        if (r < 0)
                die("checkpoint", r);
        *wall = clock_ns(CLOCK_MONOTONIC);
        *cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

static void measure_end(Store *s, Sample *x, uint64_t wall, uint64_t cpu) {
        x->wall[x->n] = clock_ns(CLOCK_MONOTONIC) - wall;
        x->cpu[x->n] = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
        x->frames[x->n] = store_get_wal_frames(s);
        x->n++;
}

static void run(const char *dir, size_t n, size_t rounds, bool last) {
        static Sample alloc, super, rel, hold;
        char path[4096];
        Store *s = NULL;
        char *err = NULL;
        Ring ring = { .size = n + 1 };
        unsigned next_dev = 0;
        uint64_t w, c, t_open;
        int r;

        alloc.n = super.n = rel.n = hold.n = 0;
        snprintf(path, sizeof(path), "%s/%s", dir, STORE_FILE_NAME);
        (void) unlink(path);
        r = store_open(dir, "bench-boot", &s, &err);
        if (r < 0)
                die(err ?: "open", r);
        ring.id = calloc(ring.size, sizeof(uint64_t));
        ring.dev = calloc(ring.size, sizeof(unsigned));
        if (!ring.id || !ring.dev)
                die("calloc", -ENOMEM);
        for (size_t i = 0; i < n; i++) {
                r = allocate_dev(s, next_dev, &ring.id[i]);
                if (r < 0)
                        die("fill", r);
                ring.dev[i] = next_dev++;
                ring.n++;
        }
        store_free(s);
        s = NULL;
        w = clock_ns(CLOCK_MONOTONIC);
        r = store_open(dir, "bench-boot", &s, &err);
        if (r < 0)
                die(err ?: "reopen", r);
        t_open = clock_ns(CLOCK_MONOTONIC) - w;

        for (size_t i = 0; i < rounds; i++) {
                size_t tail = (ring.head + ring.n) % ring.size;
                uint64_t oldest = ring.id[ring.head], id;
                StoreHolder h;

                /* allocate: keep N stored, release the oldest unmeasured. */
                r = store_reconcile(s, &oldest, 1, NULL, 0, 1);
                if (r < 0)
                        die("release oldest", r);
                ring.head = (ring.head + 1) % ring.size;
                ring.n--;
                measure_begin(s, &w, &c);
                r = allocate_dev(s, next_dev, &id);
                measure_end(s, &alloc, w, c);
                if (r < 0)
                        die("allocate", r);
                tail = (ring.head + ring.n) % ring.size;
                ring.id[tail] = id;
                ring.dev[tail] = next_dev++;
                ring.n++;

                /* supersede: the device of a stored allocation (a pseudo-random one). */
                {
                        size_t k = (ring.head + (i * 7919) % ring.n) % ring.size;

                        measure_begin(s, &w, &c);
                        r = allocate_dev(s, ring.dev[k], &id);
                        measure_end(s, &super, w, c);
                        if (r < 0)
                                die("supersede", r);
                        /* Same device, a new allocation id (the ring keeps its place). */
                        ring.id[k] = id;
                }

                /* holder: record a holder of a stored allocation. */
                {
                        size_t k = (ring.head + (i * 104729) % ring.n) % ring.size;
                        char pod[32];

                        snprintf(pod, sizeof(pod), "pod-%zu", i);
                        h = (StoreHolder) { .id = ring.id[k], .pod_namespace = (char *) "default", .pod_name = pod,
                                            .container_name = (char *) "main" };
                        measure_begin(s, &w, &c);
                        r = store_reconcile(s, NULL, 0, &h, 1, 2);
                        measure_end(s, &hold, w, c);
                        if (r < 0)
                                die("holder", r);
                }

                /* release: the newest, then allocate it again unmeasured (count stays N). */
                {
                        size_t k = (ring.head + ring.n - 1) % ring.size;
                        unsigned dev = ring.dev[k];

                        measure_begin(s, &w, &c);
                        r = store_reconcile(s, &ring.id[k], 1, NULL, 0, 3);
                        measure_end(s, &rel, w, c);
                        if (r < 0)
                                die("release", r);
                        r = allocate_dev(s, dev, &ring.id[k]);
                        if (r < 0)
                                die("allocate again", r);
                }
        }

        printf("    \"%zu\": {\n      \"open_ms\": %.2f,\n", n, t_open / 1e6);
        print_case("allocate", &alloc, false);
        print_case("supersede", &super, false);
        print_case("release", &rel, false);
        print_case("holder", &hold, true);
        printf("    }%s\n", last ? "" : ",");
        store_free(s);
        (void) unlink(path);
        free(ring.id);
        free(ring.dev);
        free(err);
}

int main(int argc, char **argv) {
        char tmpl[] = "/tmp/kgpu-bench-store-XXXXXX";
        const char *dir = NULL;
        size_t sizes[16], n_sizes = 0, rounds = 500;
        bool quick = false, made = false;

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--quick") == 0)
                        quick = true;
                else if (argv[i][0] == '/')
                        dir = argv[i];
                else if (n_sizes < 16) {
                        char *end;
                        unsigned long v = strtoul(argv[i], &end, 10);

                        if (*end || v == 0 || v > 1000000) {
                                fprintf(stderr, "usage: kgpu-bench-store [--quick] [/DIRECTORY] [N...]\n");
                                return 2;
                        }
                        sizes[n_sizes++] = v;
                }
        }
        if (n_sizes == 0) {
                if (quick)
                        sizes[n_sizes++] = 200;
                else {
                        sizes[n_sizes++] = 1000;
                        sizes[n_sizes++] = 16384;
                }
        }
        if (quick)
                rounds = 50;
        if (!dir) {
                dir = mkdtemp(tmpl);
                if (!dir)
                        die("mkdtemp", errno);
                made = true;
        }
        printf("{\n  \"schema_version\": %d,\n  \"rounds\": %zu,\n  \"sizes\": {\n", STORE_SCHEMA_VERSION, rounds);
        for (size_t i = 0; i < n_sizes; i++)
                run(dir, sizes[i], rounds, i + 1 == n_sizes);
        printf("  }\n}\n");
        if (made) {
                char p[4096];

                snprintf(p, sizeof(p), "%s/%s-wal", dir, STORE_FILE_NAME);
                (void) unlink(p);
                snprintf(p, sizeof(p), "%s/%s-shm", dir, STORE_FILE_NAME);
                (void) unlink(p);
                (void) rmdir(dir);
        }
        return 0;
}
