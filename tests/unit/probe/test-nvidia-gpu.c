/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-nvidia-gpu.c — the NVIDIA Gpu1 fields of the Gpu object: the "unknown" values a
 * new (Intel) Gpu carries, and diff/copy of every new property.
 */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/gpu.h"
#include "tests/unit/test-main.h"

START_TEST(test_defaults_unknown) {
        _cleanup_(gpu_freep) Gpu *g = NULL;

        ck_assert_int_eq(gpu_new("0000:03:00.0", &g), 0);
        ck_assert_int_eq(g->index, -1);
        ck_assert_str_eq(g->compute_mode, "");
        ck_assert_str_eq(g->mig_mode, "");
        ck_assert_uint_eq(g->n_mig_devices, 0);
        ck_assert_ptr_null(g->mig_devices);
        ck_assert_str_eq(g->compute_capability, "");
        ck_assert_str_eq(g->driver_version, "");
        ck_assert_str_eq(g->cuda_version, "");
        ck_assert_uint_eq(g->n_links, 0);
        ck_assert_str_eq(g->mps_state, "");
        ck_assert_str_eq(g->mps_pipe_directory, "");
}
END_TEST

static bool strv_has(char **l, const char *s) {
        for (; l && *l; l++)
                if (streq(*l, s))
                        return true;
        return false;
}

START_TEST(test_diff_copy) {
        _cleanup_(gpu_freep) Gpu *a = NULL, *b = NULL;
        _cleanup_strv_free_ char **d = NULL;
        char *nodes[] = { (char *) "/dev/nvidia-caps/nvidia-cap21", (char *) "/dev/nvidia-caps/nvidia-cap22", NULL };
        GpuMigDevice mig = { .device_index = 0, .uuid = (char *) "MIG-3b6a1bd0-0c95-5d1e-9b2d-2c1a7b5f2d11",
                             .profile = (char *) "1g.10gb", .gi_id = 2, .ci_id = 0,
                             .device_nodes = nodes, .memory_bytes = UINT64_C(10) << 30 };
        GpuLink link = { .peer_id = (char *) "GPU-1", .type = (char *) "NV", .nvlinks = 18 };

        ck_assert_int_eq(gpu_new("GPU-0", &a), 0);
        ck_assert_int_eq(gpu_new("GPU-0", &b), 0);
        ck_assert_int_eq(gpu_diff_properties(a, b, &d), 0);
        ck_assert_uint_eq(strv_length(d), 0);
        d = strv_free(d);

        b->index = 3;
        ck_assert_int_eq(free_and_strdup(&b->compute_mode, "Exclusive_Process"), 0);
        ck_assert_int_eq(free_and_strdup(&b->mig_mode, "Enabled"), 0);
        ck_assert_int_eq(gpu_set_mig_devices(b, &mig, 1), 0);
        ck_assert_int_eq(free_and_strdup(&b->compute_capability, "9.0"), 0);
        ck_assert_int_eq(free_and_strdup(&b->driver_version, "550.54.15"), 0);
        ck_assert_int_eq(free_and_strdup(&b->cuda_version, "12.4"), 0);
        ck_assert_int_eq(gpu_set_links(b, &link, 1), 0);
        ck_assert_int_eq(free_and_strdup(&b->mps_state, "running"), 0);
        ck_assert_int_eq(free_and_strdup(&b->mps_pipe_directory, "/run/kgpu/mps/GPU-0/pipe"), 0);

        ck_assert_int_eq(gpu_diff_properties(a, b, &d), 0);
        ck_assert_uint_eq(strv_length(d), 10);
        ck_assert(strv_has(d, "Index"));
        ck_assert(strv_has(d, "ComputeMode"));
        ck_assert(strv_has(d, "MigMode"));
        ck_assert(strv_has(d, "MigDevices"));
        ck_assert(strv_has(d, "ComputeCapability"));
        ck_assert(strv_has(d, "DriverVersion"));
        ck_assert(strv_has(d, "CudaVersion"));
        ck_assert(strv_has(d, "Links"));
        ck_assert(strv_has(d, "MpsState"));
        ck_assert(strv_has(d, "MpsPipeDirectory"));
        d = strv_free(d);

        ck_assert_int_eq(gpu_copy_properties(a, b), 0);
        ck_assert_int_eq(gpu_diff_properties(a, b, &d), 0);
        ck_assert_uint_eq(strv_length(d), 0);
        d = strv_free(d);
        ck_assert_int_eq(a->index, 3);
        ck_assert_uint_eq(a->n_mig_devices, 1);
        ck_assert_str_eq(a->mig_devices[0].profile, "1g.10gb");
        ck_assert_str_eq(a->mig_devices[0].device_nodes[1], "/dev/nvidia-caps/nvidia-cap22");
        ck_assert_uint_eq(a->mig_devices[0].memory_bytes, UINT64_C(10) << 30);
        ck_assert_str_eq(a->links[0].type, "NV");
        ck_assert_uint_eq(a->links[0].nvlinks, 18);

        /* Only the CI id of the MIG device changes: MigDevices and nothing else. */
        b->mig_devices[0].ci_id = 1;
        ck_assert_int_eq(gpu_diff_properties(a, b, &d), 0);
        ck_assert_uint_eq(strv_length(d), 1);
        ck_assert_str_eq(d[0], "MigDevices");
        d = strv_free(d);

        /* Empty lists replace full ones. */
        ck_assert_int_eq(gpu_set_mig_devices(b, NULL, 0), 0);
        ck_assert_int_eq(gpu_set_links(b, NULL, 0), 0);
        ck_assert_int_eq(gpu_copy_properties(a, b), 0);
        ck_assert_uint_eq(a->n_mig_devices, 0);
        ck_assert_uint_eq(a->n_links, 0);
        ck_assert_int_eq(gpu_set_mig_devices(b, &mig, GPU_MIG_DEVICES_MAX + 1), -E2BIG);
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("nvidia-gpu");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_defaults_unknown);
        tcase_add_test(tc, test_diff_copy);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(suite)
