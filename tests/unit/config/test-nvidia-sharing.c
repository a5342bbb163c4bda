/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-nvidia-sharing.c — the `devices` rule of the NVIDIA sharing entries and which GPUs
 * sharing.mps puts under MPS (common/nvidia-sharing.c), the one rule the broker builds
 * slices by and the probe allows SetMps by; the configurations are loaded from YAML as
 * an operator writes them.
 */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/nvidia-sharing.h"
#include "common/util.h"
#include "tests/unit/test-main.h"

#define GPU0 "GPU-8e100991-ce97-6694-b8eb-b8b1ff5053af"
#define GPU1 "GPU-00000000-0000-0000-0000-000000000001"
#define MIG0 "MIG-0a1b2c3d-0000-0000-0000-000000000000"

static Config *load(const char *yaml) {
        _cleanup_free_ char *error = NULL;
        Config *c = NULL;

        ck_assert_msg(config_load_string(yaml, strlen(yaml), "kgpu.yaml", NULL, 0, &c, &error) >= 0, "%s", error);
        return c;
}

START_TEST(test_device_refs) {
        const NvidiaDeviceRef gpu = { .gpu_index = 3, .gpu_uuid = GPU0, .gpu_id = GPU0 };
        const NvidiaDeviceRef mig = { .gpu_index = 3, .gpu_uuid = GPU0, .gpu_id = GPU0, .mig = true,
                                      .mig_index = 1, .mig_uuid = MIG0, .mig_gi = 7, .mig_ci = 0 };
        const NvidiaDeviceRef unknown = { .gpu_index = -1, .gpu_uuid = GPU0 };
        char *list[] = { (char *) "0", (char *) GPU1, NULL };

        /* Indexes compare as numbers. */
        ck_assert(nvidia_device_ref_matches("3", &gpu));
        ck_assert(nvidia_device_ref_matches("003", &gpu));
        ck_assert(!nvidia_device_ref_matches("30", &gpu));
        ck_assert(!nvidia_device_ref_matches("1234567890", &gpu));     /* more than 9 digits */
        ck_assert(nvidia_device_ref_matches(GPU0, &gpu));
        ck_assert(!nvidia_device_ref_matches(GPU1, &gpu));
        /* A GPU's index or UUID names its MIG devices too; a MIG reference only them. */
        ck_assert(nvidia_device_ref_matches("3", &mig));
        ck_assert(nvidia_device_ref_matches(GPU0, &mig));
        ck_assert(nvidia_device_ref_matches("3:1", &mig));
        ck_assert(!nvidia_device_ref_matches("3:1", &gpu));
        ck_assert(!nvidia_device_ref_matches("3:0", &mig));
        ck_assert(nvidia_device_ref_matches(MIG0, &mig));
        ck_assert(!nvidia_device_ref_matches(MIG0, &gpu));
        ck_assert(nvidia_device_ref_matches("MIG-" GPU0 "/7/0", &mig));
        ck_assert(!nvidia_device_ref_matches("MIG-" GPU0 "/7/1", &mig));
        ck_assert(!nvidia_device_ref_matches("MIG-" GPU0 "/7", &mig));
        /* An unknown index matches no number; empty or NULL references match nothing. */
        ck_assert(!nvidia_device_ref_matches("0", &unknown));
        ck_assert(nvidia_device_ref_matches(GPU0, &unknown));
        ck_assert(!nvidia_device_ref_matches("", &gpu));
        ck_assert(!nvidia_device_ref_matches(NULL, &gpu));
        /* A list: any entry; NULL: all. */
        ck_assert(!nvidia_devices_match(list, &gpu));
        list[0] = (char *) "3";
        ck_assert(nvidia_devices_match(list, &gpu));
        ck_assert(nvidia_devices_match(NULL, &gpu));
}
END_TEST

START_TEST(test_mps_scope) {
        _cleanup_(config_freep) Config *none = NULL, *all = NULL, *some = NULL, *ts = NULL;

        none = load("version: v1\n");
        ck_assert(!config_nvidia_mps_names_gpu(none, 0, GPU0, GPU0));

        /* No devices: every GPU. */
        all = load("version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n");
        ck_assert(config_nvidia_mps_names_gpu(all, 0, GPU0, GPU0));
        ck_assert(config_nvidia_mps_names_gpu(all, 7, GPU1, GPU1));

        /* kgpu's 2x 2 GB + 1x 4 GB slices on GPU 0 only, and GPU1 by UUID. */
        some = load("version: v1\nsharing:\n  mps:\n    resources:\n"
                    "    - name: nvidia.com/gpu\n      rename: nvidia.com/gpu-2gb\n      replicas: 2\n"
                    "      memoryGB: 2\n      devices: [\"0\"]\n"
                    "    - name: nvidia.com/gpu\n      rename: nvidia.com/gpu-4gb\n      replicas: 1\n"
                    "      memoryGB: 4\n      devices: [\"0\", \"" GPU1 "\"]\n");
        ck_assert(config_nvidia_mps_names_gpu(some, 0, GPU0, GPU0));
        ck_assert(!config_nvidia_mps_names_gpu(some, 1, GPU0, GPU0));
        ck_assert(config_nvidia_mps_names_gpu(some, 5, GPU1, GPU1));
        ck_assert(config_nvidia_mps_names_gpu(some, -1, GPU1, GPU1));
        ck_assert(!config_nvidia_mps_names_gpu(some, -1, NULL, NULL));
        ck_assert(!config_nvidia_mps_names_gpu(NULL, 0, GPU0, GPU0));

        /* Time-slicing is no MPS. */
        ts = load("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
                  "      replicas: 4\n");
        ck_assert(!config_nvidia_mps_names_gpu(ts, 0, GPU0, GPU0));
}
END_TEST

static Suite *nvidia_sharing_suite(void) {
        Suite *s = suite_create("nvidia-sharing");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_device_refs);
        tcase_add_test(tc, test_mps_scope);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(nvidia_sharing_suite)
