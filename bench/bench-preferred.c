/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * bench-preferred.c — micro-benchmark of the broker's NVIDIA GetPreferredAllocation and
 * device-table rebuild (daemons/broker/nvidia.c), in process, no D-Bus.
 *
 * Contract: prints one line per case with p50, p99 and max per call in microseconds
 * (CLOCK_MONOTONIC around each call) and, for preferred allocations, the p50 and p99 of
 * the thread's CPU time per call (CLOCK_THREAD_CPUTIME_ID: without preemption). Cases: the 8x H100 NVLink box of
 * tests/data/nvidia/topo-m-8xH100-1.txt (NV18 between all pairs, NUMA 0/1) for sizes
 * 1..8 with and without must_include; 8 GPUs without NVLink (topo-m-8xRTX4090-1.txt:
 * SYS, NUMA 0/1); 64 whole GPUs (greedy path); 1024 shared ids (8 GPUs x 128 replicas,
 * distributed and packed; 64 GPUs x 16); one GPU update with 64 x 1024 ids (health
 * change: in place; layout change: rebuild). Every answer is checked (size, NVLink-connected set on the 8x H100 box);
 * exit status 1 if one is wrong. --quick: fewer iterations (for the test suite).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/config.h"
#include "common/util.h"
#include "daemons/broker/intel.h"
#include "daemons/broker/nvidia.h"
#include "daemons/broker/resources.h"

#define GPUS_MAX 64

static char ids[GPUS_MAX][64];
static GpuLinkInfo links[GPUS_MAX][GPUS_MAX];
static char *nodes[] = { "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", NULL };
static int failures;

static uint64_t clock_ns(clockid_t c) {
        struct timespec ts;

        clock_gettime(c, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

static uint64_t now_ns(void) {
        return clock_ns(CLOCK_MONOTONIC);
}

/* CPU time of this thread: what a call costs without the time it waited for a CPU on a
 * busy machine (the wall-clock p99 there is the scheduler's, not ours). */
static uint64_t cpu_ns(void) {
        return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

static int u64_cmp(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

static void report_cpu(const char *name, uint64_t *t, uint64_t *cpu, size_t n) {
        qsort(t, n, sizeof(uint64_t), u64_cmp);
        printf("%-58s p50 %8.2f us  p99 %8.2f us  max %8.2f us", name,
               t[n / 2] / 1000.0, t[(n * 99) / 100] / 1000.0, t[n - 1] / 1000.0);
        if (cpu) {
                qsort(cpu, n, sizeof(uint64_t), u64_cmp);
                printf("  | cpu p50 %8.2f us  p99 %8.2f us", cpu[n / 2] / 1000.0, cpu[(n * 99) / 100] / 1000.0);
        }
        printf("  (n=%zu)\n", n);
}

static void report(const char *name, uint64_t *t, size_t n) {
        report_cpu(name, t, NULL, n);
}

/* n GPUs, link type between all pairs (nvlinks for "NV"), NUMA: first half 0, rest 1. */
static Resources *make(size_t n, const char *type, uint8_t nvlinks, const ConfigSharedResource *ts,
                       ConfigReplicaPolicy policy) {
        Config c = {
                .nvidia_enabled = true,
                .nvidia_device_list_strategy = DEVICE_LIST_STRATEGY_ENVVAR,
                .nvidia_cdi_annotation_prefix = "cdi.k8s.io/",
                .nvidia_replica_policy = policy,
        };
        Resources *r = NULL;

        if (resources_new(true, &r) < 0)
                abort();
        if (resources_set_nvidia_options(r, &c) < 0)
                abort();
        for (size_t i = 0; i < n; i++)
                snprintf(ids[i], sizeof(ids[i]), "GPU-00000000-0000-0000-0000-0000000000%02zu", i);
        for (size_t i = 0; i < n; i++) {
                size_t m = 0;
                char path[32];
                GpuInfo g = {
                        .id = ids[i], .vendor = "nvidia", .driver = "nvidia", .card_node = "", .render_node = "",
                        .health_reason = "", .device_nodes = nodes, .numa_node = i < n / 2 ? 0 : 1,
                        .healthy = true, .uuid = ids[i], .index = (int32_t) i, .product = "NVIDIA H100 80GB HBM3",
                        .memory_bytes = 81559ULL << 20, .compute_mode = "Default", .mig_mode = "Disabled",
                        .compute_capability = "9.0", .mps_state = "", .mps_pipe_directory = "",
                };

                for (size_t j = 0; j < n; j++)
                        if (j != i)
                                links[i][m++] = (GpuLinkInfo) { .peer = ids[j], .type = (char *) type, .nvlinks = nvlinks };
                g.links = links[i];
                g.n_links = m;
                snprintf(path, sizeof(path), "/gpu/%zu", i);
                if (resources_update_gpu(r, path, &g, NULL) < 0)
                        abort();
        }
        if (ts) {
                c.nvidia_time_slicing = (ConfigSharing) { .resources = (ConfigSharedResource *) ts, .n_resources = 1 };
                if (resources_set_nvidia_options(r, &c) < 0)
                        abort();
        }
        return r;
}

static char **all_ids(const Resources *r, const char *resource) {
        _cleanup_free_ Device *d = NULL;
        char **l = NULL;
        size_t n;

        if (resources_get_devices(r, resource, &d, &n) < 0)
                abort();
        for (size_t i = 0; i < n; i++)
                if (strv_extend(&l, d[i].id) < 0)
                        abort();
        return l;
}

/* True if every pair of the answer is NVLink-connected. */
static bool connected(const Resources *r, char **l) {
        for (size_t i = 0; l[i]; i++)
                for (size_t j = 0; l[j]; j++) {
                        const Gpu *a = resources_gpu_of_device(r, "nvidia.com/gpu", l[i]);
                        bool nv = false;

                        if (i == j)
                                continue;
                        for (size_t k = 0; a && k < a->info.n_links; k++)
                                nv = nv || (streq(a->info.links[k].peer, l[j]) && streq(a->info.links[k].type, "NV"));
                        if (!nv)
                                return false;
                }
        return true;
}

static void bench(const char *name, const Resources *r, const char *resource, char **available, char **must,
                  int32_t size, size_t iterations, bool need_connected) {
        uint64_t *t = calloc(iterations, sizeof(uint64_t)), *cpu = calloc(iterations, sizeof(uint64_t));

        if (!t || !cpu)
                abort();
        for (size_t i = 0; i < iterations; i++) {
                _cleanup_strv_free_ char **l = NULL;
                ResourceError e = {};
                uint64_t c = cpu_ns(), a = now_ns();
                int k = resources_preferred_allocation(r, resource, available, must, size, &l, &e);

                t[i] = now_ns() - a;
                cpu[i] = cpu_ns() - c;
                if (k < 0 || strv_length(l) != (size_t) size || (need_connected && !connected(r, l))) {
                        fprintf(stderr, "%s: wrong answer (%d, %zu ids)\n", name, k, strv_length(l));
                        failures++;
                        break;
                }
        }
        report_cpu(name, t, cpu, iterations);
        free(t);
        free(cpu);
}

int main(int argc, char *argv[]) {
        bool quick = argc > 1 && streq(argv[1], "--quick");
        size_t it = quick ? 200 : 20000;
        char name[128];

        {
                Resources *r = make(8, "NV", 18, NULL, REPLICA_POLICY_DISTRIBUTED);
                char **all = all_ids(r, "nvidia.com/gpu");

                for (int32_t size = 1; size <= 8; size++) {
                        snprintf(name, sizeof(name), "8x H100 NV18, whole GPUs, size %d", size);
                        bench(name, r, "nvidia.com/gpu", all, NULL, size, it, true);
                }
                bench("8x H100 NV18, whole GPUs, size 4, must_include 1", r, "nvidia.com/gpu", all,
                      (char *[]) { all[5], NULL }, 4, it, true);
                strv_free(all);
                resources_free(r);
        }
        {
                Resources *r = make(8, "SYS", 0, NULL, REPLICA_POLICY_DISTRIBUTED);
                char **all = all_ids(r, "nvidia.com/gpu");

                bench("8x RTX 4090 SYS, whole GPUs, size 4", r, "nvidia.com/gpu", all, NULL, 4, it, false);
                strv_free(all);
                resources_free(r);
        }
        {
                Resources *r = make(64, "NV", 4, NULL, REPLICA_POLICY_DISTRIBUTED);
                char **all = all_ids(r, "nvidia.com/gpu");

                bench("64 GPUs, whole GPUs, size 2 (exhaustive, 2016 sets)", r, "nvidia.com/gpu", all, NULL, 2, it / 10, false);
                bench("64 GPUs, whole GPUs, size 8 (greedy)", r, "nvidia.com/gpu", all, NULL, 8, it / 10, false);
                strv_free(all);
                resources_free(r);
        }
        for (int p = 0; p < 2; p++) {
                ConfigSharedResource ts = { .name = "nvidia.com/gpu", .replicas = 128 };
                Resources *r = make(8, "NV", 18, &ts, p ? REPLICA_POLICY_PACKED : REPLICA_POLICY_DISTRIBUTED);
                char **all = all_ids(r, "nvidia.com/gpu");
                const char *policy = p ? "packed" : "distributed";

                if (strv_length(all) != 1024)
                        abort();
                snprintf(name, sizeof(name), "1024 shared ids (8 x 128), %s, size 1", policy);
                bench(name, r, "nvidia.com/gpu", all, NULL, 1, it, false);
                snprintf(name, sizeof(name), "1024 shared ids (8 x 128), %s, size 8", policy);
                bench(name, r, "nvidia.com/gpu", all, NULL, 8, it, false);
                /* Half of them in use: the kubelet passes the other half. */
                snprintf(name, sizeof(name), "512 of 1024 shared ids available, %s, size 4", policy);
                bench(name, r, "nvidia.com/gpu", all + 512, NULL, 4, it, false);
                strv_free(all);
                resources_free(r);
        }
        {
                ConfigSharedResource ts = { .name = "nvidia.com/gpu", .replicas = 16 };
                Resources *r = make(64, "NV", 4, &ts, REPLICA_POLICY_DISTRIBUTED);
                char **all = all_ids(r, "nvidia.com/gpu");

                bench("1024 shared ids (64 x 16), distributed, size 8", r, "nvidia.com/gpu", all, NULL, 8, it, false);
                strv_free(all);
                resources_free(r);
        }
        for (int layout = 0; layout < 2; layout++) {
                /* What one GPU update costs at the bound, 64 GPUs x 1024 replicas: a health
                 * change (devices updated in place) or a layout change (full rebuild). */
                ConfigSharedResource ts = { .name = "nvidia.com/gpu", .replicas = 1024 };
                Resources *r = make(64, "NV", 4, &ts, REPLICA_POLICY_DISTRIBUTED);
                size_t n = quick ? 3 : 30;
                uint64_t *t = calloc(n, sizeof(uint64_t));

                if (!t)
                        abort();
                for (size_t i = 0; i < n; i++) {
                        GpuInfo g;
                        uint64_t a;

                        if (gpu_info_copy(&resources_get_gpu(r, "/gpu/3")->info, &g) < 0)
                                abort();
                        if (layout)
                                g.memory_bytes += (i % 2 ? 1 : -1) * (1ULL << 20);
                        else
                                g.healthy = i % 2;
                        a = now_ns();
                        if (resources_update_gpu(r, "/gpu/3", &g, NULL) < 0)
                                abort();
                        t[i] = now_ns() - a;
                        gpu_info_done(&g);
                }
                report(layout ? "one GPU update, layout change (rebuild), 64 x 1024 ids" :
                                "one GPU update, health change (in place), 64 x 1024 ids", t, n);
                free(t);
                resources_free(r);
        }
        return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
