/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-probe-scan.c — udev discovery and GPU grouping (daemons/probe/udev-scan.c) and the
 * manager's GPU table, against in-process umockdev testbeds built from
 * the layouts in tests/data/testbeds/. Needs LD_PRELOAD=libumockdev-preload.so.0 (set by
 * meson); skips (77) without it.
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/udev-scan.h"

/* After the project headers: glib redefines MIN/MAX with #undef first. */
#include "tests/unit/probe/probe-testbed.h"
#include "tests/unit/test-main.h"

START_TEST(test_enumerate_two_gpus) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("two-gpus");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;
        Gpu *g;

        ck_assert_ptr_nonnull(udev);
        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 2);

        g = gpus[0];
        ck_assert_str_eq(g->id, "0000:03:00.0");
        ck_assert_str_eq(g->pci_address, "0000:03:00.0");
        ck_assert_str_eq(g->vendor, "intel");
        ck_assert_str_eq(g->driver, "i915");
        ck_assert_uint_eq(g->vendor_id, 0x8086);
        ck_assert_uint_eq(g->device_id, 0x56a0);
        ck_assert_int_eq(g->numa_node, 0);
        ck_assert_str_eq(g->card_node, "/dev/dri/card0");
        ck_assert_str_eq(g->render_node, "/dev/dri/renderD128");
        ck_assert_uint_eq(strv_length(g->device_nodes), 2);
        ck_assert_str_eq(g->device_nodes[0], "/dev/dri/card0");
        ck_assert_str_eq(g->device_nodes[1], "/dev/dri/renderD128");
        ck_assert_uint_eq(g->tiles, 1);
        ck_assert_uint_eq(g->memory_bytes, UINT64_C(17179869184));
        ck_assert_str_eq(g->health, GPU_HEALTHY);
        ck_assert_str_eq(g->product, "");
        ck_assert_ptr_nonnull(strstr(g->card_syspath, "/0000:03:00.0/drm/card0"));

        g = gpus[1];
        ck_assert_str_eq(g->id, "0000:04:00.0");
        ck_assert_str_eq(g->driver, "xe");
        ck_assert_uint_eq(g->device_id, 0xe20b);
        ck_assert_str_eq(g->card_node, "/dev/dri/card1");
        ck_assert_str_eq(g->render_node, "/dev/dri/renderD129");
        ck_assert_uint_eq(g->tiles, 1);
        ck_assert_uint_eq(g->memory_bytes, UINT64_C(12884901888));     /* tile0/physical_vram_size_bytes */
        ck_assert_ptr_null(gpus[2]);
}
END_TEST

START_TEST(test_enumerate_garbage) {
        _unused_ g_autoptr(UMockdevTestbed) tb = testbed_load("garbage");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;
        Gpu *g;

        /* 0000:06:00.0 (not Intel) and 0000:07:00.0 (amdgpu) are left out. */
        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 2);

        g = gpus[0];
        ck_assert_str_eq(g->id, "0000:03:00.0");
        ck_assert_uint_eq(g->device_id, 0);            /* "zz" */
        ck_assert_int_eq(g->numa_node, -1);            /* "abc" */
        ck_assert_uint_eq(g->memory_bytes, 0);         /* 2^64 */
        ck_assert_uint_eq(g->tiles, 1);                /* gt0 only, not "gt"/"gtx" */
        ck_assert_str_eq(g->render_node, "");
        ck_assert_uint_eq(strv_length(g->device_nodes), 1);

        g = gpus[1];
        ck_assert_str_eq(g->id, "0000:05:00.0");
        ck_assert_str_eq(g->driver, "xe");
        ck_assert_uint_eq(g->device_id, 0);            /* "0x12345" */
        ck_assert_int_eq(g->numa_node, -1);            /* "-7" */
        ck_assert_uint_eq(g->memory_bytes, 0);         /* "-5" */
        ck_assert_uint_eq(g->tiles, 3);                /* tile0..tile2 */
}
END_TEST

START_TEST(test_lmem_times_tiles) {
        g_autoptr(UMockdevTestbed) tb = testbed_load("two-gpus");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;
        const char *card = "/sys/devices/pci0000:00/0000:03:00.0/drm/card0";

        /* A second gt doubles the memory: lmem_total_bytes is per tile. */
        umockdev_testbed_set_attribute(tb, card, "gt/gt1/id", "1");
        umockdev_testbed_set_attribute(tb, card, "lmem_total_bytes", "1000\n");
        umockdev_testbed_set_attribute(tb, "/sys/devices/pci0000:00/0000:03:00.0", "numa_node", "1\n");
        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 2);
        ck_assert_uint_eq(gpus[0]->tiles, 2);
        ck_assert_uint_eq(gpus[0]->memory_bytes, 2000);
        ck_assert_int_eq(gpus[0]->numa_node, 1);
}
END_TEST

START_TEST(test_hostile_attributes) {
        g_autoptr(UMockdevTestbed) tb = testbed_load("two-gpus");
        _cleanup_(udev_unrefp) struct udev *udev = udev_new();
        _cleanup_(gpus_freep) Gpu **gpus = NULL;
        const char *pci3 = "/sys/devices/pci0000:00/0000:03:00.0";
        const char *pci4 = "/sys/devices/pci0000:00/0000:04:00.0";
        guint8 nul_vendor[] = { '0', 'x', '8', '0', 0, '8', '6' };
        g_autofree char *huge = g_malloc(100001);

        /* A huge numa_node and lmem value, an embedded NUL in a vendor id. */
        memset(huge, '7', 100000);
        huge[100000] = 0;
        umockdev_testbed_set_attribute(tb, pci3, "numa_node", huge);
        umockdev_testbed_set_attribute(tb, "/sys/devices/pci0000:00/0000:03:00.0/drm/card0",
                                       "lmem_total_bytes", huge);
        umockdev_testbed_set_attribute_binary(tb, pci4, "vendor", nul_vendor, sizeof(nul_vendor));

        ck_assert_int_eq(udev_scan_enumerate(udev, &gpus), 1);
        ck_assert_str_eq(gpus[0]->id, "0000:03:00.0");
        ck_assert_int_eq(gpus[0]->numa_node, -1);
        ck_assert_uint_eq(gpus[0]->memory_bytes, 0);
        ck_assert_uint_eq(gpus[0]->device_id, 0x56a0);
}
END_TEST

START_TEST(test_count_tiles_dir) {
        char dir[] = "/tmp/kgpu-test-tiles-XXXXXX";
        static const char * const dirs[] = {
                "gt", "gt/gt0", "gt/gt1", "gt/gtx", "gt/gt", "device", "device/tile0",
                "device/tile1", "device/tile10", "device/tilex",
        };
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *cmd = NULL;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        fd = open(dir, O_PATH|O_DIRECTORY|O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_uint_eq(udev_scan_count_tiles(fd), 1);   /* nothing: at least 1 */
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++)
                ck_assert_int_eq(mkdirat(fd, dirs[i], 0755), 0);
        /* gt0, gt1, tile0, tile1 */
        ck_assert_uint_eq(udev_scan_count_tiles(fd), 4);
        ck_assert_int_ge(asprintf(&cmd, "rm -rf '%s'", dir), 0);
        ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_manager_table) {
        g_autoptr(UMockdevTestbed) tb = testbed_load("two-gpus");
        _cleanup_(manager_freep) Manager *m = NULL;
        const char *card = "/sys/devices/pci0000:00/0000:03:00.0/drm/card0";
        const char *render = "/sys/devices/pci0000:00/0000:03:00.0/drm/renderD128";
        Gpu *g;

        ck_assert_int_eq(manager_new(&m), 0);
        m->udev = udev_new();
        ck_assert_ptr_nonnull(m->udev);

        ck_assert_int_eq(manager_rescan(m), 0);
        ck_assert_uint_eq(m->n_gpus, 2);
        g = manager_find_gpu(m, "0000:03:00.0");
        ck_assert_ptr_nonnull(g);
        ck_assert_ptr_null(manager_find_gpu(m, "0000:09:00.0"));

        /* A remove event for the render node marks the GPU unhealthy, once. */
        ck_assert_int_eq(manager_mark_removed(m, render), 1);
        ck_assert_str_eq(g->health, GPU_UNHEALTHY);
        ck_assert_str_eq(g->health_reason, "removed");
        ck_assert_int_eq(manager_mark_removed(m, card), 0);
        ck_assert_int_eq(manager_mark_removed(m, "/sys/devices/other"), 0);
        ck_assert_int_eq(manager_mark_removed(m, NULL), 0);

        /* Still present in sysfs: a rescan makes it healthy again, same object. */
        ck_assert_int_eq(manager_rescan(m), 0);
        ck_assert_uint_eq(m->n_gpus, 2);
        ck_assert_ptr_eq(manager_find_gpu(m, "0000:03:00.0"), g);
        ck_assert_str_eq(g->health, GPU_HEALTHY);
        ck_assert_str_eq(g->health_reason, "");

        /* Gone from sysfs: kept, unhealthy. */
        umockdev_testbed_remove_device(tb, card);
        umockdev_testbed_remove_device(tb, render);
        ck_assert_int_eq(manager_rescan(m), 0);
        ck_assert_uint_eq(m->n_gpus, 2);
        ck_assert_str_eq(g->health, GPU_UNHEALTHY);
        ck_assert_str_eq(manager_find_gpu(m, "0000:04:00.0")->health, GPU_HEALTHY);
}
END_TEST

START_TEST(test_manager_upsert) {
        _cleanup_(manager_freep) Manager *m = NULL;
        Gpu *a, *b, *c;

        ck_assert_int_eq(manager_new(&m), 0);
        ck_assert_int_eq(gpu_new("0000:05:00.0", &a), 0);
        ck_assert_int_eq(gpu_new("0000:03:00.0", &b), 0);
        ck_assert_int_eq(gpu_new("0000:05:00.0", &c), 0);
        c->tiles = 4;

        ck_assert_int_eq(manager_upsert_gpu(m, a), 1);
        ck_assert_int_eq(manager_upsert_gpu(m, b), 1);
        /* sorted by id */
        ck_assert_str_eq(m->gpus[0]->id, "0000:03:00.0");
        ck_assert_str_eq(m->gpus[1]->id, "0000:05:00.0");
        /* an update keeps the object and takes the values */
        ck_assert_int_eq(manager_upsert_gpu(m, c), 0);
        ck_assert_uint_eq(m->n_gpus, 2);
        ck_assert_ptr_eq(m->gpus[1], a);
        ck_assert_uint_eq(a->tiles, 4);
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("probe-scan");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_enumerate_two_gpus);
        tcase_add_test(tc, test_enumerate_garbage);
        tcase_add_test(tc, test_lmem_times_tiles);
        tcase_add_test(tc, test_hostile_attributes);
        tcase_add_test(tc, test_count_tiles_dir);
        tcase_add_test(tc, test_manager_table);
        tcase_add_test(tc, test_manager_upsert);
        suite_add_tcase(s, tc);
        return s;
}

static int probe_scan_prepare(void) {
        const char *preload = getenv("LD_PRELOAD");

        if (!preload || !strstr(preload, "libumockdev-preload")) {
                fprintf(stderr, "LD_PRELOAD=libumockdev-preload.so.0 is needed, skipping.\n");
                return 77;
        }
        return 0;
}

KGPU_TEST_PREPARE(probe_scan_prepare)
KGPU_TEST_SUITE(suite)
