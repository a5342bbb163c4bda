/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-intel-resources.c — shared ids, health of shares, policies in GetPreferredAllocation,
 * monitoring resource, DRM nodes, by-path mounts and CDI names in Allocate answers. */

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

static char *card0_nodes[] = { (char *) "/dev/dri/card0", (char *) "/dev/dri/renderD128", NULL };
static char *card0_links[] = { (char *) "/dev/dri/by-path/pci-0000:03:00.0-card",
                               (char *) "/dev/dri/by-path/pci-0000:03:00.0-render", NULL };

static GpuInfo gpu(const char *id, bool healthy, const char *card, const char *render) {
        return (GpuInfo) {
                .id = (char *) id,
                .vendor = (char *) "intel",
                .driver = (char *) "i915",
                .card_node = (char *) card,
                .render_node = (char *) render,
                .health_reason = (char *) "",
                .numa_node = 1,
                .healthy = healthy,
        };
}

static char *joined(char **l) {
        static char buf[2048];
        _cleanup_free_ char *j = strv_join(l, ",");

        snprintf(buf, sizeof(buf), "%s", j ?: "");
        return buf;
}

static char *device_list(const Resources *r, const char *resource) {
        static char buf[2048];
        _cleanup_free_ Device *d = NULL;
        size_t n;

        ck_assert_int_eq(resources_get_devices(r, resource, &d, &n), 0);
        buf[0] = 0;
        for (size_t i = 0; i < n; i++) {
                char one[300];

                snprintf(one, sizeof(one), "%s%s%s", i ? "," : "", d[i].id, d[i].healthy ? "" : "!");
                strcat(buf, one);
        }
        return buf;
}

/* Two i915 GPUs, sharedDevNum 3. a has DeviceNodes + ByPathNodes, b only card/render. */
static Resources *make(ConfigAllocationPolicy policy, ConfigByPath by_path, bool cdi) {
        Resources *r = NULL;
        GpuInfo a = gpu("0000:03:00.0", true, "/dev/dri/card0", "/dev/dri/renderD128");
        GpuInfo b = gpu("0000:04:00.0", true, "/dev/dri/card1", "/dev/dri/renderD129");

        a.device_nodes = card0_nodes;
        a.by_path_nodes = card0_links;
        ck_assert_int_eq(resources_new(true, &r), 0);
        ck_assert_int_eq(resources_set_intel_options(r, 3, policy, true, by_path, cdi), 0);
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/b", &b, NULL), 1);
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/a", &a, NULL), 1);
        return r;
}

START_TEST(test_shares_listed) {
        _cleanup_(resources_freep) Resources *r = make(ALLOCATION_POLICY_NONE, BY_PATH_SINGLE, false);
        _cleanup_(resources_freep) Resources *one = NULL;
        GpuInfo a = gpu("0000:03:00.0", true, "/dev/dri/card0", "");

        ck_assert_str_eq(device_list(r, RESOURCE_INTEL_I915),
                         "0000:03:00.0-0,0000:03:00.0-1,0000:03:00.0-2,"
                         "0000:04:00.0-0,0000:04:00.0-1,0000:04:00.0-2");
        ck_assert_str_eq(joined(r->seen), "gpu.intel.com/i915,gpu.intel.com/i915_monitoring");
        ck_assert_str_eq(device_list(r, "gpu.intel.com/i915_monitoring"), "all");
        ck_assert_uint_eq(resources_share_limit(r, RESOURCE_INTEL_I915), 3);
        ck_assert_uint_eq(resources_share_limit(r, "gpu.intel.com/i915_monitoring"), 0);
        ck_assert_ptr_eq(resources_gpu_of_device(r, RESOURCE_INTEL_I915, "0000:04:00.0-2"),
                         resources_get_gpu(r, "/io/kgpu/Probe1/gpu/b"));
        /* The plain id is not a device when shared; a share past N is unknown. */
        ck_assert_ptr_null(resources_gpu_of_device(r, RESOURCE_INTEL_I915, "0000:04:00.0"));
        ck_assert_ptr_null(resources_gpu_of_device(r, RESOURCE_INTEL_I915, "0000:04:00.0-3"));
        ck_assert_ptr_null(resources_gpu_of_device(r, RESOURCE_INTEL_I915, "0000:04:00.0-01"));

        /* sharedDevNum 1: plain ids, no monitoring unless asked. */
        ck_assert_int_eq(resources_new(true, &one), 0);
        ck_assert_int_eq(resources_update_gpu(one, "/io/kgpu/Probe1/gpu/a", &a, NULL), 1);
        ck_assert_str_eq(device_list(one, RESOURCE_INTEL_I915), "0000:03:00.0");
        ck_assert_str_eq(joined(one->seen), "gpu.intel.com/i915");

        /* Changing N later rebuilds the share ids. */
        ck_assert_int_eq(resources_set_intel_options(one, 2, ALLOCATION_POLICY_NONE, false, BY_PATH_NONE, false), 0);
        ck_assert_str_eq(device_list(one, RESOURCE_INTEL_I915), "0000:03:00.0-0,0000:03:00.0-1");
}
END_TEST

START_TEST(test_shares_health) {
        _cleanup_(resources_freep) Resources *r = make(ALLOCATION_POLICY_NONE, BY_PATH_SINGLE, false);
        _cleanup_strv_free_ char **changed = NULL;
        GpuInfo a = gpu("0000:03:00.0", false, "", "");
        GpuInfo b = gpu("0000:04:00.0", false, "", "");
        ResourceError e = {};
        char *req[] = { (char *) "0000:03:00.0-1", NULL };
        char **reqs[] = { req };

        /* A removed GPU: every share Unhealthy; both resources change. */
        a.device_nodes = card0_nodes;
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/a", &a, &changed), 0);
        ck_assert_str_eq(joined(changed), "gpu.intel.com/i915,gpu.intel.com/i915_monitoring");
        ck_assert_str_eq(device_list(r, RESOURCE_INTEL_I915),
                         "0000:03:00.0-0!,0000:03:00.0-1!,0000:03:00.0-2!,"
                         "0000:04:00.0-0,0000:04:00.0-1,0000:04:00.0-2");
        ck_assert_int_eq(resources_check_allocate(r, RESOURCE_INTEL_I915, reqs, 1, &e), -EIO);
        ck_assert_str_eq(e.name, KGPU_ERROR_UNHEALTHY);
        ck_assert_ptr_nonnull(strstr(e.message, "0000:03:00.0-1"));
        /* Monitoring stays healthy while one GPU is. */
        ck_assert_str_eq(device_list(r, "gpu.intel.com/i915_monitoring"), "all");
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/b", &b, NULL), 0);
        ck_assert_str_eq(device_list(r, "gpu.intel.com/i915_monitoring"), "all!");

        /* Back: healthy again, allocatable. */
        a = gpu("0000:03:00.0", true, "/dev/dri/card0", "/dev/dri/renderD128");
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/a", &a, NULL), 0);
        ck_assert_str_eq(device_list(r, RESOURCE_INTEL_I915),
                         "0000:03:00.0-0,0000:03:00.0-1,0000:03:00.0-2,"
                         "0000:04:00.0-0!,0000:04:00.0-1!,0000:04:00.0-2!");
        ck_assert_int_eq(resources_check_allocate(r, RESOURCE_INTEL_I915, reqs, 1, &e), 0);
}
END_TEST

static char *preferred(Resources *r, char **avail, char **must, int size) {
        _cleanup_strv_free_ char **out = NULL;
        ResourceError e = {};

        ck_assert_int_eq(resources_preferred_allocation(r, RESOURCE_INTEL_I915, avail, must, size, &out, &e), 0);
        return joined(out);
}

START_TEST(test_preferred_policies) {
        char *avail[] = { (char *) "0000:04:00.0-2", (char *) "0000:03:00.0-0", (char *) "0000:03:00.0-1",
                          (char *) "0000:04:00.0-0", (char *) "0000:03:00.0-2", (char *) "0000:04:00.0-1",
                          (char *) "bogus", NULL };
        char *must[] = { (char *) "0000:04:00.0-1", NULL };
        Resources *r;

        r = make(ALLOCATION_POLICY_NONE, BY_PATH_SINGLE, false);
        ck_assert_str_eq(preferred(r, avail, NULL, 2), "0000:04:00.0-2,0000:03:00.0-0");
        ck_assert_str_eq(preferred(r, avail, must, 2), "0000:04:00.0-1,0000:04:00.0-2");
        resources_free(r);

        r = make(ALLOCATION_POLICY_PACKED, BY_PATH_SINGLE, false);
        ck_assert_str_eq(preferred(r, avail, NULL, 2), "0000:03:00.0-0,0000:03:00.0-1");
        ck_assert_str_eq(preferred(r, avail, NULL, 4), "0000:03:00.0-0,0000:03:00.0-1,0000:03:00.0-2,0000:04:00.0-0");
        /* must_include first and never repeated; the rest by policy. */
        ck_assert_str_eq(preferred(r, avail, must, 3), "0000:04:00.0-1,0000:03:00.0-0,0000:03:00.0-1");
        resources_free(r);

        r = make(ALLOCATION_POLICY_BALANCED, BY_PATH_SINGLE, false);
        ck_assert_str_eq(preferred(r, avail, NULL, 2), "0000:03:00.0-0,0000:04:00.0-0");
        /* With 04-1 taken by must_include, GPU 03 has more left: it comes next. */
        ck_assert_str_eq(preferred(r, avail, must, 2), "0000:04:00.0-1,0000:03:00.0-0");
        ck_assert_str_eq(preferred(r, avail, must, 3), "0000:04:00.0-1,0000:03:00.0-0,0000:03:00.0-1");
        resources_free(r);
}
END_TEST

START_TEST(test_allocate_answer) {
        _cleanup_(resources_freep) Resources *r = make(ALLOCATION_POLICY_NONE, BY_PATH_SINGLE, true);
        char *two_shares[] = { (char *) "0000:03:00.0-0", (char *) "0000:03:00.0-2", NULL };
        char *both[] = { (char *) "0000:04:00.0-1", (char *) "0000:03:00.0-1", NULL };
        char *all[] = { (char *) "all", NULL };
        _cleanup_free_ DeviceSpec *s = NULL;
        _cleanup_free_ MountSpec *mo = NULL;
        _cleanup_strv_free_ char **cdi = NULL;
        size_t n, nm;

        /* Two shares of one GPU: each node once, rw, container path = host path. */
        ck_assert_int_eq(resources_allocate_container(r, RESOURCE_INTEL_I915, two_shares, &s, &n), 0);
        ck_assert_uint_eq(n, 2);
        ck_assert_str_eq(s[0].host_path, "/dev/dri/card0");
        ck_assert_str_eq(s[1].host_path, "/dev/dri/renderD128");
        ck_assert_str_eq(s[1].container_path, "/dev/dri/renderD128");
        ck_assert_str_eq(s[1].permissions, "rw");
        s = mfree(s);
        ck_assert_int_eq(resources_allocate_extras(r, RESOURCE_INTEL_I915, two_shares, &mo, &nm, &cdi), 0);
        ck_assert_uint_eq(nm, 2);
        ck_assert_str_eq(mo[0].host_path, "/dev/dri/by-path/pci-0000:03:00.0-card");
        ck_assert_str_eq(mo[1].container_path, "/dev/dri/by-path/pci-0000:03:00.0-render");
        ck_assert(mo[0].read_only && mo[1].read_only);
        ck_assert_str_eq(joined(cdi), "gpu.intel.com/gpu=0000:03:00.0");
        mo = mfree(mo);
        cdi = strv_free(cdi);

        /* Two GPUs: card/render of the one without DeviceNodes too; GPU b has no links. */
        ck_assert_int_eq(resources_allocate_container(r, RESOURCE_INTEL_I915, both, &s, &n), 0);
        ck_assert_uint_eq(n, 4);
        ck_assert_str_eq(s[0].host_path, "/dev/dri/card1");
        ck_assert_str_eq(s[3].host_path, "/dev/dri/renderD128");
        s = mfree(s);
        ck_assert_int_eq(resources_allocate_extras(r, RESOURCE_INTEL_I915, both, &mo, &nm, &cdi), 0);
        ck_assert_uint_eq(nm, 2);
        ck_assert_str_eq(joined(cdi), "gpu.intel.com/gpu=0000:04:00.0,gpu.intel.com/gpu=0000:03:00.0");
        mo = mfree(mo);
        cdi = strv_free(cdi);

        /* Monitoring: every GPU's nodes, no mounts, no CDI. */
        ck_assert_int_eq(resources_allocate_container(r, "gpu.intel.com/i915_monitoring", all, &s, &n), 0);
        ck_assert_uint_eq(n, 4);
        s = mfree(s);
        ck_assert_int_eq(resources_allocate_extras(r, "gpu.intel.com/i915_monitoring", all, &mo, &nm, &cdi), 0);
        ck_assert_uint_eq(nm, 0);
        ck_assert_uint_eq(strv_length(cdi), 0);
        mo = mfree(mo);
        cdi = strv_free(cdi);

        /* byPath all: the directory once; none: nothing. */
        ck_assert_int_eq(resources_set_intel_options(r, 3, ALLOCATION_POLICY_NONE, true, BY_PATH_ALL, false), 0);
        ck_assert_int_eq(resources_allocate_extras(r, RESOURCE_INTEL_I915, both, &mo, &nm, &cdi), 0);
        ck_assert_uint_eq(nm, 1);
        ck_assert_str_eq(mo[0].host_path, "/dev/dri/by-path");
        ck_assert(mo[0].read_only);
        ck_assert_uint_eq(strv_length(cdi), 0);
        mo = mfree(mo);
        cdi = strv_free(cdi);
        ck_assert_int_eq(resources_set_intel_options(r, 3, ALLOCATION_POLICY_NONE, true, BY_PATH_NONE, false), 0);
        ck_assert_int_eq(resources_allocate_extras(r, RESOURCE_INTEL_I915, both, &mo, &nm, &cdi), 0);
        ck_assert_uint_eq(nm, 0);
}
END_TEST

/* intel.monitoringMode single (the Intel plugin's default): one gpu.intel.com/monitoring
 * covering the i915 and the xe GPU, granting their DRM and MEI nodes; split: per driver,
 * MEI nodes too. A GPU the id filter leaves out is covered by neither. */
START_TEST(test_monitoring_modes) {
        _cleanup_(resources_freep) Resources *r = NULL;
        static char *mei0[] = { (char *) "/dev/mei0", NULL }, *mei1[] = { (char *) "/dev/mei1", NULL };
        static char *allow[] = { (char *) "0x56a0", (char *) "0xe20b", NULL };
        GpuInfo a = gpu("0000:03:00.0", true, "/dev/dri/card0", "/dev/dri/renderD128");
        GpuInfo b = gpu("0000:04:00.0", true, "/dev/dri/card1", "/dev/dri/renderD129");
        GpuInfo c = gpu("0000:05:00.0", true, "/dev/dri/card2", "/dev/dri/renderD130");
        char *all[] = { (char *) "all", NULL };
        char *share[] = { (char *) "0000:03:00.0", NULL };
        _cleanup_free_ DeviceSpec *s = NULL;
        _cleanup_free_ MountSpec *mo = NULL;
        _cleanup_strv_free_ char **cdi = NULL;
        size_t n, nm;

        a.mei_nodes = mei0;
        a.device_id = 0x56a0;
        b.driver = (char *) "xe";
        b.mei_nodes = mei1;
        b.device_id = 0xe20b;
        c.device_id = 0x0bd5;           /* not allowed */
        ck_assert_int_eq(resources_new(true, &r), 0);
        ck_assert_int_eq(resources_set_intel_options(r, 1, ALLOCATION_POLICY_NONE, true, BY_PATH_SINGLE, true), 0);
        ck_assert_int_eq(resources_set_intel_monitoring_mode(r, INTEL_MONITORING_MODE_SINGLE), 0);
        ck_assert_int_eq(resources_set_id_filters(r, allow, NULL), 0);
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/a", &a, NULL), 1);
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/b", &b, NULL), 1);
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/c", &c, NULL), 1);

        ck_assert_str_eq(joined(r->seen), "gpu.intel.com/i915,gpu.intel.com/monitoring,gpu.intel.com/xe");
        ck_assert_str_eq(device_list(r, RESOURCE_INTEL_MONITORING), "all");
        ck_assert(resources_is_monitoring(r, RESOURCE_INTEL_MONITORING));
        ck_assert(!resources_is_monitoring(r, "gpu.intel.com/i915_monitoring"));
        ck_assert_uint_eq(resources_share_limit(r, RESOURCE_INTEL_MONITORING), 0);

        ck_assert_int_eq(resources_allocate_container(r, RESOURCE_INTEL_MONITORING, all, &s, &n), 0);
        ck_assert_uint_eq(n, 6);
        ck_assert_str_eq(s[0].host_path, "/dev/dri/card0");
        ck_assert_str_eq(s[1].host_path, "/dev/dri/renderD128");
        ck_assert_str_eq(s[2].host_path, "/dev/mei0");
        ck_assert_str_eq(s[2].container_path, "/dev/mei0");
        ck_assert_str_eq(s[2].permissions, "rw");
        ck_assert_str_eq(s[3].host_path, "/dev/dri/card1");
        ck_assert_str_eq(s[5].host_path, "/dev/mei1");
        s = mfree(s);
        ck_assert_int_eq(resources_allocate_extras(r, RESOURCE_INTEL_MONITORING, all, &mo, &nm, &cdi), 0);
        ck_assert_uint_eq(nm, 0);
        ck_assert_uint_eq(strv_length(cdi), 0);
        mo = mfree(mo);
        cdi = strv_free(cdi);

        /* A GPU's own resource never gets its MEI nodes. */
        ck_assert_int_eq(resources_allocate_container(r, RESOURCE_INTEL_I915, share, &s, &n), 0);
        ck_assert_uint_eq(n, 2);
        s = mfree(s);

        /* Healthy while one covered GPU is. */
        a.healthy = false;
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/a", &a, NULL), 0);
        ck_assert_str_eq(device_list(r, RESOURCE_INTEL_MONITORING), "all");
        ck_assert_int_eq(resources_allocate_container(r, RESOURCE_INTEL_MONITORING, all, &s, &n), 0);
        ck_assert_uint_eq(n, 3);                /* b's only */
        ck_assert_str_eq(s[2].host_path, "/dev/mei1");
        s = mfree(s);
        b.healthy = false;
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/b", &b, NULL), 0);
        ck_assert_str_eq(device_list(r, RESOURCE_INTEL_MONITORING), "all!");

        /* split: per driver, MEI nodes included. */
        ck_assert_int_eq(resources_set_intel_monitoring_mode(r, INTEL_MONITORING_MODE_SPLIT), 0);
        a.healthy = b.healthy = true;
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/a", &a, NULL), 0);
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/b", &b, NULL), 0);
        ck_assert(!resources_is_monitoring(r, RESOURCE_INTEL_MONITORING));
        ck_assert(resources_is_monitoring(r, "gpu.intel.com/xe_monitoring"));
        ck_assert_int_eq(resources_allocate_container(r, "gpu.intel.com/xe_monitoring", all, &s, &n), 0);
        ck_assert_uint_eq(n, 3);
        ck_assert_str_eq(s[0].host_path, "/dev/dri/card1");
        ck_assert_str_eq(s[2].host_path, "/dev/mei1");
        ck_assert_int_eq(resources_set_intel_monitoring_mode(r, (ConfigIntelMonitoringMode) 7), -EINVAL);
}
END_TEST

/* The borrowed device list (built once per change) is always the list a fresh build
 * gives, through random updates, health flips, removals and option changes; a view
 * taken for one resource stays right while another is viewed. */
START_TEST(test_devices_view_follows_changes) {
        _cleanup_(resources_freep) Resources *r = NULL;
        static const char * const ids[] = { "0000:03:00.0", "0000:04:00.0", "0000:05:00.0", "0000:06:00.0" };
        static const char * const drivers[] = { "i915", "xe" };
        const char *names[] = { RESOURCE_INTEL_I915, RESOURCE_INTEL_XE, "gpu.intel.com/i915_monitoring" };
        unsigned seed = 99;
        size_t compared = 0;

        ck_assert_int_eq(resources_new(true, &r), 0);
        for (int step = 0; step < 400; step++) {
                int what = rand_r(&seed) % 6;
                size_t g = (size_t) rand_r(&seed) % 4;
                char path[64];

                snprintf(path, sizeof(path), "/io/kgpu/Probe1/gpu/%zu", g);
                if (what <= 2) {
                        GpuInfo info = gpu(ids[g], rand_r(&seed) % 3 != 0, "/dev/dri/card0", "/dev/dri/renderD128");

                        info.driver = (char *) drivers[g % 2];
                        ck_assert_int_ge(resources_update_gpu(r, path, &info, NULL), 0);
                } else if (what == 3)
                        ck_assert_int_ge(resources_remove_gpu(r, path, NULL), 0);
                else if (what == 4)
                        ck_assert_int_eq(resources_set_intel_options(r, 1 + (uint32_t) (rand_r(&seed) % 4),
                                                                     ALLOCATION_POLICY_NONE, rand_r(&seed) % 2,
                                                                     BY_PATH_NONE, false), 0);

                for (size_t k = 0; k < ELEMENTSOF(names); k++) {
                        _cleanup_free_ Device *fresh = NULL;
                        const Device *v = NULL, *again = NULL;
                        size_t n_fresh = 0, n_v = 0, n_again = 0;
                        int k1 = resources_get_devices(r, names[k], &fresh, &n_fresh);
                        int k2 = resources_devices_view(r, names[k], &v, &n_v);

                        ck_assert_int_eq(k1, k2);
                        if (k1 < 0)
                                continue;
                        ck_assert_uint_eq(n_fresh, n_v);
                        for (size_t i = 0; i < n_v; i++) {
                                ck_assert_str_eq(fresh[i].id, v[i].id);
                                ck_assert_int_eq(fresh[i].healthy, v[i].healthy);
                                ck_assert_ptr_eq(fresh[i].gpu, v[i].gpu);
                                ck_assert_uint_eq(fresh[i].share, v[i].share);
                        }
                        /* Asked again without a change: the same memory. */
                        ck_assert_int_eq(resources_devices_view(r, names[k], &again, &n_again), 0);
                        ck_assert_ptr_eq(again, v);
                        compared++;
                }
        }
        ck_assert_uint_gt(compared, 400);
}
END_TEST

static Suite *intel_resources_suite(void) {
        Suite *s = suite_create("intel-resources");
        TCase *tc = tcase_create("core");

        tcase_add_test(tc, test_shares_listed);
        tcase_add_test(tc, test_shares_health);
        tcase_add_test(tc, test_preferred_policies);
        tcase_add_test(tc, test_allocate_answer);
        tcase_add_test(tc, test_monitoring_modes);
        tcase_add_test(tc, test_devices_view_follows_changes);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(intel_resources_suite)
