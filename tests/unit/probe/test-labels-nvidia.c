/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-labels-nvidia.c — the NVIDIA node labels (daemons/probe/labels-nvidia.c) for an
 * H100, A100s with MIG under the single and mixed strategies, an L40S, and shared
 * configs (time-slicing with and without rename, MPS), against label sets written out
 * here by hand from GPU feature discovery's rules.
 */

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/labels-nvidia.h"
#include "tests/unit/test-main.h"

#define MIB (UINT64_C(1) << 20)

static const char *DRIVER_LABELS_550 =
        "nvidia.com/cuda.driver-version.full=550.54.15\n"
        "nvidia.com/cuda.driver-version.major=550\n"
        "nvidia.com/cuda.driver-version.minor=54\n"
        "nvidia.com/cuda.driver-version.revision=15\n"
        "nvidia.com/cuda.driver.major=550\n"
        "nvidia.com/cuda.driver.minor=54\n"
        "nvidia.com/cuda.driver.rev=15\n"
        "nvidia.com/cuda.runtime-version.full=12.4\n"
        "nvidia.com/cuda.runtime-version.major=12\n"
        "nvidia.com/cuda.runtime-version.minor=4\n"
        "nvidia.com/cuda.runtime.major=12\n"
        "nvidia.com/cuda.runtime.minor=4\n";

static const LabelsNvidiaGpu H100 = {
        .product = "NVIDIA H100 80GB HBM3", .memory_bytes = 81559 * MIB, .compute_capability = "9.0",
        .driver_version = "550.54.15", .cuda_version = "12.4", .mig_mode = "Disabled", .pci_class = 0x030200,
};

static const LabelsNvidiaGpu L40S = {
        .product = "NVIDIA L40S", .memory_bytes = 46068 * MIB, .compute_capability = "8.9",
        .driver_version = "550.54.15", .cuda_version = "12.4", .mig_mode = "", .pci_class = 0x030200,
};

static const LabelsNvidiaMig A100_MIGS_0[] = {
        { "3g.20gb", 20096 * MIB }, { "1g.5gb", 4864 * MIB }, { "1g.5gb", 4864 * MIB },
};
static const LabelsNvidiaMig A100_MIGS_1[] = {
        { "1g.5gb", 4864 * MIB }, { "1c.3g.20gb", 20096 * MIB },
};
static const LabelsNvidiaMig A100_MIGS_ALL_1G[] = {
        { "1g.5gb", 4864 * MIB }, { "1g.5gb", 4864 * MIB }, { "1g.5gb", 4864 * MIB },
};

static LabelsNvidiaGpu a100(const LabelsNvidiaMig *migs, size_t n, const char *mig_mode) {
        return (LabelsNvidiaGpu) {
                .product = "NVIDIA A100-SXM4-40GB", .memory_bytes = 40960 * MIB, .compute_capability = "8.0",
                .driver_version = "535.129.03", .cuda_version = "12.2", .mig_mode = mig_mode,
                .pci_class = 0x030200, .migs = migs, .n_migs = n,
        };
}

static const char *DRIVER_LABELS_535 =
        "nvidia.com/cuda.driver-version.full=535.129.03\n"
        "nvidia.com/cuda.driver-version.major=535\n"
        "nvidia.com/cuda.driver-version.minor=129\n"
        "nvidia.com/cuda.driver-version.revision=03\n"
        "nvidia.com/cuda.driver.major=535\n"
        "nvidia.com/cuda.driver.minor=129\n"
        "nvidia.com/cuda.driver.rev=03\n"
        "nvidia.com/cuda.runtime-version.full=12.2\n"
        "nvidia.com/cuda.runtime-version.major=12\n"
        "nvidia.com/cuda.runtime-version.minor=2\n"
        "nvidia.com/cuda.runtime.major=12\n"
        "nvidia.com/cuda.runtime.minor=2\n";

static char *build(const LabelsNvidiaGpu *gpus, size_t n, const Config *c) {
        _cleanup_strv_free_ char **l = NULL;
        char *text, *with_nl;

        ck_assert_int_eq(labels_nvidia_build(gpus, n, c, &l), 0);
        ck_assert_ptr_nonnull(l);
        if (!l[0])
                return strdup("");
        text = strv_join(l, "\n");
        ck_assert_ptr_nonnull(text);
        ck_assert_int_ge(asprintf(&with_nl, "%s\n", text), 0);
        free(text);
        return with_nl;
}

static void assert_labels(const LabelsNvidiaGpu *gpus, size_t n, const Config *c, const char *a, const char *b) {
        _cleanup_free_ char *got = build(gpus, n, c), *want = NULL;

        ck_assert_int_ge(asprintf(&want, "%s%s", a, b), 0);
        ck_assert_str_eq(got, want);
}

START_TEST(test_h100) {
        Config c = {};

        assert_labels(&H100, 1, &c, DRIVER_LABELS_550,
                      "nvidia.com/gpu.compute.major=9\n"
                      "nvidia.com/gpu.compute.minor=0\n"
                      "nvidia.com/gpu.count=1\n"
                      "nvidia.com/gpu.family=hopper\n"
                      "nvidia.com/gpu.memory=81559\n"
                      "nvidia.com/gpu.mode=compute\n"
                      "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\n"
                      "nvidia.com/gpu.replicas=1\n"
                      "nvidia.com/gpu.sharing-strategy=none\n"
                      "nvidia.com/mig.capable=true\n"
                      "nvidia.com/mps.capable=false\n");
}
END_TEST

START_TEST(test_l40s_two) {
        LabelsNvidiaGpu g[2] = { L40S, L40S };
        Config c = {};

        assert_labels(g, 2, &c, DRIVER_LABELS_550,
                      "nvidia.com/gpu.compute.major=8\n"
                      "nvidia.com/gpu.compute.minor=9\n"
                      "nvidia.com/gpu.count=2\n"
                      "nvidia.com/gpu.family=ada-lovelace\n"
                      "nvidia.com/gpu.memory=46068\n"
                      "nvidia.com/gpu.mode=compute\n"
                      "nvidia.com/gpu.product=NVIDIA-L40S\n"
                      "nvidia.com/gpu.replicas=1\n"
                      "nvidia.com/gpu.sharing-strategy=none\n"
                      "nvidia.com/mig.capable=false\n"
                      "nvidia.com/mps.capable=false\n");
}
END_TEST

#define L40S_TAIL_FMT \
        "nvidia.com/gpu.compute.major=8\n" \
        "nvidia.com/gpu.compute.minor=9\n" \
        "nvidia.com/gpu.count=1\n" \
        "nvidia.com/gpu.family=ada-lovelace\n" \
        "nvidia.com/gpu.memory=46068\n" \
        "nvidia.com/gpu.mode=compute\n" \
        "nvidia.com/gpu.product=%s\n" \
        "nvidia.com/gpu.replicas=%s\n" \
        "nvidia.com/gpu.sharing-strategy=%s\n" \
        "nvidia.com/mig.capable=false\n" \
        "nvidia.com/mps.capable=%s\n"

static void assert_l40s(const Config *c, const char *product, const char *replicas, const char *strategy,
                        const char *mps_capable) {
        _cleanup_free_ char *tail = NULL;

        ck_assert_int_ge(asprintf(&tail, L40S_TAIL_FMT, product, replicas, strategy, mps_capable), 0);
        assert_labels(&L40S, 1, c, DRIVER_LABELS_550, tail);
}

START_TEST(test_l40s_shared) {
        ConfigSharedResource ts = { .name = (char *) "nvidia.com/gpu", .replicas = 4 };
        ConfigSharedResource ts_renamed = { .name = (char *) "nvidia.com/gpu", .rename = (char *) "nvidia.com/gpu.shared",
                                            .replicas = 4 };
        ConfigSharedResource ts_one = { .name = (char *) "nvidia.com/gpu", .replicas = 1 };
        ConfigSharedResource other = { .name = (char *) "nvidia.com/mig-1g.10gb", .replicas = 8 };
        ConfigSharedResource mps[] = {
                { .name = (char *) "nvidia.com/gpu", .rename = (char *) "nvidia.com/gpu-2gb", .replicas = 2,
                  .memory_bytes = UINT64_C(2) << 30 },
                { .name = (char *) "nvidia.com/gpu", .replicas = 3 },
        };
        Config c = {};

        c.nvidia_time_slicing = (ConfigSharing) { .resources = &ts, .n_resources = 1 };
        assert_l40s(&c, "NVIDIA-L40S-SHARED", "4", "time-slicing", "false");

        /* A rename drops the -SHARED suffix. */
        c.nvidia_time_slicing = (ConfigSharing) { .resources = &ts_renamed, .n_resources = 1 };
        assert_l40s(&c, "NVIDIA-L40S", "4", "time-slicing", "false");

        /* One replica is not shared. */
        c.nvidia_time_slicing = (ConfigSharing) { .resources = &ts_one, .n_resources = 1 };
        assert_l40s(&c, "NVIDIA-L40S", "1", "none", "false");

        /* An entry for another resource leaves nvidia.com/gpu alone. */
        c.nvidia_time_slicing = (ConfigSharing) { .resources = &other, .n_resources = 1 };
        assert_l40s(&c, "NVIDIA-L40S", "1", "none", "false");

        /* MPS (nos fork entries): the first nvidia.com/gpu entry counts; MPS-capable. */
        c.nvidia_time_slicing = (ConfigSharing) {};
        c.nvidia_mps = (ConfigSharing) { .resources = mps, .n_resources = 2 };
        assert_l40s(&c, "NVIDIA-L40S", "2", "mps", "true");
        c.nvidia_mps = (ConfigSharing) { .resources = mps + 1, .n_resources = 1 };
        assert_l40s(&c, "NVIDIA-L40S-SHARED", "3", "mps", "true");

        /* MPS wins over time-slicing when both are given. */
        c.nvidia_time_slicing = (ConfigSharing) { .resources = &ts, .n_resources = 1 };
        assert_l40s(&c, "NVIDIA-L40S-SHARED", "3", "mps", "true");
}
END_TEST

START_TEST(test_a100_mig_mixed) {
        LabelsNvidiaGpu g[2] = { a100(A100_MIGS_0, 3, "Enabled"), a100(A100_MIGS_1, 2, "Enabled") };
        Config c = { .nvidia_mig_strategy = MIG_STRATEGY_MIXED };
        ConfigSharedResource ts = { .name = (char *) "nvidia.com/mig-1g.5gb", .replicas = 2 };

        assert_labels(g, 2, &c, DRIVER_LABELS_535,
                      "nvidia.com/gpu.compute.major=8\n"
                      "nvidia.com/gpu.compute.minor=0\n"
                      "nvidia.com/gpu.count=2\n"
                      "nvidia.com/gpu.family=ampere\n"
                      "nvidia.com/gpu.memory=40960\n"
                      "nvidia.com/gpu.mode=compute\n"
                      "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\n"
                      "nvidia.com/gpu.replicas=0\n"
                      "nvidia.com/gpu.sharing-strategy=none\n"
                      "nvidia.com/mig-1c.3g.20gb.count=1\n"
                      "nvidia.com/mig-1c.3g.20gb.memory=20096\n"
                      "nvidia.com/mig-1c.3g.20gb.product=NVIDIA-A100-SXM4-40GB-MIG-1c.3g.20gb\n"
                      "nvidia.com/mig-1c.3g.20gb.replicas=1\n"
                      "nvidia.com/mig-1c.3g.20gb.sharing-strategy=none\n"
                      "nvidia.com/mig-1c.3g.20gb.slices.ci=1\n"
                      "nvidia.com/mig-1c.3g.20gb.slices.gi=3\n"
                      "nvidia.com/mig-1g.5gb.count=3\n"
                      "nvidia.com/mig-1g.5gb.memory=4864\n"
                      "nvidia.com/mig-1g.5gb.product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb\n"
                      "nvidia.com/mig-1g.5gb.replicas=1\n"
                      "nvidia.com/mig-1g.5gb.sharing-strategy=none\n"
                      "nvidia.com/mig-1g.5gb.slices.ci=1\n"
                      "nvidia.com/mig-1g.5gb.slices.gi=1\n"
                      "nvidia.com/mig-3g.20gb.count=1\n"
                      "nvidia.com/mig-3g.20gb.memory=20096\n"
                      "nvidia.com/mig-3g.20gb.product=NVIDIA-A100-SXM4-40GB-MIG-3g.20gb\n"
                      "nvidia.com/mig-3g.20gb.replicas=1\n"
                      "nvidia.com/mig-3g.20gb.sharing-strategy=none\n"
                      "nvidia.com/mig-3g.20gb.slices.ci=3\n"
                      "nvidia.com/mig-3g.20gb.slices.gi=3\n"
                      "nvidia.com/mig.capable=true\n"
                      "nvidia.com/mig.strategy=mixed\n"
                      "nvidia.com/mps.capable=false\n");

        /* A time-sliced MIG profile is SHARED with its replicas. */
        c.nvidia_time_slicing = (ConfigSharing) { .resources = &ts, .n_resources = 1 };
        {
                _cleanup_free_ char *got = build(g, 2, &c);

                ck_assert_ptr_nonnull(strstr(got, "nvidia.com/mig-1g.5gb.product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED\n"));
                ck_assert_ptr_nonnull(strstr(got, "nvidia.com/mig-1g.5gb.replicas=2\n"));
                ck_assert_ptr_nonnull(strstr(got, "nvidia.com/mig-1g.5gb.sharing-strategy=time-slicing\n"));
                ck_assert_ptr_nonnull(strstr(got, "nvidia.com/mig-3g.20gb.replicas=1\n"));
                /* The MIG-enabled full GPUs are labelled without sharing. */
                ck_assert_ptr_nonnull(strstr(got, "nvidia.com/gpu.replicas=0\n"));
        }
}
END_TEST

START_TEST(test_a100_mig_single) {
        LabelsNvidiaGpu g[2] = { a100(A100_MIGS_ALL_1G, 3, "Enabled"), a100(A100_MIGS_ALL_1G, 2, "Enabled") };
        Config c = { .nvidia_mig_strategy = MIG_STRATEGY_SINGLE };

        assert_labels(g, 2, &c, DRIVER_LABELS_535,
                      "nvidia.com/gpu.compute.major=8\n"
                      "nvidia.com/gpu.compute.minor=0\n"
                      "nvidia.com/gpu.count=5\n"
                      "nvidia.com/gpu.family=ampere\n"
                      "nvidia.com/gpu.memory=4864\n"
                      "nvidia.com/gpu.mode=compute\n"
                      "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-1g.5gb\n"
                      "nvidia.com/gpu.replicas=1\n"
                      "nvidia.com/gpu.sharing-strategy=none\n"
                      "nvidia.com/gpu.slices.ci=1\n"
                      "nvidia.com/gpu.slices.gi=1\n"
                      "nvidia.com/mig.capable=true\n"
                      "nvidia.com/mig.strategy=single\n"
                      "nvidia.com/mps.capable=false\n");

        /* Two profiles: invalid for single. */
        g[1] = a100(A100_MIGS_1, 2, "Enabled");
        assert_labels(g, 2, &c, DRIVER_LABELS_535,
                      "nvidia.com/gpu.compute.major=8\n"
                      "nvidia.com/gpu.compute.minor=0\n"
                      "nvidia.com/gpu.count=0\n"
                      "nvidia.com/gpu.family=ampere\n"
                      "nvidia.com/gpu.memory=0\n"
                      "nvidia.com/gpu.mode=compute\n"
                      "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-INVALID\n"
                      "nvidia.com/gpu.replicas=0\n"
                      "nvidia.com/gpu.sharing-strategy=none\n"
                      "nvidia.com/mig.capable=true\n"
                      "nvidia.com/mig.strategy=single\n"
                      "nvidia.com/mps.capable=false\n");

        /* MIG on one GPU and off on the other: invalid too (the MIG-off GPU's full labels
         * come before the invalid ones are written over them). */
        g[1] = a100(NULL, 0, "Disabled");
        {
                _cleanup_free_ char *got = build(g, 2, &c);

                ck_assert_ptr_nonnull(strstr(got, "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-INVALID\n"));
                ck_assert_ptr_nonnull(strstr(got, "nvidia.com/gpu.count=0\n"));
        }

        /* No MIG at all: as strategy none, plus the strategy label. */
        g[0] = a100(NULL, 0, "Disabled");
        {
                _cleanup_free_ char *got = build(g, 2, &c);

                ck_assert_ptr_nonnull(strstr(got, "nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\n"));
                ck_assert_ptr_nonnull(strstr(got, "nvidia.com/gpu.count=2\n"));
                ck_assert_ptr_nonnull(strstr(got, "nvidia.com/gpu.replicas=1\n"));
                ck_assert_ptr_nonnull(strstr(got, "nvidia.com/mig.strategy=single\n"));
        }
}
END_TEST

START_TEST(test_mps_capable_mig) {
        LabelsNvidiaGpu g[1] = { a100(A100_MIGS_ALL_1G, 3, "Enabled") };
        ConfigSharedResource mps = { .name = (char *) "nvidia.com/gpu", .replicas = 2 };
        Config c = { .nvidia_mps = { .resources = &mps, .n_resources = 1 } };
        _cleanup_free_ char *got = build(g, 1, &c);

        /* MPS is not possible on a MIG-enabled GPU. */
        ck_assert_ptr_nonnull(strstr(got, "nvidia.com/mps.capable=false\n"));
}
END_TEST

START_TEST(test_edge_values) {
        LabelsNvidiaGpu g = {
                .product = "  Weird  (GPU)\t name/x ", .memory_bytes = 0, .compute_capability = "12.0",
                .driver_version = "550.1", .cuda_version = "x", .mig_mode = "", .pci_class = 0x030000,
        };
        _cleanup_free_ char *got = NULL;
        _cleanup_strv_free_ char **l = NULL;

        got = build(&g, 1, NULL);
        ck_assert_str_eq(got,
                         "nvidia.com/cuda.driver-version.full=550.1\n"
                         "nvidia.com/cuda.driver-version.major=550\n"
                         "nvidia.com/cuda.driver-version.minor=1\n"
                         "nvidia.com/cuda.driver-version.revision=\n"
                         "nvidia.com/cuda.driver.major=550\n"
                         "nvidia.com/cuda.driver.minor=1\n"
                         "nvidia.com/cuda.driver.rev=\n"
                         "nvidia.com/gpu.compute.major=12\n"
                         "nvidia.com/gpu.compute.minor=0\n"
                         "nvidia.com/gpu.count=1\n"
                         "nvidia.com/gpu.family=blackwell\n"
                         "nvidia.com/gpu.mode=graphics\n"
                         "nvidia.com/gpu.product=Weird-GPU-namex\n"
                         "nvidia.com/gpu.replicas=1\n"
                         "nvidia.com/gpu.sharing-strategy=none\n"
                         "nvidia.com/mig.capable=false\n"
                         "nvidia.com/mps.capable=false\n");

        /* A driver version with four components gives no driver labels; no GPU, no labels. */
        g.driver_version = "1.2.3.4";
        free(got);
        got = build(&g, 1, NULL);
        ck_assert_ptr_null(strstr(got, "cuda.driver"));
        ck_assert_int_eq(labels_nvidia_build(NULL, 0, NULL, &l), 0);
        ck_assert_ptr_null(l[0]);
        ck_assert_int_eq(labels_nvidia_build(NULL, 1, NULL, &l), -EINVAL);

        ck_assert_str_eq(labels_nvidia_family(3, 5), "kepler");
        ck_assert_str_eq(labels_nvidia_family(5, 2), "maxwell");
        ck_assert_str_eq(labels_nvidia_family(6, 0), "pascal");
        ck_assert_str_eq(labels_nvidia_family(7, 0), "volta");
        ck_assert_str_eq(labels_nvidia_family(7, 2), "volta");
        ck_assert_str_eq(labels_nvidia_family(7, 5), "turing");
        ck_assert_str_eq(labels_nvidia_family(8, 6), "ampere");
        ck_assert_str_eq(labels_nvidia_family(8, 7), "ampere");
        ck_assert_str_eq(labels_nvidia_family(8, 9), "ada-lovelace");
        ck_assert_str_eq(labels_nvidia_family(10, 0), "blackwell");
        ck_assert_str_eq(labels_nvidia_family(11, 0), "undefined");
}
END_TEST

static Suite *labels_nvidia_suite(void) {
        Suite *s = suite_create("labels-nvidia");
        TCase *tc = tcase_create("labels");

        tcase_add_test(tc, test_h100);
        tcase_add_test(tc, test_l40s_two);
        tcase_add_test(tc, test_l40s_shared);
        tcase_add_test(tc, test_a100_mig_mixed);
        tcase_add_test(tc, test_a100_mig_single);
        tcase_add_test(tc, test_mps_capable_mig);
        tcase_add_test(tc, test_edge_values);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(labels_nvidia_suite)
