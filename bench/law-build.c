/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * law-build.c — kgpu-bench-law: times grpcd's ListAndWatch build step in process.
 *
 * Contract: `kgpu-bench-law ROUNDS N...` builds, for each N, a Broker1.GetDevices reply
 * body (a(ssai)) with N devices named like shared Intel ids ("0000:18:00.0-<i>", one NUMA
 * node each), then ROUNDS times: rewinds it and runs what grpcd does with such a reply
 * before sending: grpcd_devices_from_bus() (parse and validate), grpcd_list_and_watch_encode()
 * (encode) and the comparison with the previous message (plugin_set_devices() compares
 * bytes). Prints one JSON object {"N": {"p50_ms", "p99_ms", "max_ms", "cpu_p50_ms",
 * "cpu_p99_ms", "bytes", "rounds"}, ...} on stdout: wall-clock times and this thread's CPU
 * time (what a loaded shared machine distorts least). The D-Bus message lives on an
 * unconnected bus object (one end of a socketpair), so no bus daemon is needed. Exit 1 on a bad argument (N must be 1..GRPCD_DEVICES_MAX,
 * ROUNDS 1..100000) or a failure of a step (logged).
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-bus.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/grpc/convert.h"

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return x < y ? -1 : x > y;
}

static int build_reply(sd_bus *bus, uint32_t n, sd_bus_message **ret) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        char id[64];
        int r;

        r = sd_bus_message_new_method_call(bus, &m, "io.kgpu.Bench", "/io/kgpu/Bench", "io.kgpu.Bench", "X");
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(m, 'a', "(ssai)");
        if (r < 0)
                return r;
        for (uint32_t i = 0; i < n; i++) {
                snprintf(id, sizeof(id), "0000:%02x:00.0-%u", 0x18 + i / 64, i % 64);
                r = sd_bus_message_append(m, "(ssai)", id, i % 7 ? "Healthy" : "Unhealthy", 1, (int32_t) (i / 1024));
                if (r < 0)
                        return r;
        }
        r = sd_bus_message_close_container(m);
        if (r < 0)
                return r;
        r = sd_bus_message_seal(m, 1, 0);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 0;
}

static int bench_one(sd_bus *bus, uint32_t n, uint32_t rounds, bool first) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_free_ uint64_t *t = NULL, *c = NULL;
        _cleanup_free_ uint8_t *prev = NULL;
        size_t prev_len = 0;
        int r;

        r = build_reply(bus, n, &m);
        if (r < 0)
                return log_error_errno(r, "Failed to build a reply with %u devices: %m", n);
        t = calloc(rounds, sizeof(uint64_t));
        c = calloc(rounds, sizeof(uint64_t));
        if (!t || !c)
                return log_oom();

        for (uint32_t k = 0; k < rounds; k++) {
                GrpcdDevice *d = NULL;
                size_t nd = 0, len = 0;
                uint8_t *buf = NULL;
                struct timespec a, b, ca, cb;
                bool changed;

                r = sd_bus_message_rewind(m, true);
                if (r < 0)
                        return log_error_errno(r, "Failed to rewind: %m");
                clock_gettime(CLOCK_MONOTONIC, &a);
                clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ca);
                r = grpcd_devices_from_bus(m, &d, &nd);
                if (r >= 0)
                        r = grpcd_list_and_watch_encode(d, nd, &buf, &len);
                clock_gettime(CLOCK_MONOTONIC, &b);
                if (r < 0) {
                        grpcd_devices_free(d, nd);
                        return log_error_errno(r, "Failed to convert %u devices: %m", n);
                }
                changed = !prev || len != prev_len || memcmp(buf, prev, len) != 0;
                clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cb);
                clock_gettime(CLOCK_MONOTONIC, &b);
                if (k > 0 && changed)  /* same input every round: a change is a bug */
                        return log_error_errno(-EIO, "Encoding %u devices is not deterministic.", n);
                t[k] = (uint64_t) (b.tv_sec - a.tv_sec) * 1000000000ULL + (uint64_t) b.tv_nsec - (uint64_t) a.tv_nsec;
                c[k] = (uint64_t) (cb.tv_sec - ca.tv_sec) * 1000000000ULL + (uint64_t) cb.tv_nsec - (uint64_t) ca.tv_nsec;
                grpcd_devices_free(d, nd);
                free(prev);
                prev = buf;
                prev_len = len;
        }

        qsort(t, rounds, sizeof(uint64_t), cmp_u64);
        qsort(c, rounds, sizeof(uint64_t), cmp_u64);
        printf("%s\"%u\": {\"p50_ms\": %.4f, \"p99_ms\": %.4f, \"max_ms\": %.4f, "
               "\"cpu_p50_ms\": %.4f, \"cpu_p99_ms\": %.4f, \"bytes\": %zu, \"rounds\": %u}",
               first ? "" : ", ", n, t[rounds / 2] / 1e6, t[(size_t) ((rounds - 1) * 0.99 + 0.5)] / 1e6,
               t[rounds - 1] / 1e6, c[rounds / 2] / 1e6, c[(size_t) ((rounds - 1) * 0.99 + 0.5)] / 1e6,
               prev_len, rounds);
        return 0;
}

int main(int argc, char *argv[]) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        int pair[2] = { -EBADF, -EBADF };
        uint32_t rounds;
        int r;

        log_setup("kgpu-bench-law");
        if (argc < 3 || safe_atou32(argv[1], &rounds) < 0 || rounds < 1 || rounds > 100000) {
                fprintf(stderr, "usage: %s ROUNDS(1..100000) N_DEVICES...\n", argv[0]);
                return EXIT_FAILURE;
        }
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0)
                return log_error_errno(errno, "socketpair: %m"), EXIT_FAILURE;
        r = sd_bus_new(&bus);
        if (r >= 0)
                r = sd_bus_set_fd(bus, pair[0], pair[0]);
        if (r >= 0)
                r = sd_bus_start(bus);
        if (r < 0) {
                log_error_errno(r, "Failed to set up a bus object: %m");
                safe_close(pair[1]);
                return EXIT_FAILURE;
        }

        for (int i = 2; i < argc; i++) {
                uint32_t n;

                if (safe_atou32(argv[i], &n) < 0 || n < 1 || n > GRPCD_DEVICES_MAX) {
                        fprintf(stderr, "N_DEVICES must be 1..%u, got '%s'\n", GRPCD_DEVICES_MAX, argv[i]);
                        safe_close(pair[1]);
                        return EXIT_FAILURE;
                }
        }
        printf("{");
        for (int i = 2; i < argc; i++) {
                uint32_t n = 0;

                (void) safe_atou32(argv[i], &n);  /* validated above */
                if (bench_one(bus, n, rounds, i == 2) < 0) {
                        safe_close(pair[1]);
                        return EXIT_FAILURE;
                }
        }
        printf("}\n");
        safe_close(pair[1]);
        return EXIT_SUCCESS;
}
