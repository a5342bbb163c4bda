/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-intel-probe.c — Intel discovery (SR-IOV, tiles, memory, NUMA, by-path links), node
 * labels (daemons/probe/labels-intel.c) and the generated files (daemons/probe/outputs.c,
 * manager_write_outputs()) against in-process umockdev testbeds of the layouts in
 * tests/data/testbeds/: eight-gpus, sriov, many-vfs, two-gpus, integrated. Every expected
 * value is written out here. Needs LD_PRELOAD=libumockdev-preload.so.0 (set by meson).
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemons/probe/cdi-intel.h"
#include "daemons/probe/labels-intel.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/outputs.h"
#include "daemons/probe/source-intel.h"
#include "daemons/probe/udev-scan.h"

#include "tests/unit/probe/probe-testbed.h"
#include "tests/unit/test-main.h"

#define GIB (UINT64_C(1) << 30)

/* Compares a label list with the expected lines; prints both on mismatch. */
static void check_labels(char **got, const char * const *want) {
        size_t n = 0;
        bool ok;

        while (want[n])
                n++;
        ok = strv_length(got) == n;
        for (size_t i = 0; ok && i < n; i++)
                ok = streq(got[i], want[i]);
        if (!ok) {
                for (size_t i = 0; got && got[i]; i++)
                        fprintf(stderr, "got:  %s\n", got[i]);
                for (size_t i = 0; i < n; i++)
                        fprintf(stderr, "want: %s\n", want[i]);
        }
        ck_assert_msg(ok, "labels differ");
}

/* The labels of gpus and of the PCI functions of the loaded testbed, as the probe makes them. */
static char **build_labels(Gpu **gpus, unsigned level) {
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_free_ LabelsIntelPci *pci = NULL;
        char **l = NULL;
        int n;

        ck_assert_ptr_nonnull(udev);
        n = udev_scan_pci_display_functions(udev, &pci);
        ck_assert_int_ge(n, 0);
        ck_assert_int_eq(labels_intel_build(gpus, strv_length((char **) gpus), pci, (size_t) n, level, &l), 0);
        return l;
}

/* --- splitting ---------------------------------------------------------------- */

START_TEST(test_split) {
        _cleanup_strv_free_ char **a = NULL, **b = NULL, **c = NULL, **d = NULL;
        char v63[64], v64[65];

        memset(v63, '1', 63);
        v63[63] = 0;
        ck_assert_int_eq(labels_intel_split(v63, 63, "Z", &a), 0);
        ck_assert_uint_eq(strv_length(a), 1);
        ck_assert_str_eq(a[0], v63);

        /* 64 characters: cut after the 63rd (alphanumeric), rest "Z" + 1. */
        memset(v64, '1', 64);
        v64[64] = 0;
        ck_assert_int_eq(labels_intel_split(v64, 63, "Z", &b), 0);
        ck_assert_uint_eq(strv_length(b), 2);
        ck_assert_uint_eq(strlen(b[0]), 63);
        ck_assert_str_eq(b[1], "Z1");

        /* The cut goes just after the last alphanumeric character; the separator starts
         * the next chunk. */
        ck_assert_int_eq(labels_intel_split("ab.cd.ef", 4, "Z", &c), 0);
        ck_assert_uint_eq(strv_length(c), 3);
        ck_assert_str_eq(c[0], "ab.c");
        ck_assert_str_eq(c[1], "Zd.e");
        ck_assert_str_eq(c[2], "Zf");

        /* No alphanumeric character in a chunk, or no room for the prefix: refused. */
        ck_assert_int_eq(labels_intel_split("a....", 3, "Z", &d), -EINVAL);
        ck_assert_int_eq(labels_intel_split("abc", 1, "Z", &d), -EINVAL);
        ck_assert_ptr_null(d);
}
END_TEST

/* Random values of digits and separators: every chunk fits, chunks 2.. start with "Z",
 * and stripping the Zs gives the value back. */
START_TEST(test_split_random) {
        static const char alphabet[] = "0123456789._-ab";
        unsigned seed = 12345;

        for (unsigned round = 0; round < 5000; round++) {
                _cleanup_strv_free_ char **l = NULL;
                _cleanup_free_ char *joined = NULL;
                char v[400];
                size_t len, max = 2 + rand_r(&seed) % 70;
                int r;

                len = (size_t) rand_r(&seed) % (sizeof(v) - 1);
                for (size_t i = 0; i < len; i++)
                        v[i] = alphabet[rand_r(&seed) % (sizeof(alphabet) - 1)];
                v[len] = 0;
                r = labels_intel_split(v, max, "Z", &l);
                if (r < 0) {
                        ck_assert_int_eq(r, -EINVAL);      /* a chunk without alphanumerics */
                        ck_assert_ptr_null(l);
                        continue;
                }
                joined = strdup(l[0]);
                ck_assert_ptr_nonnull(joined);
                for (size_t i = 0; l[i]; i++) {
                        ck_assert_uint_le(strlen(l[i]), max);
                        if (i == 0)
                                continue;
                        ck_assert_int_eq(l[i][0], 'Z');
                        char *t = NULL;
                        ck_assert_int_ge(asprintf(&t, "%s%s", joined, l[i] + 1), 0);
                        free(joined);
                        joined = t;
                }
                ck_assert_str_eq(joined, v);
        }
}
END_TEST

START_TEST(test_parse) {
        uint64_t v = 7;
        uint32_t c = 0;
        unsigned l = 9;

        ck_assert_int_eq(gpu_parse_memory_env("4000000000", &v), 0);
        ck_assert_uint_eq(v, 4000000000);
        ck_assert_int_eq(gpu_parse_memory_env("-1", &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_memory_env("0x10", &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_memory_env("", &v), -EINVAL);
        ck_assert_int_eq(gpu_parse_memory_env("99999999999999999999", &v), -ERANGE);
        ck_assert_uint_eq(v, 4000000000);
        ck_assert_int_eq(gpu_parse_pci_class("0x038000", &c), 0);
        ck_assert_uint_eq(c, 0x038000);
        ck_assert_int_eq(gpu_parse_pci_class("0x1038000", &c), -EINVAL);
        ck_assert_int_eq(labels_intel_parse_pci_level("2", &l), 0);
        ck_assert_uint_eq(l, 2);
        ck_assert_int_eq(labels_intel_parse_pci_level("65", &l), -ERANGE);
        ck_assert_int_eq(labels_intel_parse_pci_level("x", &l), -EINVAL);
}
END_TEST

START_TEST(test_memory_policy) {
        _cleanup_(gpu_freep) Gpu *g = NULL;

        ck_assert_int_eq(gpu_new("0000:03:00.0", &g), 0);
        /* Read: minus reserved, never below 0; override ignored. */
        g->memory_known = true;
        g->memory_bytes = 1000;
        gpu_apply_memory_policy(g, 5000, 300);
        ck_assert_uint_eq(g->memory_bytes, 700);
        g->memory_bytes = 100;
        gpu_apply_memory_policy(g, 5000, 300);
        ck_assert_uint_eq(g->memory_bytes, 0);
        /* Unreadable: the override, reserved not subtracted. */
        g->memory_known = false;
        gpu_apply_memory_policy(g, 5000, 300);
        ck_assert_uint_eq(g->memory_bytes, 5000);
}
END_TEST

/* --- layouts -------------------------------------------------------------------- */

START_TEST(test_eight_gpus) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("eight-gpus");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;
        _cleanup_strv_free_ char **l0 = NULL, **l1 = NULL, **l2 = NULL;
        static const char * const ids[] = {
                "0000:18:00.0", "0000:28:00.0", "0000:38:00.0", "0000:48:00.0",
                "0000:98:00.0", "0000:a8:00.0", "0000:b8:00.0", "0000:c8:00.0",
        };
        static const char * const want[] = {
                "gpu.intel.com/cards=card0.card1.card2.card3.card4.card5.card6.card7",
                "gpu.intel.com/device-id.0380-0bd5.count=8",
                "gpu.intel.com/device-id.0380-0bd5.present=true",
                "gpu.intel.com/device.count=8",
                "gpu.intel.com/family=Max_Series",
                "gpu.intel.com/gpu-numbers=0.1.2.3.4.5.6.7",
                "gpu.intel.com/memory.max=1099511627776",
                "gpu.intel.com/millicores=8000",
                "gpu.intel.com/numa-gpu-map=0-0.1.2.3_1-4.5.6.7",
                "gpu.intel.com/product=Max_1550",
                "gpu.intel.com/tiles=16",
                NULL
        };

        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 8);
        for (size_t i = 0; i < 8; i++) {
                Gpu *g = gpus[i];
                char node[64], bp[64];

                ck_assert_str_eq(g->id, ids[i]);
                ck_assert_str_eq(g->driver, "i915");
                ck_assert_uint_eq(g->device_id, 0x0bd5);
                ck_assert_uint_eq(g->pci_class, 0x038000);
                ck_assert_uint_eq(g->tiles, 2);
                ck_assert_uint_eq(g->memory_bytes, 128 * GIB);
                ck_assert(g->memory_known);
                ck_assert_int_eq(g->numa_node, i < 4 ? 0 : 1);
                snprintf(node, sizeof(node), "/dev/dri/card%zu", i);
                ck_assert_str_eq(g->card_node, node);
                ck_assert_str_eq(g->physical_function, "");
                ck_assert_uint_eq(strv_length(g->by_path_nodes), 2);
                snprintf(bp, sizeof(bp), "/dev/dri/by-path/pci-%s-card", ids[i]);
                ck_assert_str_eq(g->by_path_nodes[0], bp);
                snprintf(bp, sizeof(bp), "/dev/dri/by-path/pci-%s-render", ids[i]);
                ck_assert_str_eq(g->by_path_nodes[1], bp);
        }

        l0 = build_labels(gpus, 0);
        check_labels(l0, want);

        /* GPU_PCI_GROUPING_LEVEL=1: by root complex; 2: every GPU alone. */
        l1 = build_labels(gpus, 1);
        ck_assert(strv_contains(l1, "gpu.intel.com/pci-groups=0.1.2.3_4.5.6.7"));
        ck_assert_uint_eq(strv_length(l1), strv_length(l0) + 1);
        l2 = build_labels(gpus, 2);
        ck_assert(strv_contains(l2, "gpu.intel.com/pci-groups=0_1_2_3_4_5_6_7"));
}
END_TEST

START_TEST(test_sriov) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("sriov");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;
        _cleanup_strv_free_ char **l = NULL;
        static const char * const want[] = {
                "gpu.intel.com/cards=card1.card2.card3.card4",
                /* NFD counts the PF and its 4 VFs. */
                "gpu.intel.com/device-id.0380-56c0.count=5",
                "gpu.intel.com/device-id.0380-56c0.present=true",
                "gpu.intel.com/device.count=5",
                "gpu.intel.com/family=Flex_Series",
                "gpu.intel.com/gpu-numbers=1.2.3.4",
                "gpu.intel.com/memory.max=17179869184",
                "gpu.intel.com/millicores=4000",
                "gpu.intel.com/numa-gpu-map=0-1.2.3.4",
                "gpu.intel.com/product=Flex_170",
                "gpu.intel.com/tiles=4",
                NULL
        };

        /* The PF 0000:4d:00.0 (sriov_numvfs=4) is left out; its 4 VFs are the GPUs. */
        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 4);
        for (size_t i = 0; i < 4; i++) {
                char id[32], node[32];

                snprintf(id, sizeof(id), "0000:4d:00.%zu", i + 1);
                snprintf(node, sizeof(node), "/dev/dri/renderD%zu", 129 + i);
                ck_assert_str_eq(gpus[i]->id, id);
                ck_assert_str_eq(gpus[i]->physical_function, "0000:4d:00.0");
                ck_assert_str_eq(gpus[i]->render_node, node);
                ck_assert_uint_eq(gpus[i]->memory_bytes, 4 * GIB);
                ck_assert_int_eq(gpus[i]->numa_node, 0);
        }
        l = build_labels(gpus, 0);
        check_labels(l, want);
}
END_TEST

START_TEST(test_sriov_disabled) {
        g_autoptr(UMockdevTestbed) tb = testbed_load("sriov");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;

        /* With VFs disabled the PF is an ordinary GPU again. */
        umockdev_testbed_set_attribute(tb, "/sys/devices/pci0000:4d/0000:4d:00.0", "sriov_numvfs", "0\n");
        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 5);
        ck_assert_str_eq(gpus[0]->id, "0000:4d:00.0");
        ck_assert_str_eq(gpus[0]->physical_function, "");
        ck_assert_uint_eq(gpus[0]->memory_bytes, 16 * GIB);
}
END_TEST

START_TEST(test_many_vfs_split) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("many-vfs");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;
        _cleanup_strv_free_ char **l = NULL;
        /* Cards in /sys/class/drm name order ("card10" < "card2"), as the Intel labeler
         * reads them; every chunk at most 63 characters. */
        static const char * const want[] = {
                "gpu.intel.com/cards=card1.card10.card11.card12.card13.card14.card15.card16.card18.c",
                "gpu.intel.com/device-id.0380-56c0.count=34",     /* 2 PFs + 32 VFs */
                "gpu.intel.com/device-id.0380-56c0.present=true",
                "gpu.intel.com/device.count=34",
                "gpu.intel.com/family=Flex_Series",
                "gpu.intel.com/gpu-numbers2=Z.30.31.32.33.4.5.6.7.8.9",
                "gpu.intel.com/gpu-numbers=1.10.11.12.13.14.15.16.18.19.2.20.21.22.23.24.25.26.27.28.29.3",
                "gpu.intel.com/memory.max=137438953472",
                "gpu.intel.com/millicores=32000",
                "gpu.intel.com/numa-gpu-map2=Z.25.26.27.28.29.30.31.32.33",
                "gpu.intel.com/numa-gpu-map=0-1.10.11.12.13.14.15.16.2.3.4.5.6.7.8.9_1-18.19.20.21.22.23.24",
                "gpu.intel.com/product=Flex_170",
                "gpu.intel.com/tiles=32",
                NULL
        };

        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 32);
        ck_assert_str_eq(gpus[0]->id, "0000:4d:00.1");
        ck_assert_str_eq(gpus[15]->id, "0000:4d:02.0");
        ck_assert_str_eq(gpus[15]->physical_function, "0000:4d:00.0");
        ck_assert_str_eq(gpus[16]->id, "0000:ca:00.1");
        ck_assert_str_eq(gpus[16]->physical_function, "0000:ca:00.0");
        ck_assert_int_eq(gpus[16]->numa_node, 1);
        l = build_labels(gpus, 0);
        check_labels(l, want);
        for (size_t i = 0; l[i]; i++)
                ck_assert_uint_le(strlen(strchr(l[i], '=') + 1), 63);
}
END_TEST

START_TEST(test_two_gpus_i915_xe) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("two-gpus");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;
        _cleanup_strv_free_ char **l = NULL;
        static const char * const want[] = {
                "gpu.intel.com/cards=card0.card1",
                /* One count per class, named after the first function, as NFD's rule. */
                "gpu.intel.com/device-id.0300-56a0.count=2",
                "gpu.intel.com/device-id.0300-56a0.present=true",
                "gpu.intel.com/device-id.0300-e20b.present=true",
                "gpu.intel.com/family=A_Series",
                "gpu.intel.com/gpu-numbers=0.1",
                "gpu.intel.com/memory.max=30064771072",
                "gpu.intel.com/millicores=2000",
                "gpu.intel.com/numa-gpu-map=0-0.1",
                "gpu.intel.com/tiles=2",
                NULL
        };

        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 2);
        ck_assert_str_eq(gpus[1]->driver, "xe");
        ck_assert_uint_eq(gpus[1]->memory_bytes, 12 * GIB);     /* tile0/physical_vram_size_bytes */
        ck_assert(gpus[1]->memory_known);
        l = build_labels(gpus, 0);
        check_labels(l, want);
}
END_TEST

START_TEST(test_integrated) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("integrated");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;
        _cleanup_strv_free_ char **l = NULL, **lo = NULL;
        static const char * const want[] = {
                "gpu.intel.com/cards=card0",
                "gpu.intel.com/device-id.0300-46a6.count=1",
                "gpu.intel.com/device-id.0300-46a6.present=true",
                "gpu.intel.com/gpu-numbers=0",
                "gpu.intel.com/memory.max=0",
                "gpu.intel.com/millicores=1000",
                "gpu.intel.com/tiles=1",
                NULL
        };

        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 1);
        ck_assert_str_eq(gpus[0]->id, "0000:00:02.0");
        ck_assert_int_eq(gpus[0]->numa_node, -1);
        ck_assert(!gpus[0]->memory_known);
        l = build_labels(gpus, 0);
        check_labels(l, want);      /* no numa-gpu-map: no GPU has a node */

        /* GPU_MEMORY_OVERRIDE applies to the GPU whose memory could not be read. */
        gpu_apply_memory_policy(gpus[0], 4000000000, 1000);
        ck_assert_uint_eq(gpus[0]->memory_bytes, 4000000000);
        lo = build_labels(gpus, 0);
        ck_assert(strv_contains(lo, "gpu.intel.com/memory.max=4000000000"));
}
END_TEST

START_TEST(test_no_gpus) {
        _cleanup_strv_free_ char **l = NULL;
        Gpu *none[] = { NULL };

        /* No Intel GPU, no gpu.intel.com/ label (not even tiles=0). */
        ck_assert_int_eq(labels_intel_build(none, 0, NULL, 0, 0, &l), 0);
        ck_assert_uint_eq(strv_length(l), 0);
}
END_TEST

/* --- generated files through the manager --------------------------------------- */

static char *slurp(const char *path) {
        char *s = NULL;
        gsize n;

        if (!g_file_get_contents(path, &s, &n, NULL))
                return NULL;
        return s;
}

static const char sriov_cdi[] =
        "{\n"
        "  \"cdiVersion\": \"0.5.0\",\n"
        "  \"kind\": \"gpu.intel.com/gpu\",\n"
        "  \"devices\": [\n"
        "    {\n"
        "      \"name\": \"0000:4d:00.1\",\n"
        "      \"containerEdits\": {\n"
        "        \"deviceNodes\": [\n"
        "          { \"path\": \"/dev/dri/card1\", \"type\": \"c\" },\n"
        "          { \"path\": \"/dev/dri/renderD129\", \"type\": \"c\" }\n"
        "        ]\n"
        "      }\n"
        "    },\n"
        "    {\n"
        "      \"name\": \"0000:4d:00.3\",\n"
        "      \"containerEdits\": {\n"
        "        \"deviceNodes\": [\n"
        "          { \"path\": \"/dev/dri/card3\", \"type\": \"c\" },\n"
        "          { \"path\": \"/dev/dri/renderD131\", \"type\": \"c\" }\n"
        "        ]\n"
        "      }\n"
        "    },\n"
        "    {\n"
        "      \"name\": \"0000:4d:00.4\",\n"
        "      \"containerEdits\": {\n"
        "        \"deviceNodes\": [\n"
        "          { \"path\": \"/dev/dri/card4\", \"type\": \"c\" },\n"
        "          { \"path\": \"/dev/dri/renderD132\", \"type\": \"c\" }\n"
        "        ]\n"
        "      }\n"
        "    }\n"
        "  ]\n"
        "}\n";

/* test_manager_outputs_vf_removed, step by step, on one manager over the "sriov"
 * testbed: dir is the temporary root, ff the feature file, cdi the CDI spec directory. */

/* Not publishing yet (no bus name): nothing is written, not even the directory. */
static void step_nothing_written_before_publishing(Manager *m, const char *dir, const char *cdi) {
        ck_assert_int_eq(manager_write_outputs(m), 0);
        {
                g_autofree char *fd_dir = g_strdup_printf("%s/features.d", dir);

                ck_assert_int_eq(access(fd_dir, F_OK), -1);
                ck_assert_int_eq(access(cdi, F_OK), -1);
        }
}

/* Publishing: the labels of the four functions. Returns the feature file's text. */
static char *step_first_outputs(Manager *m, const char *ff) {
        g_autofree char *labels = NULL;

        m->publishing = true;   /* as manager_start() does once the name is ours */
        ck_assert_int_eq(manager_write_outputs(m), 0);

        labels = slurp(ff);
        ck_assert_ptr_nonnull(labels);
        ck_assert_str_eq(labels,
                "gpu.intel.com/cards=card1.card2.card3.card4\n"
                "gpu.intel.com/device-id.0380-56c0.count=5\n"
                "gpu.intel.com/device-id.0380-56c0.present=true\n"
                "gpu.intel.com/device.count=5\n"
                "gpu.intel.com/family=Flex_Series\n"
                "gpu.intel.com/gpu-numbers=1.2.3.4\n"
                "gpu.intel.com/memory.max=12884901888\n"
                "gpu.intel.com/millicores=4000\n"
                "gpu.intel.com/numa-gpu-map=0-1.2.3.4\n"
                "gpu.intel.com/product=Flex_170\n"
                "gpu.intel.com/tiles=4\n");
        return g_steal_pointer(&labels);
}

/* A VF's DRM node goes away: the VF turns Unhealthy and leaves labels and CDI.
 * Returns the VF. */
static Gpu *step_vf_removed(Manager *m, const char *ff, const char *cdi) {
        g_autofree char *spec = NULL, *labels2 = NULL;
        Gpu *vf2;

        vf2 = manager_find_gpu(m, "0000:4d:00.2");
        ck_assert_ptr_nonnull(vf2);
        ck_assert_int_eq(manager_mark_removed(m, vf2->render_syspath), 1);
        ck_assert_str_eq(vf2->health, GPU_UNHEALTHY);
        ck_assert_str_eq(vf2->health_reason, "removed");
        ck_assert_int_eq(manager_write_outputs(m), 0);
        labels2 = slurp(ff);
        ck_assert_ptr_nonnull(strstr(labels2, "gpu.intel.com/gpu-numbers=1.3.4\n"));
        ck_assert_ptr_nonnull(strstr(labels2, "gpu.intel.com/millicores=3000\n"));
        /* NFD's counts are of PCI functions: a DRM node going away changes none. */
        ck_assert_ptr_nonnull(strstr(labels2, "gpu.intel.com/device-id.0380-56c0.count=5\n"));
        ck_assert_ptr_nonnull(strstr(labels2, "gpu.intel.com/device.count=5\n"));
        {
                g_autofree char *spec_path = g_strdup_printf("%s/" OUTPUTS_CDI_FILE, cdi);

                spec = slurp(spec_path);
        }
        ck_assert_ptr_nonnull(spec);
        ck_assert_str_eq(spec, sriov_cdi);
        return vf2;
}

/* Back (rescan finds it): healthy again, labels restored. */
static void step_vf_back(Manager *m, Gpu *vf2, const char *ff, const char *labels) {
        g_autofree char *labels3 = NULL;

        ck_assert_int_eq(manager_rescan(m), 0);
        ck_assert_str_eq(vf2->health, GPU_HEALTHY);
        ck_assert_int_eq(manager_write_outputs(m), 0);
        labels3 = slurp(ff);
        ck_assert_str_eq(labels3, labels);
}

/* Every GPU gone (their DRM nodes, the PCI functions stay): only the labels of NFD's
 * rules are left, and no CDI spec (CDI wants devices). */
static void step_every_gpu_gone_and_back(Manager *m, const char *ff, const char *cdi, const char *labels) {
        g_autofree char *labels4 = NULL, *left = NULL;

        for (size_t i = 0; i < m->n_gpus; i++)
                ck_assert_int_eq(manager_mark_removed(m, m->gpus[i]->card_syspath), 1);
        ck_assert_int_eq(manager_write_outputs(m), 0);
        {
                g_autofree char *spec_path = g_strdup_printf("%s/" OUTPUTS_CDI_FILE, cdi);

                left = slurp(ff);
                ck_assert_ptr_nonnull(left);
                ck_assert_str_eq(left,
                        "gpu.intel.com/device-id.0380-56c0.count=5\n"
                        "gpu.intel.com/device-id.0380-56c0.present=true\n"
                        "gpu.intel.com/device.count=5\n"
                        "gpu.intel.com/family=Flex_Series\n"
                        "gpu.intel.com/product=Flex_170\n");
                ck_assert_int_eq(access(spec_path, F_OK), -1);
        }
        ck_assert_int_eq(manager_rescan(m), 0);
        ck_assert_int_eq(manager_write_outputs(m), 0);
        labels4 = slurp(ff);
        ck_assert_ptr_nonnull(labels4);
        ck_assert_str_eq(labels4, labels);      /* and back with the GPUs */
}

/* No temp files left next to the outputs. */
static void step_no_temp_files_left(const char *dir, const char *cdi) {
        g_autofree char *cmd = g_strdup_printf("test -z \"$(ls -A %s/features.d | grep -v '^kgpu$')\" && "
                                               "test -z \"$(ls -A %s | grep -v '^" OUTPUTS_CDI_FILE "$')\"",
                                               dir, cdi);
        ck_assert_int_eq(system(cmd), 0);
        g_autofree char *rm = g_strdup_printf("rm -rf %s", dir);
        ck_assert_int_eq(system(rm), 0);
}

START_TEST(test_manager_outputs_vf_removed) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("sriov");
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL;
        char dir[] = "/tmp/kgpu-test-outputs-XXXXXX";
        g_autofree char *ff = NULL, *cdi = NULL, *labels = NULL;
        const char *key = NULL;
        Gpu *vf2;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        ff = g_strdup_printf("%s/features.d/kgpu", dir);        /* directory created on demand */
        cdi = g_strdup_printf("%s/cdi", dir);
        setenv("KGPU_LABELS_FEATURE_FILE", ff, 1);
        setenv("KGPU_CDI_SPEC_DIRECTORY", cdi, 1);
        setenv("GPU_MEMORY_RESERVED", "1073741824", 1);
        ck_assert_int_eq(config_load_string("", 0, "test", NULL, 0, &c, &err), 0);
        unsetenv("GPU_MEMORY_RESERVED");

        ck_assert_int_eq(manager_new(&m), 0);
        ck_assert_int_eq(manager_configure(m, c, &key), 0);
        m->udev = udev_new();
        ck_assert_ptr_nonnull(m->udev);
        ck_assert_int_eq(manager_rescan(m), 0);
        ck_assert_uint_eq(m->n_gpus, 4);
        ck_assert_uint_eq(m->gpus[0]->memory_bytes, 3 * GIB);   /* 4 GiB - reserved */

        step_nothing_written_before_publishing(m, dir, cdi);
        labels = step_first_outputs(m, ff);
        vf2 = step_vf_removed(m, ff, cdi);
        step_vf_back(m, vf2, ff, labels);
        step_every_gpu_gone_and_back(m, ff, cdi, labels);
        step_no_temp_files_left(dir, cdi);
        unsetenv("KGPU_LABELS_FEATURE_FILE");
        unsetenv("KGPU_CDI_SPEC_DIRECTORY");
}
END_TEST

START_TEST(test_manager_pf_vfs_toggled) {
        g_autoptr(UMockdevTestbed) tb = testbed_load("sriov");
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_strv_free_ char **l = NULL;
        const char *pf_sys = "/sys/devices/pci0000:4d/0000:4d:00.0";
        Gpu *pf;

        /* VFs disabled at start: the PF is a GPU. */
        umockdev_testbed_set_attribute(tb, pf_sys, "sriov_numvfs", "0\n");
        ck_assert_int_eq(manager_new(&m), 0);
        m->udev = udev_new();
        ck_assert_int_eq(manager_rescan(m), 0);
        ck_assert_uint_eq(m->n_gpus, 5);
        pf = manager_find_gpu(m, "0000:4d:00.0");
        ck_assert_ptr_nonnull(pf);
        ck_assert_str_eq(pf->health, GPU_HEALTHY);

        /* VFs enabled while it is served: Unhealthy, out of the labels. */
        umockdev_testbed_set_attribute(tb, pf_sys, "sriov_numvfs", "4\n");
        ck_assert_int_eq(manager_recheck_pf(m, "0000:4d:00.0"), 1);
        ck_assert_str_eq(pf->health, GPU_UNHEALTHY);
        ck_assert_str_eq(pf->health_reason, GPU_REASON_SRIOV_PF);
        ck_assert_int_eq(manager_recheck_pf(m, "0000:4d:00.0"), 0);
        ck_assert_int_eq(labels_intel_build(m->gpus, m->n_gpus, NULL, 0, 0, &l), 0);
        ck_assert(strv_contains(l, "gpu.intel.com/gpu-numbers=1.2.3.4"));

        /* Disabled again: healthy again. */
        umockdev_testbed_set_attribute(tb, pf_sys, "sriov_numvfs", "0\n");
        ck_assert_int_eq(manager_recheck_pf(m, "0000:4d:00.0"), 0);
        ck_assert_str_eq(pf->health, GPU_HEALTHY);
        ck_assert_int_eq(manager_recheck_pf(m, "bogus"), 0);
}
END_TEST

START_TEST(test_config_keys) {
        _cleanup_(config_freep) Config *c = NULL, *d = NULL;
        _cleanup_free_ char *err = NULL, *err2 = NULL;
        static const char yaml[] =
                "labels:\n  featureFile: /run/nfd/kgpu\n"
                "cdi:\n  specDirectory: /run/cdi2\n"
                "intel:\n  memoryReserved: \"1000\"\n  pciGroupingLevel: 2\n";

        unsetenv("KGPU_LABELS_FEATURE_FILE");
        unsetenv("KGPU_CDI_SPEC_DIRECTORY");
        ck_assert_int_eq(config_load_string(yaml, strlen(yaml), "kgpu.yaml", NULL, 0, &c, &err), 0);
        ck_assert_str_eq(c->labels_feature_file, "/run/nfd/kgpu");
        ck_assert_str_eq(c->cdi_spec_directory, "/run/cdi2");
        ck_assert_str_eq(c->intel_memory_reserved, "1000");
        ck_assert_uint_eq(c->intel_pci_grouping_level, 2);
        /* Defaults. */
        ck_assert_int_eq(config_load_string("", 0, "kgpu.yaml", NULL, 0, &d, &err2), 0);
        ck_assert_str_eq(d->labels_feature_file, OUTPUTS_FEATURE_FILE_DEFAULT);
        ck_assert_str_eq(d->cdi_spec_directory, OUTPUTS_CDI_DIRECTORY_DEFAULT);
        ck_assert_uint_eq(d->intel_pci_grouping_level, 0);
}
END_TEST

START_TEST(test_configure_invalid) {
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL;
        const char *key = NULL;

        setenv("GPU_MEMORY_OVERRIDE", "12GB", 1);
        ck_assert_int_eq(config_load_string("", 0, "test", NULL, 0, &c, &err), 0);
        unsetenv("GPU_MEMORY_OVERRIDE");
        ck_assert_int_eq(manager_new(&m), 0);
        ck_assert_int_eq(manager_configure(m, c, &key), -EINVAL);
        ck_assert_str_eq(key, "intel.memoryOverride (GPU_MEMORY_OVERRIDE): expected a byte count");
}
END_TEST

START_TEST(test_write_atomic_errors) {
        ck_assert_int_eq(outputs_write_atomic("relative/path", "x", 1), -EINVAL);
        ck_assert_int_eq(outputs_write_atomic("/tmp/", "x", 1), -EINVAL);
        ck_assert_int_lt(outputs_write_atomic("/proc/kgpu-no/such", "x", 1), 0);
        ck_assert(outputs_cdi_name_is_valid("0000:03:00.0"));
        ck_assert(!outputs_cdi_name_is_valid("a/b"));
        ck_assert(!outputs_cdi_name_is_valid(""));
}
END_TEST

/* --- removal: only kgpu's own files ---------------------------------------------- */

static void write_text(const char *path, const char *text) {
        ck_assert(g_file_set_contents(path, text, -1, NULL));
}

START_TEST(test_feature_text_is_ours) {
        static const char * const ours[] = {
                "gpu.intel.com/tiles=2\n",
                "gpu.intel.com/cards=card0\ngpu.intel.com/tiles=1\nnvidia.com/gpu.count=1\n",
                "nvidia.com/mig.capable=true\n",
        };
        static const char * const foreign[] = {
                "",
                "\n",
                "gpu.intel.com/tiles=2",                        /* no final newline */
                "gpu.intel.com/tiles=2\n\n",                    /* empty line */
                "gpu.intel.com/tiles=2\nfeature.node.kubernetes.io/x=1\n",
                "gpu.intel.com/=2\n",                           /* prefix, no name */
                "gpu.intel.com/tiles\n",                        /* no value */
                "# gpu.intel.com/tiles=2\n",
                "example.com/gpu.intel.com/tiles=2\n",
        };

        for (size_t i = 0; i < ELEMENTSOF(ours); i++)
                ck_assert_msg(outputs_feature_text_is_ours(ours[i], strlen(ours[i])), "%s", ours[i]);
        for (size_t i = 0; i < ELEMENTSOF(foreign); i++)
                ck_assert_msg(!outputs_feature_text_is_ours(foreign[i], strlen(foreign[i])), "%s", foreign[i]);
        ck_assert(!outputs_feature_text_is_ours("gpu.intel.com/a=\0b\n", 19));
        ck_assert(!outputs_feature_text_is_ours(NULL, 0));
}
END_TEST

START_TEST(test_remove_outputs) {
        char dir[] = "/tmp/kgpu-test-remove-XXXXXX";
        g_autofree char *ff = NULL, *other = NULL, *link = NULL, *cdi = NULL, *a = NULL, *b = NULL, *c = NULL;
        g_autofree char *rm = NULL;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        ff = g_strdup_printf("%s/kgpu", dir);
        other = g_strdup_printf("%s/other", dir);
        link = g_strdup_printf("%s/link", dir);
        cdi = g_strdup_printf("%s/cdi", dir);
        a = g_strdup_printf("%s/" OUTPUTS_CDI_FILE, cdi);
        b = g_strdup_printf("%s/kgpu-nvidia.yaml", cdi);
        c = g_strdup_printf("%s/vendor.yaml", cdi);

        /* Nothing there: nothing to do. */
        ck_assert_int_eq(outputs_remove_feature_file(ff), 0);
        ck_assert_int_eq(outputs_remove_feature_file("/nonexistent-kgpu-dir/kgpu"), 0);
        ck_assert_int_eq(outputs_remove_cdi_specs(cdi), 0);
        ck_assert_int_eq(outputs_remove_feature_file("kgpu"), -EINVAL);
        ck_assert_int_eq(outputs_remove_cdi_specs("cdi"), -EINVAL);

        /* kgpu's labels go. */
        write_text(ff, "gpu.intel.com/tiles=1\nnvidia.com/gpu.count=1\n");
        ck_assert_int_eq(outputs_remove_feature_file(ff), 1);
        ck_assert_int_eq(access(ff, F_OK), -1);

        /* Another labeler's file at that path stays. */
        write_text(ff, "gpu.intel.com/tiles=1\nfeature.node.kubernetes.io/x=1\n");
        ck_assert_int_eq(outputs_remove_feature_file(ff), -EEXIST);
        ck_assert_int_eq(access(ff, F_OK), 0);
        ck_assert_int_eq(unlink(ff), 0);

        /* A symlink is not followed, and its target stays. */
        write_text(other, "gpu.intel.com/tiles=1\n");
        ck_assert_int_eq(symlink(other, link), 0);
        ck_assert_int_eq(outputs_remove_feature_file(link), -ELOOP);
        ck_assert_int_eq(access(other, F_OK), 0);

        /* CDI: kgpu's two specs by name, nothing else. */
        ck_assert_int_eq(mkdir(cdi, 0755), 0);
        write_text(a, "{}\n");
        write_text(b, "x\n");
        write_text(c, "x\n");
        ck_assert_int_eq(outputs_remove_cdi_specs(cdi), 2);
        ck_assert_int_eq(access(a, F_OK), -1);
        ck_assert_int_eq(access(b, F_OK), -1);
        ck_assert_int_eq(access(c, F_OK), 0);
        ck_assert_int_eq(outputs_remove_cdi_specs(cdi), 0);

        rm = g_strdup_printf("rm -rf %s", dir);
        ck_assert_int_eq(system(rm), 0);
}
END_TEST

/* A reload that moves the files takes kgpu's files away from the old place. */
START_TEST(test_configure_moves_outputs) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("two-gpus");
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_(config_freep) Config *c1 = NULL, *c2 = NULL, *c3 = NULL;
        _cleanup_free_ char *err = NULL;
        char dir[] = "/tmp/kgpu-test-move-XXXXXX";
        g_autofree char *y1 = NULL, *y2 = NULL, *ff1 = NULL, *ff2 = NULL, *spec1 = NULL, *spec2 = NULL;
        g_autofree char *rm = NULL;
        static const char off[] = "labels:\n  featureFile: \"\"\ncdi:\n  specDirectory: \"\"\n";
        const char *key = NULL;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        ff1 = g_strdup_printf("%s/a/kgpu", dir);
        ff2 = g_strdup_printf("%s/b/kgpu", dir);
        spec1 = g_strdup_printf("%s/cdi-a/" OUTPUTS_CDI_FILE, dir);
        spec2 = g_strdup_printf("%s/cdi-b/" OUTPUTS_CDI_FILE, dir);
        y1 = g_strdup_printf("labels:\n  featureFile: %s/a/kgpu\ncdi:\n  specDirectory: %s/cdi-a\n", dir, dir);
        y2 = g_strdup_printf("labels:\n  featureFile: %s/b/kgpu\ncdi:\n  specDirectory: %s/cdi-b\n", dir, dir);
        unsetenv("KGPU_LABELS_FEATURE_FILE");
        unsetenv("KGPU_CDI_SPEC_DIRECTORY");
        ck_assert_int_eq(config_load_string(y1, strlen(y1), "kgpu.yaml", NULL, 0, &c1, &err), 0);
        ck_assert_int_eq(config_load_string(y2, strlen(y2), "kgpu.yaml", NULL, 0, &c2, &err), 0);
        ck_assert_int_eq(config_load_string(off, strlen(off), "kgpu.yaml", NULL, 0, &c3, &err), 0);
        ck_assert_ptr_null(c3->labels_feature_file);

        ck_assert_int_eq(manager_new(&m), 0);
        ck_assert_int_eq(manager_configure(m, c1, &key), 0);
        m->udev = udev_new();
        ck_assert_ptr_nonnull(m->udev);
        ck_assert_int_eq(manager_rescan(m), 0);
        m->publishing = true;
        ck_assert_int_eq(manager_write_outputs(m), 0);
        ck_assert_int_eq(access(ff1, F_OK), 0);
        ck_assert_int_eq(access(spec1, F_OK), 0);

        ck_assert_int_eq(manager_configure(m, c2, &key), 0);
        ck_assert_int_eq(access(ff1, F_OK), -1);
        ck_assert_int_eq(access(spec1, F_OK), -1);
        ck_assert_int_eq(manager_write_outputs(m), 0);
        ck_assert_int_eq(access(ff2, F_OK), 0);
        ck_assert_int_eq(access(spec2, F_OK), 0);

        /* Turned off (empty values): the files go, nothing is written any more. */
        ck_assert_int_eq(manager_configure(m, c3, &key), 0);
        ck_assert_int_eq(manager_write_outputs(m), 0);
        ck_assert_int_eq(access(ff2, F_OK), -1);
        ck_assert_int_eq(access(spec2, F_OK), -1);

        rm = g_strdup_printf("rm -rf %s", dir);
        ck_assert_int_eq(system(rm), 0);
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("intel-probe");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_split);
        tcase_add_test(tc, test_split_random);
        tcase_add_test(tc, test_parse);
        tcase_add_test(tc, test_memory_policy);
        tcase_add_test(tc, test_eight_gpus);
        tcase_add_test(tc, test_sriov);
        tcase_add_test(tc, test_sriov_disabled);
        tcase_add_test(tc, test_many_vfs_split);
        tcase_add_test(tc, test_two_gpus_i915_xe);
        tcase_add_test(tc, test_integrated);
        tcase_add_test(tc, test_no_gpus);
        tcase_add_test(tc, test_manager_outputs_vf_removed);
        tcase_add_test(tc, test_manager_pf_vfs_toggled);
        tcase_add_test(tc, test_config_keys);
        tcase_add_test(tc, test_configure_invalid);
        tcase_add_test(tc, test_write_atomic_errors);
        tcase_add_test(tc, test_feature_text_is_ours);
        tcase_add_test(tc, test_remove_outputs);
        tcase_add_test(tc, test_configure_moves_outputs);
        suite_add_tcase(s, tc);
        return s;
}

static int intel_probe_prepare(void) {
        if (!getenv("LD_PRELOAD") || !strstr(getenv("LD_PRELOAD"), "umockdev"))
                return 77;
        return 0;
}

KGPU_TEST_PREPARE(intel_probe_prepare)
KGPU_TEST_SUITE(suite)
