/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-intel-nfd.c — what the Intel source reads beyond the GPUs it serves, against
 * in-process umockdev testbeds (tests/data/testbeds/): the PCI functions Intel's NFD rules
 * count (a Flex 170 with 4 VFs reads 5, and keeps reading 5 when a VF's DRM nodes go
 * away), the GPUs' MEI nodes (/dev/mei<N>, for the monitoring resource), the line said
 * once per DRM card that is not an Intel GPU (layout bochs), and the warning for a
 * GPU_MEMORY_RESERVED above a GPU's memory. Needs LD_PRELOAD=libumockdev-preload.so.0
 * (set by meson).
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/labels-intel.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/udev-scan.h"

#include "tests/unit/probe/probe-testbed.h"
#include "tests/unit/test-main.h"

#define GIB (UINT64_C(1) << 30)

/* stderr (where the daemons' log goes outside the journal) into a file while capturing. */
typedef struct Capture {
        int saved;
        char path[64];
} Capture;

static void capture_begin(Capture *c) {
        int fd;

        unsetenv("JOURNAL_STREAM");
        log_set_max_level(LOG_INFO);
        snprintf(c->path, sizeof(c->path), "/tmp/kgpu-test-log-XXXXXX");
        fd = mkstemp(c->path);
        ck_assert_int_ge(fd, 0);
        fflush(stderr);
        c->saved = dup(STDERR_FILENO);
        ck_assert_int_ge(c->saved, 0);
        ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
        close(fd);
}

/* Ends the capture; returns what was logged (g_free()). */
static char *capture_end(Capture *c) {
        char *text = NULL;

        fflush(stderr);
        ck_assert_int_ge(dup2(c->saved, STDERR_FILENO), 0);
        close(c->saved);
        ck_assert(g_file_get_contents(c->path, &text, NULL, NULL));
        (void) unlink(c->path);
        fputs(text, stderr);    /* still visible in the test's log */
        return text;
}

static size_t count_of(const char *haystack, const char *needle) {
        size_t n = 0;

        for (const char *p = haystack; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        return n;
}

static char **labels_now(struct udev *udev, Gpu **gpus) {
        _cleanup_free_ LabelsIntelPci *pci = NULL;
        char **l = NULL;
        int n;

        n = udev_scan_pci_display_functions(udev, &pci);
        ck_assert_int_ge(n, 0);
        ck_assert_int_eq(labels_intel_build(gpus, strv_length((char **) gpus), pci, (size_t) n, 0, &l), 0);
        return l;
}

/* --- NFD's counts ------------------------------------------------------------------ */

START_TEST(test_pci_functions_sriov) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("sriov");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_free_ LabelsIntelPci *pci = NULL;

        /* The PF (left out as a GPU) and its 4 VFs: 5 functions, in address order. */
        ck_assert_int_eq(udev_scan_pci_display_functions(udev, &pci), 5);
        for (size_t i = 0; i < 5; i++) {
                char a[16];

                snprintf(a, sizeof(a), "0000:4d:00.%zu", i);
                ck_assert_str_eq(pci[i].address, a);
                ck_assert_uint_eq(pci[i].device_id, 0x56c0);
                ck_assert_uint_eq(pci[i].pci_class, 0x038000);
        }
}
END_TEST

START_TEST(test_flex170_vfs_count_five) {
        g_autoptr(UMockdevTestbed) tb = testbed_load("sriov");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL, **fewer = NULL;
        _cleanup_strv_free_ char **l = NULL, **l2 = NULL;

        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 4);
        l = labels_now(udev, gpus);
        ck_assert(strv_contains(l, "gpu.intel.com/device-id.0380-56c0.count=5"));
        ck_assert(strv_contains(l, "gpu.intel.com/device.count=5"));
        ck_assert(strv_contains(l, "gpu.intel.com/millicores=4000"));   /* the labeler's: served GPUs */

        /* A VF's DRM nodes go away: 3 GPUs served, still 5 PCI functions for NFD. */
        umockdev_testbed_remove_device(tb, "/sys/devices/pci0000:4d/0000:4d:00.2/drm/renderD130");
        umockdev_testbed_remove_device(tb, "/sys/devices/pci0000:4d/0000:4d:00.2/drm/card2");
        ck_assert_int_eq(udev_scan_enumerate(udev, &fewer), 3);
        l2 = labels_now(udev, fewer);
        ck_assert(strv_contains(l2, "gpu.intel.com/millicores=3000"));
        ck_assert(strv_contains(l2, "gpu.intel.com/device-id.0380-56c0.count=5"));
        ck_assert(strv_contains(l2, "gpu.intel.com/device.count=5"));
}
END_TEST

START_TEST(test_one_count_per_class) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("two-gpus");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;
        _cleanup_strv_free_ char **l = NULL;

        /* DG2 0x56a0 and BMG 0xe20b are both class 0300: NFD's count rule matches both and
         * names the label after the first; each id is "present". The audio function (0403)
         * and the chipset MEI (0780) are no display class. */
        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 2);
        l = labels_now(udev, gpus);
        ck_assert(strv_contains(l, "gpu.intel.com/device-id.0300-56a0.count=2"));
        ck_assert(strv_contains(l, "gpu.intel.com/device-id.0300-56a0.present=true"));
        ck_assert(strv_contains(l, "gpu.intel.com/device-id.0300-e20b.present=true"));
        for (size_t i = 0; l[i]; i++)
                ck_assert_msg(!startswith(l[i], "gpu.intel.com/device-id.0300-e20b.count"), "%s", l[i]);
}
END_TEST

/* --- MEI nodes ---------------------------------------------------------------------- */

START_TEST(test_mei_nodes) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("two-gpus");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;

        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 2);
        /* i915.mei-gsc.768/mei/mei0 and xe.mei-gscfi.1024/mei/mei1; the chipset's mei2 is
         * no GPU's. */
        ck_assert_uint_eq(strv_length(gpus[0]->mei_nodes), 1);
        ck_assert_str_eq(gpus[0]->mei_nodes[0], "/dev/mei0");
        ck_assert_uint_eq(strv_length(gpus[1]->mei_nodes), 1);
        ck_assert_str_eq(gpus[1]->mei_nodes[0], "/dev/mei1");
}
END_TEST

START_TEST(test_no_mei_nodes) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("integrated");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;

        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 1);
        ck_assert_ptr_nonnull(gpus[0]->mei_nodes);
        ck_assert_uint_eq(strv_length(gpus[0]->mei_nodes), 0);
}
END_TEST

/* --- cards of other vendors ------------------------------------------------------- */

#define BOCHS_LINE "card0 (0000:00:02.0, vendor 0x1234, driver bochs-drm): not an Intel GPU driven by i915 or xe, skipped."

START_TEST(test_skipped_card_described) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("bochs");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;
        _cleanup_strv_free_ char **skipped = NULL;

        ck_assert_int_eq(udev_scan_enumerate_full(udev, &gpus, &skipped), 0);
        /* One line per card node; the render node says nothing more. */
        ck_assert_uint_eq(strv_length(skipped), 1);
        ck_assert_str_eq(skipped[0], BOCHS_LINE);
}
END_TEST

START_TEST(test_intel_card_not_described) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("two-gpus");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;
        _cleanup_strv_free_ char **skipped = NULL;

        ck_assert_int_eq(udev_scan_enumerate_full(udev, &gpus, &skipped), 2);
        ck_assert_ptr_null(skipped);
}
END_TEST

START_TEST(test_skipped_card_said_once) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("bochs");
        _cleanup_(manager_freep) Manager *m = NULL;
        g_autofree char *text = NULL;
        Capture cap;

        ck_assert_int_eq(manager_new(&m), 0);
        m->udev = udev_new();
        ck_assert_ptr_nonnull(m->udev);
        capture_begin(&cap);
        ck_assert_int_eq(manager_rescan(m), 0);
        ck_assert_int_eq(manager_rescan(m), 0);
        text = capture_end(&cap);
        ck_assert_uint_eq(m->n_gpus, 0);
        /* At info (no level prefix), once for two rescans. */
        ck_assert_uint_eq(count_of(text, "]: " BOCHS_LINE "\n"), 1);
}
END_TEST

/* --- GPU_MEMORY_RESERVED above a GPU's memory ------------------------------------------ */

START_TEST(test_reserve_above_memory_warns) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("sriov");
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL;
        g_autofree char *text = NULL;
        const char *key = NULL;
        Capture cap;

        /* 8 GiB reserved, the VFs have 4 GiB each. */
        setenv("GPU_MEMORY_RESERVED", "8589934592", 1);
        ck_assert_int_eq(config_load_string("", 0, "test", NULL, 0, &c, &err), 0);
        unsetenv("GPU_MEMORY_RESERVED");
        ck_assert_int_eq(manager_new(&m), 0);
        ck_assert_int_eq(manager_configure(m, c, &key), 0);
        m->udev = udev_new();
        capture_begin(&cap);
        ck_assert_int_eq(manager_rescan(m), 0);
        ck_assert_int_eq(manager_rescan(m), 0);
        text = capture_end(&cap);

        ck_assert_uint_eq(m->n_gpus, 4);
        for (size_t i = 0; i < 4; i++) {
                g_autofree char *want = g_strdup_printf(
                        "<warning> GPU 0000:4d:00.%zu: GPU_MEMORY_RESERVED (intel.memoryReserved) 8589934592 bytes "
                        "is more than its memory of 4294967296 bytes", i + 1);

                ck_assert_uint_eq(m->gpus[i]->memory_bytes, 0);
                ck_assert_msg(count_of(text, want) == 1, "%s: %zu times in\n%s", want, count_of(text, want), text);
        }
}
END_TEST

START_TEST(test_reserve_below_memory_quiet) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("sriov");
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *err = NULL;
        g_autofree char *text = NULL;
        const char *key = NULL;
        Capture cap;

        setenv("GPU_MEMORY_RESERVED", "1073741824", 1);
        ck_assert_int_eq(config_load_string("", 0, "test", NULL, 0, &c, &err), 0);
        unsetenv("GPU_MEMORY_RESERVED");
        ck_assert_int_eq(manager_new(&m), 0);
        ck_assert_int_eq(manager_configure(m, c, &key), 0);
        m->udev = udev_new();
        capture_begin(&cap);
        ck_assert_int_eq(manager_rescan(m), 0);
        text = capture_end(&cap);
        ck_assert_uint_eq(m->gpus[0]->memory_bytes, 3 * GIB);
        ck_assert_ptr_null(strstr(text, "GPU_MEMORY_RESERVED"));
}
END_TEST

static Suite *intel_nfd_suite(void) {
        Suite *s = suite_create("intel-nfd");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_pci_functions_sriov);
        tcase_add_test(tc, test_flex170_vfs_count_five);
        tcase_add_test(tc, test_one_count_per_class);
        tcase_add_test(tc, test_mei_nodes);
        tcase_add_test(tc, test_no_mei_nodes);
        tcase_add_test(tc, test_skipped_card_described);
        tcase_add_test(tc, test_intel_card_not_described);
        tcase_add_test(tc, test_skipped_card_said_once);
        tcase_add_test(tc, test_reserve_above_memory_warns);
        tcase_add_test(tc, test_reserve_below_memory_quiet);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(intel_nfd_suite)
