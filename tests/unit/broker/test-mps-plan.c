/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-mps-plan.c — the SetMps arguments the broker sends (mps-client.c takes them from
 * resources_nvidia_mps_requests()): which GPUs go under MPS and with which default
 * limits (the largest slice's: a client's own limits only narrow the daemon's), for
 * configs as the nos fork writes them.
 */

#include <check.h>
#include <stdlib.h>

#include "common/util.h"
#include "daemons/broker/intel.h"
#include "daemons/broker/nvidia.h"
#include "daemons/broker/resources.h"
#include "tests/unit/test-main.h"

#define GIB (UINT64_C(1) << 30)
#define MIB (UINT64_C(1) << 20)
#define H100_MEMORY (UINT64_C(81559) * MIB)

typedef struct MpsPlan {
        bool enabled;
        bool requested;         /* an entry for the GPU exists (SetMps on or off) */
        uint64_t pinned_memory_bytes;
        uint32_t active_thread_percentage;
} MpsPlan;

static GpuInfo gpu(const char *uuid, int32_t index, uint64_t memory, const char *mig_mode) {
        return (GpuInfo) { .id = (char *) uuid, .uuid = (char *) uuid, .vendor = (char *) "nvidia",
                           .driver = (char *) "nvidia", .index = index, .memory_bytes = memory,
                           .mig_mode = (char *) mig_mode, .mps_state = (char *) "", .healthy = true,
                           .numa_node = -1, .product = (char *) "NVIDIA H100 80GB HBM3" };
}

static Config config(ConfigSharedResource *r, size_t n) {
        return (Config) { .nvidia_enabled = true, .nvidia_mps = { .resources = r, .n_resources = n } };
}

/* The request for GPU g on a node with only g. */
static void mps_plan_for_gpu(const Config *c, const GpuInfo *g, MpsPlan *ret) {
        Resources *r = NULL;
        NvidiaMpsRequest *l = NULL;
        size_t n = 0;

        ck_assert_int_eq(resources_new(true, &r), 0);
        ck_assert_int_eq(resources_set_nvidia_options(r, c), 0);
        ck_assert_int_ge(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/x", g, NULL), 0);
        ck_assert_int_eq(resources_nvidia_mps_requests(r, &l, &n), 0);
        *ret = (MpsPlan) {};
        for (size_t i = 0; i < n; i++)
                if (streq(l[i].gpu_id, g->id))
                        *ret = (MpsPlan) { .requested = true, .enabled = l[i].enabled,
                                           .pinned_memory_bytes = l[i].pinned_memory_bytes,
                                           .active_thread_percentage = l[i].active_thread_percentage };
        nvidia_mps_requests_free(l, n);
        resources_free(r);
}

START_TEST(test_mps_slices_of_different_sizes) {
        /* The example: two 2 GB slices and one 4 GB slice on one H100. */
        ConfigSharedResource r[] = {
                { .name = (char *) "nvidia.com/gpu", .replicas = 2, .memory_bytes = 2 * GIB },
                { .name = (char *) "nvidia.com/gpu", .replicas = 1, .memory_bytes = 4 * GIB },
        };
        Config c = config(r, 2);
        GpuInfo g = gpu("GPU-a", 0, H100_MEMORY, "Disabled");
        MpsPlan p;

        mps_plan_for_gpu(&c, &g, &p);
        ck_assert(p.enabled);
        /* The largest slice: the daemon's defaults are an upper bound that each client's
         * CUDA_MPS_* narrows (a lower daemon percentage would be obeyed over the 4 GB
         * slice's own), so not the 2 GB slice's 2 GiB / 2 %. */
        ck_assert_uint_eq(p.pinned_memory_bytes, 4 * GIB);
        ck_assert_uint_eq(p.active_thread_percentage, 5);      /* floor(100 * 4096 / 81559) */

        /* Order does not matter. */
        ConfigSharedResource q[] = { r[1], r[0] };
        c = config(q, 2);
        mps_plan_for_gpu(&c, &g, &p);
        ck_assert_uint_eq(p.pinned_memory_bytes, 4 * GIB);
        ck_assert_uint_eq(p.active_thread_percentage, 5);

        /* Three sizes, the largest in the middle: 1 GB, 10 GB, 3 GB. */
        ConfigSharedResource three[] = {
                { .name = (char *) "nvidia.com/gpu", .replicas = 3, .memory_bytes = 1 * GIB },
                { .name = (char *) "nvidia.com/gpu", .replicas = 1, .memory_bytes = 10 * GIB },
                { .name = (char *) "nvidia.com/gpu", .replicas = 2, .memory_bytes = 3 * GIB },
        };
        c = config(three, 3);
        mps_plan_for_gpu(&c, &g, &p);
        ck_assert(p.enabled);
        ck_assert_uint_eq(p.pinned_memory_bytes, 10 * GIB);
        ck_assert_uint_eq(p.active_thread_percentage, 12);     /* floor(100 * 10240 / 81559) */

        /* Slices past NVIDIA_REPLICAS_MAX are cut and do not count: 1024x 64 MiB fill the
         * GPU's slice numbers, the 8 GB slice after them is never advertised. */
        ConfigSharedResource cut[] = {
                { .name = (char *) "nvidia.com/gpu", .replicas = NVIDIA_REPLICAS_MAX, .memory_bytes = 64 * MIB },
                { .name = (char *) "nvidia.com/gpu", .replicas = 1, .memory_bytes = 8 * GIB },
        };
        c = config(cut, 2);
        mps_plan_for_gpu(&c, &g, &p);
        ck_assert(p.enabled);
        ck_assert_uint_eq(p.pinned_memory_bytes, 64 * MIB);
        ck_assert_uint_eq(p.active_thread_percentage, 1);

        /* Slices larger than the GPU: no MPS at all (nvidia.h). */
        ConfigSharedResource big[] = { { .name = (char *) "nvidia.com/gpu", .replicas = 1, .memory_bytes = 100 * GIB } };
        c = config(big, 1);
        mps_plan_for_gpu(&c, &g, &p);
        ck_assert(!p.enabled);
        /* Tiny: at least 1 %. */
        big[0].memory_bytes = 64 * MIB;
        mps_plan_for_gpu(&c, &g, &p);
        ck_assert_uint_eq(p.active_thread_percentage, 1);
}
END_TEST

START_TEST(test_mps_replicas_without_memory) {
        ConfigSharedResource r[] = { { .name = (char *) "nvidia.com/gpu", .replicas = 3 } };
        Config c = config(r, 1);
        GpuInfo g = gpu("GPU-a", 0, H100_MEMORY, "");
        MpsPlan p;

        mps_plan_for_gpu(&c, &g, &p);
        ck_assert(p.enabled);
        ck_assert_uint_eq(p.pinned_memory_bytes, H100_MEMORY / 3);
        ck_assert_uint_eq(p.active_thread_percentage, 33);
        r[0].replicas = 200;
        mps_plan_for_gpu(&c, &g, &p);
        ck_assert_uint_eq(p.active_thread_percentage, 1);

        /* Memory unknown and no memoryGB: no limit can be computed. */
        r[0].replicas = 2;
        g.memory_bytes = 0;
        mps_plan_for_gpu(&c, &g, &p);
        ck_assert(!p.enabled);
        ck_assert(!p.requested);
}
END_TEST

START_TEST(test_mps_which_gpus) {
        char *by_index[] = { (char *) "1", NULL };
        char *by_uuid[] = { (char *) "GPU-c", NULL };
        ConfigSharedResource r[] = {
                { .name = (char *) "nvidia.com/gpu", .replicas = 2, .devices = by_index },
                { .name = (char *) "nvidia.com/gpu", .replicas = 4, .devices = by_uuid },
        };
        Config c = config(r, 2);
        GpuInfo g0 = gpu("GPU-a", 0, H100_MEMORY, ""), g1 = gpu("GPU-b", 1, H100_MEMORY, ""),
                g2 = gpu("GPU-c", 2, H100_MEMORY, "");
        MpsPlan p;

        mps_plan_for_gpu(&c, &g0, &p);
        ck_assert(!p.enabled);
        mps_plan_for_gpu(&c, &g1, &p);
        ck_assert(p.enabled);
        ck_assert_uint_eq(p.active_thread_percentage, 50);
        mps_plan_for_gpu(&c, &g2, &p);
        ck_assert(p.enabled);
        ck_assert_uint_eq(p.active_thread_percentage, 25);

        /* MIG enabled: the probe would refuse MPS (InvalidArgs), so the broker does not ask. */
        GpuInfo mig = gpu("GPU-b", 1, H100_MEMORY, "Enabled");
        mps_plan_for_gpu(&c, &mig, &p);
        ck_assert(!p.enabled);
        ck_assert(!p.requested);

        /* A MIG profile under MPS: not supported. */
        ConfigSharedResource m[] = { { .name = (char *) "nvidia.com/mig-1g.10gb", .replicas = 2 } };
        c = config(m, 1);
        mps_plan_for_gpu(&c, &g0, &p);
        ck_assert(!p.enabled);
        ck_assert(!p.requested);

        /* Intel GPUs, NVIDIA disabled, no MPS section: nothing. */
        ConfigSharedResource all[] = { { .name = (char *) "nvidia.com/gpu", .replicas = 2 } };
        c = config(all, 1);
        GpuInfo intel = { .id = (char *) "0000:03:00.0", .vendor = (char *) "intel", .index = -1 };
        mps_plan_for_gpu(&c, &intel, &p);
        ck_assert(!p.enabled);
        c.nvidia_enabled = false;
        mps_plan_for_gpu(&c, &g0, &p);
        ck_assert(!p.enabled);
        c = config(NULL, 0);
        mps_plan_for_gpu(&c, &g0, &p);
        ck_assert(!p.enabled);
        ck_assert(!p.requested);

        /* MPS still running on a GPU the config no longer puts under MPS: stop it. */
        g0.mps_state = (char *) "running";
        mps_plan_for_gpu(&c, &g0, &p);
        ck_assert(p.requested);
        ck_assert(!p.enabled);
}
END_TEST

static Suite *mps_plan_suite(void) {
        Suite *s = suite_create("mps-plan");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_mps_slices_of_different_sizes);
        tcase_add_test(tc, test_mps_replicas_without_memory);
        tcase_add_test(tc, test_mps_which_gpus);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(mps_plan_suite)
