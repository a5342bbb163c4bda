/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-mps-plan.c — which GPUs the broker puts under MPS and with which default limits
 * (mps_plan_for_gpu(), the values SetMps carries).
 */

#include <check.h>
#include <stdlib.h>

#include "common/util.h"
#include "daemons/broker/mps-client.h"

#define GIB (UINT64_C(1) << 30)
#define MIB (UINT64_C(1) << 20)
#define H100_MEMORY (UINT64_C(81559) * MIB)

static GpuInfo gpu(const char *uuid, int32_t index, uint64_t memory, const char *mig_mode) {
        return (GpuInfo) { .id = (char *) uuid, .uuid = (char *) uuid, .vendor = (char *) "nvidia",
                           .index = index, .memory_bytes = memory, .mig_mode = (char *) mig_mode,
                           .mps_state = (char *) "" };
}

static Config config(ConfigSharedResource *r, size_t n) {
        return (Config) { .nvidia_enabled = true, .nvidia_mps = { .resources = r, .n_resources = n } };
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
        ck_assert_ptr_null(p.skipped);
        ck_assert_uint_eq(p.pinned_memory_bytes, 2 * GIB);     /* the smallest slice */
        ck_assert_uint_eq(p.active_thread_percentage, 2);      /* floor(100 * 2048 / 81559) */
        ck_assert_uint_eq(p.n_slices, 3);

        /* Order does not matter. */
        ConfigSharedResource q[] = { r[1], r[0] };
        c = config(q, 2);
        mps_plan_for_gpu(&c, &g, &p);
        ck_assert_uint_eq(p.pinned_memory_bytes, 2 * GIB);
        ck_assert_uint_eq(p.active_thread_percentage, 2);

        /* Larger than the GPU: at most 100 %. */
        ConfigSharedResource big[] = { { .name = (char *) "nvidia.com/gpu", .replicas = 1, .memory_bytes = 100 * GIB } };
        c = config(big, 1);
        mps_plan_for_gpu(&c, &g, &p);
        ck_assert_uint_eq(p.active_thread_percentage, 100);
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
        ck_assert_ptr_nonnull(p.skipped);
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
        ck_assert_ptr_null(p.skipped);
        mps_plan_for_gpu(&c, &g1, &p);
        ck_assert(p.enabled);
        ck_assert_uint_eq(p.active_thread_percentage, 50);
        ck_assert_uint_eq(p.n_slices, 2);
        mps_plan_for_gpu(&c, &g2, &p);
        ck_assert(p.enabled);
        ck_assert_uint_eq(p.active_thread_percentage, 25);

        /* MIG enabled: refused by the probe, so not asked; said why. */
        GpuInfo mig = gpu("GPU-b", 1, H100_MEMORY, "Enabled");
        mps_plan_for_gpu(&c, &mig, &p);
        ck_assert(!p.enabled);
        ck_assert_ptr_nonnull(p.skipped);

        /* A MIG profile under MPS: not supported. */
        ConfigSharedResource m[] = { { .name = (char *) "nvidia.com/mig-1g.10gb", .replicas = 2 } };
        c = config(m, 1);
        mps_plan_for_gpu(&c, &g0, &p);
        ck_assert(!p.enabled);
        ck_assert_ptr_nonnull(p.skipped);

        /* Intel GPUs, NVIDIA disabled, no MPS section: nothing. */
        ConfigSharedResource all[] = { { .name = (char *) "nvidia.com/gpu", .replicas = 2 } };
        c = config(all, 1);
        GpuInfo intel = { .id = (char *) "0000:03:00.0", .vendor = (char *) "intel", .index = -1 };
        mps_plan_for_gpu(&c, &intel, &p);
        ck_assert(!p.enabled);
        ck_assert_ptr_null(p.skipped);
        c.nvidia_enabled = false;
        mps_plan_for_gpu(&c, &g0, &p);
        ck_assert(!p.enabled);
        c = config(NULL, 0);
        mps_plan_for_gpu(&c, &g0, &p);
        ck_assert(!p.enabled);
        ck_assert_ptr_null(p.skipped);
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

int main(void) {
        SRunner *sr = srunner_create(mps_plan_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
