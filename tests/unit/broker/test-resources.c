/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-resources.c — GPU records to resources, preferred allocation, Allocate answers, validation. */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/util.h"
#include "daemons/broker/intel.h"
#include "daemons/broker/resources.h"
#include "tests/unit/test-main.h"

static GpuInfo gpu(const char *id, const char *driver, bool healthy, int numa, const char *card, const char *render) {
        return (GpuInfo) {
                .id = (char *) id,
                .vendor = (char *) "intel",
                .driver = (char *) driver,
                .card_node = (char *) card,
                .render_node = (char *) render,
                .health_reason = (char *) "",
                .numa_node = numa,
                .healthy = healthy,
        };
}

static char *joined(char **l) {
        static char buf[1024];
        _cleanup_free_ char *j = strv_join(l, ",");

        snprintf(buf, sizeof(buf), "%s", j ?: "");
        return buf;
}

/* Three i915 GPUs (one unhealthy, inserted out of order) and one xe. */
static Resources *make(void) {
        Resources *r = NULL;
        GpuInfo a = gpu("0000:03:00.0", "i915", true, 0, "/dev/dri/card0", "/dev/dri/renderD128");
        GpuInfo b = gpu("0000:02:00.0", "i915", true, -1, "/dev/dri/card1", "");
        GpuInfo c = gpu("0000:05:00.0", "i915", false, 1, "/dev/dri/card2", "/dev/dri/renderD130");
        GpuInfo x = gpu("0000:04:00.0", "xe", true, 0, "/dev/dri/card3", "/dev/dri/renderD131");

        ck_assert_int_eq(resources_new(true, &r), 0);
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/a", &a, NULL), 1);
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/b", &b, NULL), 1);
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/c", &c, NULL), 1);
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/x", &x, NULL), 1);
        return r;
}

START_TEST(test_resources_inventory) {
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_strv_free_ char **changed = NULL;
        _cleanup_free_ Device *d = NULL;
        GpuInfo nv = gpu("GPU-1234", "nvidia", true, 0, "", "");
        GpuInfo other = gpu("0000:09:00.0", "amdgpu", true, 0, "", "");
        size_t n;

        ck_assert_int_eq(resources_new(true, &r), 0);
        ck_assert_ptr_null(r->seen);

        /* Not Intel i915/xe: kept, never advertised. */
        nv.vendor = (char *) "nvidia";
        ck_assert_int_eq(resources_update_gpu(r, "/p/nv", &nv, &changed), 1);
        ck_assert_int_eq(resources_update_gpu(r, "/p/amd", &other, &changed), 1);
        ck_assert_ptr_null(changed);
        ck_assert_ptr_null(r->seen);
        ck_assert_int_eq(resources_get_devices(r, RESOURCE_INTEL_I915, &d, &n), -ENOENT);
        r = resources_free(r);

        r = make();
        ck_assert_str_eq(joined(r->seen), "gpu.intel.com/i915,gpu.intel.com/xe");
        ck_assert(resources_known(r, RESOURCE_INTEL_I915));
        ck_assert(!resources_known(r, "nvidia.com/gpu"));

        /* Sorted by id, health and NUMA as given. */
        ck_assert_int_eq(resources_get_devices(r, RESOURCE_INTEL_I915, &d, &n), 0);
        ck_assert_uint_eq(n, 3);
        ck_assert_str_eq(d[0].id, "0000:02:00.0");
        ck_assert_int_eq(d[0].numa_node, -1);
        ck_assert_str_eq(d[1].id, "0000:03:00.0");
        ck_assert(d[1].healthy);
        ck_assert_int_eq(d[1].numa_node, 0);
        ck_assert_str_eq(d[2].id, "0000:05:00.0");
        ck_assert(!d[2].healthy);
        ck_assert_ptr_nonnull(resources_find_device(d, n, "0000:05:00.0"));
        ck_assert_ptr_null(resources_find_device(d, n, "0000:04:00.0"));
        d = mfree(d);
        ck_assert_int_eq(resources_get_devices(r, RESOURCE_INTEL_XE, &d, &n), 0);
        ck_assert_uint_eq(n, 1);
        d = mfree(d);

        /* Intel disabled: nothing advertised. */
        r = resources_free(r);
        ck_assert_int_eq(resources_new(false, &r), 0);
        GpuInfo a = gpu("0000:03:00.0", "i915", true, 0, "/dev/dri/card0", "");
        ck_assert_int_eq(resources_update_gpu(r, "/p/a", &a, &changed), 1);
        ck_assert_ptr_null(changed);
        ck_assert_ptr_null(r->seen);
}
END_TEST

START_TEST(test_resources_changes) {
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_strv_free_ char **changed = NULL;
        _cleanup_free_ Device *d = NULL;
        GpuInfo a = gpu("0000:03:00.0", "i915", true, 0, "/dev/dri/card0", "/dev/dri/renderD128");
        size_t n;

        ck_assert_int_eq(resources_new(true, &r), 0);
        ck_assert_int_eq(resources_update_gpu(r, "/p/a", &a, &changed), 1);
        ck_assert_str_eq(joined(changed), RESOURCE_INTEL_I915);
        changed = strv_free(changed);

        /* Same values: no change. A card node change is not a ListAndWatch change. */
        a.card_node = (char *) "/dev/dri/card9";
        ck_assert_int_eq(resources_update_gpu(r, "/p/a", &a, &changed), 0);
        ck_assert_ptr_null(changed);
        ck_assert_str_eq(resources_get_gpu(r, "/p/a")->info.card_node, "/dev/dri/card9");

        /* Health and NUMA are. */
        a.healthy = false;
        ck_assert_int_eq(resources_update_gpu(r, "/p/a", &a, &changed), 0);
        ck_assert_str_eq(joined(changed), RESOURCE_INTEL_I915);
        changed = strv_free(changed);
        a.numa_node = 1;
        ck_assert_int_eq(resources_update_gpu(r, "/p/a", &a, &changed), 0);
        ck_assert_str_eq(joined(changed), RESOURCE_INTEL_I915);
        changed = strv_free(changed);

        /* Rebinding to xe moves it: both change, i915 stays advertised (empty). */
        a.driver = (char *) "xe";
        ck_assert_int_eq(resources_update_gpu(r, "/p/a", &a, &changed), 0);
        ck_assert_str_eq(joined(changed), "gpu.intel.com/i915,gpu.intel.com/xe");
        changed = strv_free(changed);
        ck_assert_str_eq(joined(r->seen), "gpu.intel.com/i915,gpu.intel.com/xe");
        ck_assert_int_eq(resources_get_devices(r, RESOURCE_INTEL_I915, &d, &n), 0);
        ck_assert_uint_eq(n, 0);
        d = mfree(d);

        /* Another object with the same id is refused. */
        GpuInfo dup = gpu("0000:03:00.0", "i915", true, 0, "", "");
        ck_assert_int_eq(resources_update_gpu(r, "/p/dup", &dup, &changed), -EEXIST);
        ck_assert_ptr_null(changed);
        ck_assert_ptr_null(resources_get_gpu(r, "/p/dup"));
        GpuInfo noid = gpu("", "i915", true, 0, "", "");
        ck_assert_int_eq(resources_update_gpu(r, "/p/noid", &noid, &changed), -EINVAL);

        /* Removal: the resource changes and stays advertised. */
        ck_assert_int_eq(resources_remove_gpu(r, "/p/a", &changed), 1);
        ck_assert_str_eq(joined(changed), RESOURCE_INTEL_XE);
        ck_assert_int_eq(resources_remove_gpu(r, "/p/a", &changed), 0);
        ck_assert(resources_known(r, RESOURCE_INTEL_XE));
        ck_assert_int_eq(resources_get_devices(r, RESOURCE_INTEL_XE, &d, &n), 0);
        ck_assert_uint_eq(n, 0);
}
END_TEST

START_TEST(test_resources_gpu_limit) {
        _cleanup_(resources_freep) Resources *r = NULL;
        char id[32], path[64];

        ck_assert_int_eq(resources_new(true, &r), 0);
        for (unsigned i = 0; i < RESOURCES_GPUS_MAX; i++) {
                snprintf(id, sizeof(id), "0000:%02x:%02x.0", i / 256, i % 256);
                snprintf(path, sizeof(path), "/p/%u", i);
                GpuInfo g = gpu(id, "i915", true, 0, "", "");
                ck_assert_int_eq(resources_update_gpu(r, path, &g, NULL), 1);
        }
        GpuInfo extra = gpu("extra", "i915", true, 0, "", "");
        ck_assert_int_eq(resources_update_gpu(r, "/p/extra", &extra, NULL), -E2BIG);
        /* Updating a known one still works. */
        GpuInfo again = gpu("0000:00:00.0", "i915", false, 0, "", "");
        ck_assert_int_eq(resources_update_gpu(r, "/p/0", &again, NULL), 0);
}
END_TEST

START_TEST(test_resources_preferred) {
        _cleanup_(resources_freep) Resources *r = make();
        ResourceError e = {};
        char **out = NULL;

        char *avail[] = { (char *) "0000:05:00.0", (char *) "0000:03:00.0", (char *) "bogus",
                          (char *) "0000:02:00.0", (char *) "0000:03:00.0", NULL };
        char *must[] = { (char *) "0000:02:00.0", (char *) "0000:04:00.0", NULL };
        char *none[] = { NULL };

        /* must_include first; then available in order; unknown/other-resource ids,
         * unhealthy available ids and repeats skipped. */
        ck_assert_int_eq(resources_preferred_allocation(r, RESOURCE_INTEL_I915, avail, must, 2, &out, &e), 0);
        ck_assert_str_eq(joined(out), "0000:02:00.0,0000:03:00.0");
        out = strv_free(out);

        ck_assert_int_eq(resources_preferred_allocation(r, RESOURCE_INTEL_I915, avail, none, 1, &out, &e), 0);
        ck_assert_str_eq(joined(out), "0000:03:00.0");
        out = strv_free(out);

        /* Fewer than size available: what there is. */
        ck_assert_int_eq(resources_preferred_allocation(r, RESOURCE_INTEL_I915, avail, none, 10, &out, &e), 0);
        ck_assert_str_eq(joined(out), "0000:03:00.0,0000:02:00.0");
        out = strv_free(out);

        /* Nothing available: empty (not NULL). */
        ck_assert_int_eq(resources_preferred_allocation(r, RESOURCE_INTEL_XE, none, none, 1, &out, &e), 0);
        ck_assert_ptr_nonnull(out);
        ck_assert_uint_eq(strv_length(out), 0);
        out = strv_free(out);

        /* Errors. */
        ck_assert_int_eq(resources_preferred_allocation(r, "nvidia.com/gpu", avail, none, 1, &out, &e), -ENOENT);
        ck_assert_str_eq(e.name, KGPU_ERROR_UNKNOWN_RESOURCE);
        ck_assert_ptr_nonnull(strstr(e.message, "nvidia.com/gpu"));
        ck_assert_int_eq(resources_preferred_allocation(r, RESOURCE_INTEL_I915, avail, none, 0, &out, &e), -EINVAL);
        ck_assert_str_eq(e.name, KGPU_ERROR_INVALID_ARGS);
        ck_assert_int_eq(resources_preferred_allocation(r, RESOURCE_INTEL_I915, avail, none, -3, &out, &e), -EINVAL);
        ck_assert_int_eq(resources_preferred_allocation(r, RESOURCE_INTEL_I915, avail, none,
                                                        RESOURCES_IDS_MAX + 1, &out, &e), -EINVAL);
        ck_assert_ptr_null(out);
}
END_TEST

START_TEST(test_resources_preferred_bounds) {
        _cleanup_(resources_freep) Resources *r = make();
        _cleanup_strv_free_ char **many = NULL, **longid = NULL;
        char *none[] = { NULL };
        char big[RESOURCES_ID_MAX + 2];
        ResourceError e = {};
        char **out = NULL;

        for (unsigned i = 0; i <= RESOURCES_IDS_MAX; i++)
                ck_assert_int_eq(strv_extend(&many, "0000:03:00.0"), 0);
        ck_assert_int_eq(resources_preferred_allocation(r, RESOURCE_INTEL_I915, many, none, 1, &out, &e), -E2BIG);
        ck_assert_str_eq(e.name, KGPU_ERROR_INVALID_ARGS);
        ck_assert_int_eq(resources_preferred_allocation(r, RESOURCE_INTEL_I915, none, many, 1, &out, &e), -E2BIG);

        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        ck_assert_int_eq(strv_extend(&longid, big), 0);
        ck_assert_int_eq(resources_preferred_allocation(r, RESOURCE_INTEL_I915, longid, none, 1, &out, &e), -EINVAL);
        ck_assert_ptr_nonnull(strstr(e.message, "longer than 256"));
        ck_assert_ptr_null(out);
}
END_TEST

START_TEST(test_resources_allocate_answer) {
        _cleanup_(resources_freep) Resources *r = make();
        _cleanup_free_ DeviceSpec *specs = NULL;
        char *ids[] = { (char *) "0000:03:00.0", (char *) "0000:02:00.0", NULL };
        char **reqs[] = { ids };
        ResourceError e = {};
        size_t n;

        ck_assert_int_eq(resources_check_allocate(r, RESOURCE_INTEL_I915, reqs, 1, &e), 0);
        ck_assert_int_eq(resources_allocate_container(r, RESOURCE_INTEL_I915, ids, &specs, &n), 0);
        /* In request order; 0000:02:00.0 has no render node. */
        ck_assert_uint_eq(n, 3);
        ck_assert_str_eq(specs[0].host_path, "/dev/dri/card0");
        ck_assert_str_eq(specs[0].container_path, "/dev/dri/card0");
        ck_assert_str_eq(specs[0].permissions, "rw");
        ck_assert_str_eq(specs[1].host_path, "/dev/dri/renderD128");
        ck_assert_str_eq(specs[1].container_path, "/dev/dri/renderD128");
        ck_assert_str_eq(specs[2].host_path, "/dev/dri/card1");
        ck_assert_str_eq(specs[2].permissions, "rw");
}
END_TEST

START_TEST(test_resources_allocate_errors) {
        _cleanup_(resources_freep) Resources *r = make();
        _cleanup_strv_free_ char **many = NULL;
        char *ok[] = { (char *) "0000:03:00.0", NULL };
        char *ok2[] = { (char *) "0000:02:00.0", NULL };
        char *unknown[] = { (char *) "0000:03:00.0", (char *) "0000:99:00.0", NULL };
        char *other[] = { (char *) "0000:04:00.0", NULL };
        char *sick[] = { (char *) "0000:05:00.0", NULL };
        char *dup[] = { (char *) "0000:03:00.0", (char *) "0000:03:00.0", NULL };
        char *empty[] = { NULL };
        char *emptyid[] = { (char *) "", NULL };
        char *ctl[] = { (char *) "bad\n\x1b[31mid", NULL };
        char big[RESOURCES_ID_MAX + 2];
        char *longid[] = { big, NULL };
        char name[RESOURCES_NAME_MAX + 2];
        ResourceError e = {};

        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        memset(name, 'n', sizeof(name) - 1);
        name[sizeof(name) - 1] = 0;

#define CHECK(resource, reqs, n, err, ename, needle)                                            \
        do {                                                                                    \
                e = (ResourceError) {};                                                         \
                ck_assert_int_eq(resources_check_allocate(r, resource, reqs, n, &e), err);      \
                ck_assert_str_eq(e.name, ename);                                                \
                ck_assert_msg(strstr(e.message, needle), "'%s' lacks '%s'", e.message, needle); \
        } while (0)

        CHECK("nvidia.com/gpu", ((char **[]) { ok }), 1, -ENOENT, KGPU_ERROR_UNKNOWN_RESOURCE, "nvidia.com/gpu");
        CHECK("", ((char **[]) { ok }), 1, -EINVAL, KGPU_ERROR_INVALID_ARGS, "Resource name");
        CHECK(name, ((char **[]) { ok }), 1, -EINVAL, KGPU_ERROR_INVALID_ARGS, "Resource name");
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { ok }), 0, -EINVAL, KGPU_ERROR_INVALID_ARGS, "No container");
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { empty }), 1, -EINVAL, KGPU_ERROR_INVALID_ARGS, "Empty");
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { ok, empty }), 2, -EINVAL, KGPU_ERROR_INVALID_ARGS, "Empty");
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { emptyid }), 1, -EINVAL, KGPU_ERROR_INVALID_ARGS, "empty or longer");
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { longid }), 1, -EINVAL, KGPU_ERROR_INVALID_ARGS, "longer than 256");
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { unknown }), 1, -ENODEV, KGPU_ERROR_UNKNOWN_DEVICE, "'0000:99:00.0'");
        /* A device of another resource is unknown here. */
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { other }), 1, -ENODEV, KGPU_ERROR_UNKNOWN_DEVICE, "0000:04:00.0");
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { sick }), 1, -EIO, KGPU_ERROR_UNHEALTHY, "'0000:05:00.0'");
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { ok2, sick }), 2, -EIO, KGPU_ERROR_UNHEALTHY, "unhealthy");
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { dup }), 1, -EINVAL, KGPU_ERROR_INVALID_ARGS, "more than once");
        /* The same id in two containers of one call. */
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { ok, ok }), 2, -EINVAL, KGPU_ERROR_INVALID_ARGS, "more than once");
        /* Control characters never reach the message. */
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { ctl }), 1, -ENODEV, KGPU_ERROR_UNKNOWN_DEVICE, "'bad??[31mid'");

        for (unsigned i = 0; i <= RESOURCES_IDS_MAX; i++) {
                char id[16];

                snprintf(id, sizeof(id), "id-%u", i);
                ck_assert_int_eq(strv_extend(&many, id), 0);
        }
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { many }), 1, -E2BIG, KGPU_ERROR_INVALID_ARGS, "More than 4096");

        char **lots[RESOURCES_REQUESTS_MAX + 1];
        for (size_t i = 0; i < ELEMENTSOF(lots); i++)
                lots[i] = ok;
        CHECK(RESOURCE_INTEL_I915, lots, ELEMENTSOF(lots), -E2BIG, KGPU_ERROR_INVALID_ARGS, "container requests");

        /* Two containers of just over half the limit each: over RESOURCES_IDS_MAX in the call. */
        _cleanup_strv_free_ char **h1 = NULL, **h2 = NULL;
        for (unsigned i = 0; i < RESOURCES_IDS_MAX / 2 + 100; i++) {
                char id[16];

                snprintf(id, sizeof(id), "a-%u", i);
                ck_assert_int_eq(strv_extend(&h1, id), 0);
                snprintf(id, sizeof(id), "b-%u", i);
                ck_assert_int_eq(strv_extend(&h2, id), 0);
        }
        CHECK(RESOURCE_INTEL_I915, ((char **[]) { h1, h2 }), 2, -E2BIG, KGPU_ERROR_INVALID_ARGS, "in one call");
#undef CHECK
}
END_TEST

START_TEST(test_resources_check_ids) {
        _cleanup_(resources_freep) Resources *r = make();
        char *known[] = { (char *) "0000:05:00.0", (char *) "0000:03:00.0", NULL };
        char *unknown[] = { (char *) "nope", NULL };
        char *empty[] = { NULL };
        ResourceError e = {};

        /* PreStartContainer: known is enough, unhealthy or not; empty is fine. */
        ck_assert_int_eq(resources_check_ids(r, RESOURCE_INTEL_I915, known, true, false, &e), 0);
        ck_assert_int_eq(resources_check_ids(r, RESOURCE_INTEL_I915, empty, true, false, &e), 0);
        ck_assert_int_eq(resources_check_ids(r, RESOURCE_INTEL_I915, unknown, true, false, &e), -ENODEV);
        ck_assert_str_eq(e.name, KGPU_ERROR_UNKNOWN_DEVICE);
        ck_assert_ptr_nonnull(strstr(e.message, "'nope'"));
        ck_assert_int_eq(resources_check_ids(r, RESOURCE_INTEL_I915, known, true, true, &e), -EIO);
        ck_assert_str_eq(e.name, KGPU_ERROR_UNHEALTHY);
        ck_assert_int_eq(resources_check_ids(r, RESOURCE_INTEL_I915, empty, false, false, &e), -EINVAL);
        ck_assert_int_eq(resources_check_ids(r, "x", known, true, false, &e), -ENOENT);
}
END_TEST

START_TEST(test_resources_id_filters) {
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_strv_free_ char **changed = NULL;
        GpuInfo a = gpu("0000:03:00.0", "i915", true, 0, "", "");
        GpuInfo b = gpu("0000:04:00.0", "i915", true, 0, "", "");
        GpuInfo c = gpu("0000:05:00.0", "xe", true, 0, "", "");
        char *allow[] = { (char *) "0x56a0", (char *) "e20b", NULL };
        char *deny[] = { (char *) "0xE20B", NULL };
        char *bad1[] = { (char *) "0x10000", NULL };
        char *bad2[] = { (char *) "zz", NULL };
        char *bad3[] = { (char *) "", NULL };
        uint16_t v;

        ck_assert_int_eq(resources_parse_pci_id("0x56a0", &v), 0);
        ck_assert_uint_eq(v, 0x56a0);
        ck_assert_int_eq(resources_parse_pci_id("56A1", &v), 0);
        ck_assert_uint_eq(v, 0x56a1);
        ck_assert_int_eq(resources_parse_pci_id("-1", &v), -EINVAL);

        a.device_id = 0x56a0;
        b.device_id = 0x56c0;
        c.device_id = 0xe20b;
        ck_assert_int_eq(resources_new(true, &r), 0);
        ck_assert_int_eq(resources_set_id_filters(r, bad1, NULL), -ERANGE);
        ck_assert_int_eq(resources_set_id_filters(r, NULL, bad2), -EINVAL);
        ck_assert_int_eq(resources_set_id_filters(r, bad3, NULL), -EINVAL);
        ck_assert_int_eq(resources_set_id_filters(r, allow, deny), 0);

        /* a: allowed; b: not in the allow list; c: allowed but denied. */
        ck_assert_int_eq(resources_update_gpu(r, "/p/a", &a, &changed), 1);
        ck_assert_int_eq(resources_update_gpu(r, "/p/b", &b, &changed), 1);
        ck_assert_int_eq(resources_update_gpu(r, "/p/c", &c, &changed), 1);
        ck_assert_str_eq(joined(changed), RESOURCE_INTEL_I915);
        ck_assert_str_eq(joined(r->seen), RESOURCE_INTEL_I915);
        ck_assert_str_eq(resources_name_for_gpu(r, &a), RESOURCE_INTEL_I915);
        ck_assert_ptr_null(resources_name_for_gpu(r, &b));
        ck_assert_ptr_null(resources_name_for_gpu(r, &c));

        /* No filters: all served. */
        ck_assert_int_eq(resources_set_id_filters(r, NULL, NULL), 0);
        ck_assert_ptr_nonnull(resources_name_for_gpu(r, &b));
        ck_assert_ptr_nonnull(resources_name_for_gpu(r, &c));
}
END_TEST

static Suite *resources_suite(void) {
        Suite *s = suite_create("resources");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_resources_inventory);
        tcase_add_test(tc, test_resources_changes);
        tcase_add_test(tc, test_resources_gpu_limit);
        tcase_add_test(tc, test_resources_preferred);
        tcase_add_test(tc, test_resources_preferred_bounds);
        tcase_add_test(tc, test_resources_allocate_answer);
        tcase_add_test(tc, test_resources_allocate_errors);
        tcase_add_test(tc, test_resources_check_ids);
        tcase_add_test(tc, test_resources_id_filters);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(resources_suite)
