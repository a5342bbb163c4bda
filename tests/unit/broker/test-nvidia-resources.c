/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-nvidia-resources.c — the broker's NVIDIA resources (nvidia.c through the
 * resources_* entry points): MIG strategies x deviceIDStrategy x time-slicing / MPS,
 * Allocate answers per deviceListStrategy, failRequestsGreaterThanOne, the MPS requests
 * for the probe, preferred allocation (topology, replicas) and bounds.
 *
 * GPU records carry the values of the recordings in tests/data/nvidia: the H100 with MIG
 * (L-H100-MIG-1.txt, query-gpu-H100-1.txt: 81559 MiB, NUMA 0 from topo-m-1xH100-MIG-1),
 * the H100 with 7x 1g.10gb (L-H100-MIG-2.txt), the L40S (L-L40S-1.txt,
 * query-gpu-L40S-1.txt: 46068 MiB), the 8x H100 NVLink box (topo-m-8xH100-1.txt: NV18
 * between all pairs, GPUs 0-3 on NUMA 0, 4-7 on NUMA 1) and the 5x RTX 4090 box
 * (topo-m-5xRTX4090-mixedNUMA-1.txt). Expected ids and answers are written out here, as
 * the NVIDIA device plugin's documentation and source describe them.
 */

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/config.h"
#include "common/util.h"
#include "daemons/broker/intel.h"
#include "daemons/broker/nvidia.h"
#include "daemons/broker/policy.h"
#include "daemons/broker/resources.h"
#include "tests/unit/test-main.h"

#define STRV(...) ((char *[]) { __VA_ARGS__, NULL })
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)

#define H100_UUID "GPU-00000000-0000-0000-0000-000000000000"
#define H100_MIG0 "MIG-00000000-0000-0000-0000-000000000000"     /* 3g.40gb, Device 0 */
#define H100_MIG1 "MIG-00000001-0000-0000-0000-000000000001"     /* 2g.20gb, Device 1 */
#define H100_MIG2 "MIG-00000002-0000-0000-0000-000000000002"     /* 1g.10gb, Device 2 */
#define H100_MIG3 "MIG-00000003-0000-0000-0000-000000000003"     /* 1g.10gb, Device 3 */
#define H100B_UUID "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4"
#define L40S_UUID "GPU-00000000-0000-0000-0000-0000000000a0"     /* the L40S recording's masked UUID, made distinct */

static char *gpu_nodes0[] = { "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", NULL };
static char *gpu_nodes1[] = { "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", NULL };

static MigDeviceInfo h100_migs[] = {
        { 0, H100_MIG0, "3g.40gb", 2, 0, (char *[]) { "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22", NULL }, 40448 * MIB },
        { 1, H100_MIG1, "2g.20gb", 3, 0, (char *[]) { "/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap31", NULL }, 20096 * MIB },
        { 2, H100_MIG2, "1g.10gb", 9, 0, (char *[]) { "/dev/nvidia-caps/nvidia-cap84", "/dev/nvidia-caps/nvidia-cap85", NULL }, 9856 * MIB },
        { 3, H100_MIG3, "1g.10gb", 10, 0, (char *[]) { "/dev/nvidia-caps/nvidia-cap93", "/dev/nvidia-caps/nvidia-cap94", NULL }, 9856 * MIB },
};

static MigDeviceInfo h100b_migs[] = {
        { 0, "MIG-3f6f389f-b0cc-5e5c-8e32-eaa8fd067902", "1g.10gb", 7, 0, NULL, 9856 * MIB },
        { 1, "MIG-35f93699-4b53-5a19-8289-80b8418eec60", "1g.10gb", 8, 0, NULL, 9856 * MIB },
        { 2, "MIG-9d14fb21-4ae1-546f-a636-011582899c39", "1g.10gb", 9, 0, NULL, 9856 * MIB },
        { 3, "MIG-0f709664-740c-52b0-ae79-3e4c9ede6d3b", "1g.10gb", 10, 0, NULL, 9856 * MIB },
        { 4, "MIG-5d23f73a-d378-50ac-a6f5-3bf5184773bb", "1g.10gb", 11, 0, NULL, 9856 * MIB },
        { 5, "MIG-6cea15c7-8a56-578c-b965-0e73cb6dfc10", "1g.10gb", 12, 0, NULL, 9856 * MIB },
        { 6, "MIG-981c86e9-3607-57d7-9426-295347e4b925", "1g.10gb", 13, 0, NULL, 9856 * MIB },
};

static GpuInfo nv_gpu(const char *uuid, int32_t index, const char *product, uint64_t mib, int32_t numa,
                      const char *mig_mode) {
        return (GpuInfo) {
                .id = (char *) uuid, .vendor = "nvidia", .driver = "nvidia", .card_node = "", .render_node = "",
                .health_reason = "", .device_nodes = index == 1 ? gpu_nodes1 : gpu_nodes0, .numa_node = numa,
                .device_id = 0x2330, .healthy = true, .uuid = (char *) uuid, .index = index,
                .product = (char *) product, .memory_bytes = mib * MIB, .compute_mode = "Default",
                .mig_mode = (char *) mig_mode, .compute_capability = "9.0", .mps_state = "",
                .mps_pipe_directory = "",
        };
}

static GpuInfo h100_mig(void) {
        GpuInfo g = nv_gpu(H100_UUID, 0, "NVIDIA H100 80GB HBM3", 81559, 0, "Enabled");

        g.mig_devices = h100_migs;
        g.n_mig_devices = ELEMENTSOF(h100_migs);
        return g;
}

static GpuInfo h100_7x1g(void) {
        GpuInfo g = nv_gpu(H100B_UUID, 0, "NVIDIA H100 80GB HBM3", 81559, 0, "Enabled");

        g.mig_devices = h100b_migs;
        g.n_mig_devices = ELEMENTSOF(h100b_migs);
        return g;
}

static GpuInfo l40s(int32_t index) {
        GpuInfo g = nv_gpu(L40S_UUID, index, "NVIDIA L40S", 46068, 0, "");

        g.compute_capability = "8.9";
        return g;
}

/* A Config with the NVIDIA defaults of config.c. */
static Config defaults(void) {
        return (Config) {
                .nvidia_enabled = true,
                .nvidia_mig_strategy = MIG_STRATEGY_NONE,
                .nvidia_device_id_strategy = DEVICE_ID_STRATEGY_UUID,
                .nvidia_device_list_strategy = DEVICE_LIST_STRATEGY_ENVVAR,
                .nvidia_cdi_annotation_prefix = "cdi.k8s.io/",
                .nvidia_mps = { .fail_requests_greater_than_one = true },
        };
}

static Resources *setup(const Config *c, const GpuInfo *gpus, size_t n) {
        Resources *r = NULL;

        ck_assert_int_eq(resources_new(true, &r), 0);
        ck_assert_int_eq(resources_set_nvidia_options(r, c), 0);
        for (size_t i = 0; i < n; i++) {
                char path[64];

                snprintf(path, sizeof(path), "/io/kgpu/Probe1/gpu/nv%zu", i);
                ck_assert_int_ge(resources_update_gpu(r, path, &gpus[i], NULL), 0);
        }
        return r;
}

/* The device ids of resource, comma-joined, "!" before unhealthy ones. */
static char *ids_of(const Resources *r, const char *resource) {
        _cleanup_free_ Device *d = NULL;
        char *s = NULL;
        size_t n = 0, len = 1;

        if (resources_get_devices(r, resource, &d, &n) < 0)
                return strdup("(unknown)");
        for (size_t i = 0; i < n; i++)
                len += strlen(d[i].id) + 2;
        s = calloc(1, len);
        ck_assert_ptr_nonnull(s);
        for (size_t i = 0; i < n; i++) {
                if (i > 0)
                        strcat(s, ",");
                if (!d[i].healthy)
                        strcat(s, "!");
                strcat(s, d[i].id);
        }
        return s;
}

#define assert_ids(r, resource, expected) do {                          \
                _cleanup_free_ char *_s = ids_of(r, resource);          \
                ck_assert_str_eq(_s, expected);                         \
        } while (0)

static const char *env_get(char **l, const char *key) {
        for (size_t i = 0; l && l[i] && l[i + 1]; i += 2)
                if (streq(l[i], key))
                        return l[i + 1];
        return NULL;
}

/* One container's whole answer. */
typedef struct Answer {
        char **envs, **annotations, **cdi;
        DeviceSpec *specs;
        size_t n_specs;
        MountSpec *mounts;
        size_t n_mounts;
} Answer;

static void answer_done(Answer *a) {
        strv_free(a->envs);
        strv_free(a->annotations);
        strv_free(a->cdi);
        free(a->specs);
        free(a->mounts);
}

static int allocate(const Resources *r, const char *resource, char **ids, Answer *a, ResourceError *e) {
        char **requests[] = { ids };
        int k;

        *a = (Answer) {};
        k = resources_check_allocate(r, resource, requests, 1, e);
        if (k < 0)
                return k;
        ck_assert_int_eq(resources_allocate_container(r, resource, ids, &a->specs, &a->n_specs), 0);
        ck_assert_int_eq(resources_allocate_extras(r, resource, ids, &a->mounts, &a->n_mounts, &a->cdi), 0);
        ck_assert_int_eq(resources_allocate_envs(r, resource, ids, &a->envs, &a->annotations), 0);
        return 0;
}

/* ---- MIG strategies x deviceIDStrategy ---- */

START_TEST(test_none_uuid_l40s) {
        Config c = defaults();
        GpuInfo g[] = { l40s(0) };
        _cleanup_(resources_freep) Resources *r = setup(&c, g, 1);
        _cleanup_(answer_done) Answer a = {};

        ck_assert(resources_known(r, "nvidia.com/gpu"));
        assert_ids(r, "nvidia.com/gpu", L40S_UUID);
        ck_assert_ptr_null(resources_nvidia_problem(r));
        ck_assert_int_eq(allocate(r, "nvidia.com/gpu", STRV(L40S_UUID), &a, NULL), 0);
        /* envvar: NVIDIA_VISIBLE_DEVICES only; no specs without passDeviceSpecs. */
        ck_assert_uint_eq(strv_length(a.envs), 2);
        ck_assert_str_eq(env_get(a.envs, "NVIDIA_VISIBLE_DEVICES"), L40S_UUID);
        ck_assert_uint_eq(a.n_specs, 0);
        ck_assert_uint_eq(a.n_mounts, 0);
        ck_assert_uint_eq(strv_length(a.cdi), 0);
        ck_assert_uint_eq(strv_length(a.annotations), 0);
        /* Intel resources do not appear; NVIDIA has no per-GPU container limit. */
        ck_assert(!resources_known(r, RESOURCE_INTEL_I915));
        ck_assert_uint_eq(resources_share_limit(r, "nvidia.com/gpu"), 0);
}
END_TEST

START_TEST(test_none_index_volume_mounts_specs) {
        Config c = defaults();
        GpuInfo g[] = { h100_mig(), l40s(1) };
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_(answer_done) Answer a = {};

        c.nvidia_device_id_strategy = DEVICE_ID_STRATEGY_INDEX;
        c.nvidia_device_list_strategy = DEVICE_LIST_STRATEGY_ENVVAR | DEVICE_LIST_STRATEGY_VOLUME_MOUNTS;
        c.nvidia_pass_device_specs = true;
        g[1].device_nodes = gpu_nodes1;
        r = setup(&c, g, 2);
        /* none: the MIG-enabled H100 is one whole nvidia.com/gpu; ids stay UUIDs. */
        assert_ids(r, "nvidia.com/gpu", H100_UUID "," L40S_UUID);
        ck_assert(!resources_known(r, "nvidia.com/mig-1g.10gb"));

        ck_assert_int_eq(allocate(r, "nvidia.com/gpu", STRV(L40S_UUID, H100_UUID), &a, NULL), 0);
        /* volume-mounts wins over envvar for the variable, as upstream. */
        ck_assert_str_eq(env_get(a.envs, "NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
        ck_assert_uint_eq(a.n_mounts, 2);
        ck_assert_str_eq(a.mounts[0].container_path, "/var/run/nvidia-container-devices/1");
        ck_assert_str_eq(a.mounts[0].host_path, "/dev/null");
        ck_assert_str_eq(a.mounts[1].container_path, "/var/run/nvidia-container-devices/0");
        ck_assert(!a.mounts[0].read_only);
        /* passDeviceSpecs: each node once, rw, host = container path. */
        ck_assert_uint_eq(a.n_specs, 5);
        ck_assert_str_eq(a.specs[0].host_path, "/dev/nvidia1");
        ck_assert_str_eq(a.specs[1].host_path, "/dev/nvidiactl");
        ck_assert_str_eq(a.specs[2].host_path, "/dev/nvidia-uvm");
        ck_assert_str_eq(a.specs[3].host_path, "/dev/nvidia-uvm-tools");
        ck_assert_str_eq(a.specs[4].host_path, "/dev/nvidia0");
        ck_assert_str_eq(a.specs[4].container_path, "/dev/nvidia0");
        ck_assert_str_eq(a.specs[4].permissions, "rw");
}
END_TEST

START_TEST(test_single_inconsistent) {
        Config c = defaults();
        GpuInfo g[] = { h100_mig() };
        _cleanup_(resources_freep) Resources *r = NULL;
        const char *p;

        c.nvidia_mig_strategy = MIG_STRATEGY_SINGLE;
        r = setup(&c, g, 1);
        /* Four MIG devices of three profiles: nvidia.com/gpu registered with no device
         * (as on the layout below, whichever GPU came first), and the reason. */
        ck_assert(resources_known(r, "nvidia.com/gpu"));
        assert_ids(r, "nvidia.com/gpu", "");
        p = resources_nvidia_problem(r);
        ck_assert_ptr_nonnull(p);
        ck_assert_ptr_nonnull(strstr(p, "migStrategy single"));
        ck_assert_ptr_nonnull(strstr(p, "3g.40gb"));
        ck_assert_ptr_nonnull(strstr(p, "2g.20gb"));
}
END_TEST

START_TEST(test_single_mig_on_and_off) {
        Config c = defaults();
        GpuInfo g[] = { h100_7x1g(), l40s(1) };
        _cleanup_(resources_freep) Resources *r = NULL;

        c.nvidia_mig_strategy = MIG_STRATEGY_SINGLE;
        r = setup(&c, g, 2);
        /* Registered, with no device since the L40S came. */
        assert_ids(r, "nvidia.com/gpu", "");
        ck_assert_ptr_nonnull(strstr(resources_nvidia_problem(r), "has MIG enabled and GPU " L40S_UUID " not"));
}
END_TEST

START_TEST(test_single_7x1g_index) {
        Config c = defaults();
        GpuInfo g[] = { h100_7x1g() };
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_(answer_done) Answer a = {};

        c.nvidia_mig_strategy = MIG_STRATEGY_SINGLE;
        c.nvidia_device_id_strategy = DEVICE_ID_STRATEGY_INDEX;
        r = setup(&c, g, 1);
        assert_ids(r, "nvidia.com/gpu",
                   "MIG-0f709664-740c-52b0-ae79-3e4c9ede6d3b,MIG-35f93699-4b53-5a19-8289-80b8418eec60,"
                   "MIG-3f6f389f-b0cc-5e5c-8e32-eaa8fd067902,MIG-5d23f73a-d378-50ac-a6f5-3bf5184773bb,"
                   "MIG-6cea15c7-8a56-578c-b965-0e73cb6dfc10,MIG-981c86e9-3607-57d7-9426-295347e4b925,"
                   "MIG-9d14fb21-4ae1-546f-a636-011582899c39");
        ck_assert_ptr_null(resources_nvidia_problem(r));
        ck_assert_int_eq(allocate(r, "nvidia.com/gpu",
                                  STRV("MIG-981c86e9-3607-57d7-9426-295347e4b925",
                                       "MIG-3f6f389f-b0cc-5e5c-8e32-eaa8fd067902"), &a, NULL), 0);
        ck_assert_str_eq(env_get(a.envs, "NVIDIA_VISIBLE_DEVICES"), "0:6,0:0");
}
END_TEST

START_TEST(test_single_all_off_is_none) {
        Config c = defaults();
        GpuInfo g[] = { l40s(0) };
        _cleanup_(resources_freep) Resources *r = NULL;

        c.nvidia_mig_strategy = MIG_STRATEGY_SINGLE;
        r = setup(&c, g, 1);
        assert_ids(r, "nvidia.com/gpu", L40S_UUID);
}
END_TEST

START_TEST(test_mixed_index_specs) {
        Config c = defaults();
        GpuInfo g[] = { h100_mig(), l40s(1) };
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_(answer_done) Answer a = {};

        c.nvidia_mig_strategy = MIG_STRATEGY_MIXED;
        c.nvidia_device_id_strategy = DEVICE_ID_STRATEGY_INDEX;
        c.nvidia_pass_device_specs = true;
        r = setup(&c, g, 2);
        assert_ids(r, "nvidia.com/gpu", L40S_UUID);
        assert_ids(r, "nvidia.com/mig-3g.40gb", H100_MIG0);
        assert_ids(r, "nvidia.com/mig-2g.20gb", H100_MIG1);
        assert_ids(r, "nvidia.com/mig-1g.10gb", H100_MIG2 "," H100_MIG3);

        ck_assert_int_eq(allocate(r, "nvidia.com/mig-1g.10gb", STRV(H100_MIG3), &a, NULL), 0);
        ck_assert_str_eq(env_get(a.envs, "NVIDIA_VISIBLE_DEVICES"), "0:3");
        /* The parent's nodes, then the MIG device's capability nodes. */
        ck_assert_uint_eq(a.n_specs, 6);
        ck_assert_str_eq(a.specs[0].host_path, "/dev/nvidia0");
        ck_assert_str_eq(a.specs[3].host_path, "/dev/nvidia-uvm-tools");
        ck_assert_str_eq(a.specs[4].host_path, "/dev/nvidia-caps/nvidia-cap93");
        ck_assert_str_eq(a.specs[5].host_path, "/dev/nvidia-caps/nvidia-cap94");
}
END_TEST

START_TEST(test_cdi_strategies) {
        Config c = defaults();
        GpuInfo g[] = { h100_mig() };
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_(answer_done) Answer a = {};
        _cleanup_(answer_done) Answer b = {};
        const char *key;

        c.nvidia_mig_strategy = MIG_STRATEGY_MIXED;
        c.nvidia_device_list_strategy = DEVICE_LIST_STRATEGY_CDI_ANNOTATIONS | DEVICE_LIST_STRATEGY_CDI_CRI;
        c.nvidia_pass_device_specs = true;
        c.nvidia_cdi_annotation_prefix = "nvidia.cdi.k8s.io/";
        r = setup(&c, g, 1);
        ck_assert_int_eq(allocate(r, "nvidia.com/mig-1g.10gb", STRV(H100_MIG2, H100_MIG3), &a, NULL), 0);
        /* Only CDI: no NVIDIA_VISIBLE_DEVICES, no device specs (upstream). */
        ck_assert_uint_eq(strv_length(a.envs), 0);
        ck_assert_uint_eq(a.n_specs, 0);
        ck_assert_uint_eq(strv_length(a.cdi), 2);
        ck_assert_str_eq(a.cdi[0], "nvidia.com/gpu=" H100_MIG2);
        ck_assert_str_eq(a.cdi[1], "nvidia.com/gpu=" H100_MIG3);
        ck_assert_uint_eq(strv_length(a.annotations), 2);
        key = a.annotations[0];
        ck_assert_ptr_nonnull(startswith(key, "nvidia.cdi.k8s.io/nvidia-device-plugin_"));
        ck_assert_uint_eq(strlen(startswith(key, "nvidia.cdi.k8s.io/nvidia-device-plugin_")), 16);
        ck_assert_str_eq(a.annotations[1], "nvidia.com/gpu=" H100_MIG2 ",nvidia.com/gpu=" H100_MIG3);

        /* Another container: another key. CDI + envvar: both. */
        ck_assert_int_eq(allocate(r, "nvidia.com/mig-3g.40gb", STRV(H100_MIG0), &b, NULL), 0);
        ck_assert_str_ne(b.annotations[0], key);
}
END_TEST

START_TEST(test_cdi_and_envvar_index) {
        Config c = defaults();
        GpuInfo g[] = { l40s(0) };
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_(answer_done) Answer a = {};

        c.nvidia_device_id_strategy = DEVICE_ID_STRATEGY_INDEX;
        c.nvidia_device_list_strategy = DEVICE_LIST_STRATEGY_ENVVAR | DEVICE_LIST_STRATEGY_CDI_CRI;
        c.nvidia_pass_device_specs = true;
        r = setup(&c, g, 1);
        ck_assert_int_eq(allocate(r, "nvidia.com/gpu", STRV(L40S_UUID), &a, NULL), 0);
        ck_assert_str_eq(env_get(a.envs, "NVIDIA_VISIBLE_DEVICES"), "0");
        ck_assert_uint_eq(strv_length(a.cdi), 1);
        ck_assert_str_eq(a.cdi[0], "nvidia.com/gpu=0");
        ck_assert_uint_eq(a.n_specs, 4);
        ck_assert_uint_eq(strv_length(a.annotations), 0);
}
END_TEST

/* ---- time-slicing ---- */

START_TEST(test_time_slicing_replicas) {
        Config c = defaults();
        GpuInfo g[] = { l40s(0) };
        ConfigSharedResource ts[] = { { .name = "nvidia.com/gpu", .replicas = 4 } };
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_(answer_done) Answer a = {};
        ResourceError e = {};

        c.nvidia_time_slicing = (ConfigSharing) { .resources = ts, .n_resources = 1 };
        r = setup(&c, g, 1);
        assert_ids(r, "nvidia.com/gpu", L40S_UUID "::0," L40S_UUID "::1," L40S_UUID "::2," L40S_UUID "::3");
        ck_assert_int_eq(allocate(r, "nvidia.com/gpu", STRV(L40S_UUID "::2"), &a, NULL), 0);
        ck_assert_str_eq(env_get(a.envs, "NVIDIA_VISIBLE_DEVICES"), L40S_UUID);
        answer_done(&a);
        /* Two replicas of one GPU: the GPU once. */
        ck_assert_int_eq(allocate(r, "nvidia.com/gpu", STRV(L40S_UUID "::1", L40S_UUID "::3"), &a, &e), 0);
        ck_assert_str_eq(env_get(a.envs, "NVIDIA_VISIBLE_DEVICES"), L40S_UUID);

        /* failRequestsGreaterThanOne: refused, naming resource, count and limit. */
        ts[0].replicas = 4;
        c.nvidia_time_slicing.fail_requests_greater_than_one = true;
        ck_assert_int_eq(resources_set_nvidia_options(r, &c), 0);
        ck_assert_int_eq(resources_check_allocate(r, "nvidia.com/gpu",
                                                  (char **[]) { STRV(L40S_UUID "::1", L40S_UUID "::3") }, 1, &e),
                         -EINVAL);
        ck_assert_str_eq(e.name, KGPU_ERROR_INVALID_ARGS);
        ck_assert_str_eq(e.message, "request for 'nvidia.com/gpu: 2' too large: maximum request size for shared resources is 1");
        ck_assert_int_eq(resources_check_allocate(r, "nvidia.com/gpu", (char **[]) { STRV(L40S_UUID "::1") }, 1, &e), 0);
}
END_TEST

START_TEST(test_time_slicing_rename_per_gpu) {
        Config c = defaults();
        GpuInfo g[] = { h100_mig(), l40s(1) };
        /* Different replica counts per GPU: by index and by UUID. */
        ConfigSharedResource ts[] = {
                { .name = "nvidia.com/gpu", .replicas = 2, .devices = STRV("0") },
                { .name = "nvidia.com/gpu", .replicas = 3, .devices = STRV(L40S_UUID) },
        };
        _cleanup_(resources_freep) Resources *r = NULL;

        g[0].mig_mode = "Disabled";
        c.nvidia_time_slicing = (ConfigSharing) { .rename_by_default = true, .resources = ts, .n_resources = 2 };
        r = setup(&c, g, 2);
        ck_assert(!resources_known(r, "nvidia.com/gpu"));
        assert_ids(r, "nvidia.com/gpu.shared",
                   H100_UUID "::0," H100_UUID "::1," L40S_UUID "::0," L40S_UUID "::1," L40S_UUID "::2");

        /* Only GPU 0 listed and an explicit rename: the L40S stays a plain nvidia.com/gpu. */
        ts[0].rename = "nvidia.com/gpu-ts";
        c.nvidia_time_slicing.n_resources = 1;
        c.nvidia_time_slicing.rename_by_default = false;
        ck_assert_int_eq(resources_set_nvidia_options(r, &c), 0);
        assert_ids(r, "nvidia.com/gpu-ts", H100_UUID "::0," H100_UUID "::1");
        assert_ids(r, "nvidia.com/gpu", L40S_UUID);
        /* Still known, now empty: advertised until exit. */
        assert_ids(r, "nvidia.com/gpu.shared", "");
}
END_TEST

START_TEST(test_time_slicing_mig_devices) {
        Config c = defaults();
        GpuInfo g[] = { h100_mig() };
        ConfigSharedResource ts[] = {
                { .name = "nvidia.com/mig-1g.10gb", .replicas = 2, .devices = STRV(H100_MIG3) },
                { .name = "nvidia.com/mig-3g.40gb", .replicas = 2, .devices = STRV("0:0") },
        };
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_(answer_done) Answer a = {};

        c.nvidia_mig_strategy = MIG_STRATEGY_MIXED;
        c.nvidia_device_id_strategy = DEVICE_ID_STRATEGY_INDEX;
        c.nvidia_time_slicing = (ConfigSharing) { .resources = ts, .n_resources = 2 };
        r = setup(&c, g, 1);
        assert_ids(r, "nvidia.com/mig-1g.10gb", H100_MIG2 "," H100_MIG3 "::0," H100_MIG3 "::1");
        assert_ids(r, "nvidia.com/mig-3g.40gb", H100_MIG0 "::0," H100_MIG0 "::1");
        assert_ids(r, "nvidia.com/mig-2g.20gb", H100_MIG1);
        ck_assert_int_eq(allocate(r, "nvidia.com/mig-1g.10gb", STRV(H100_MIG3 "::1"), &a, NULL), 0);
        ck_assert_str_eq(env_get(a.envs, "NVIDIA_VISIBLE_DEVICES"), "0:3");
}
END_TEST

START_TEST(test_devices_references) {
        Config c = defaults();
        GpuInfo g[] = { h100_mig(), l40s(1) };
        ConfigSharedResource ts[] = {
                /* The pre-R470 MIG UUID form names MIG device GI 10 / CI 0 (Device 3). */
                { .name = "nvidia.com/mig-1g.10gb", .replicas = 2, .devices = STRV("MIG-" H100_UUID "/10/0") },
                /* Leading zeros in a MIG index. */
                { .name = "nvidia.com/mig-3g.40gb", .replicas = 2, .devices = STRV("00:00") },
                /* A GPU index names the MIG devices on that GPU. */
                { .name = "nvidia.com/mig-2g.20gb", .replicas = 3, .devices = STRV("0") },
                /* Neither index 7 nor an unknown UUID: the L40S stays unshared. */
                { .name = "nvidia.com/gpu", .replicas = 2, .devices = STRV("7", "GPU-unknown", "1:0") },
        };
        _cleanup_(resources_freep) Resources *r = NULL;

        c.nvidia_mig_strategy = MIG_STRATEGY_MIXED;
        c.nvidia_time_slicing = (ConfigSharing) { .resources = ts, .n_resources = ELEMENTSOF(ts) };
        r = setup(&c, g, 2);
        assert_ids(r, "nvidia.com/mig-1g.10gb", H100_MIG2 "," H100_MIG3 "::0," H100_MIG3 "::1");
        assert_ids(r, "nvidia.com/mig-3g.40gb", H100_MIG0 "::0," H100_MIG0 "::1");
        assert_ids(r, "nvidia.com/mig-2g.20gb", H100_MIG1 "::0," H100_MIG1 "::1," H100_MIG1 "::2");
        assert_ids(r, "nvidia.com/gpu", L40S_UUID);
}
END_TEST

/* ---- the whole matrix: migStrategy x sharing x deviceIDStrategy ---- */

#define B7(i) "MIG-" i
typedef struct MatrixCase {
        ConfigMigStrategy mig;
        int sharing;                    /* 0 none, 1 time-slicing, 2 MPS */
        const char *share_name;
        uint64_t memory;                /* MPS memoryGB */
        ConfigDeviceIdStrategy id;
        bool with_l40s;
        const char *resource;
        size_t n_ids;                   /* devices of resource */
        const char *allocate;           /* one id */
        const char *visible;            /* NVIDIA_VISIBLE_DEVICES */
        const char *mps_mem;            /* CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, NULL: none */
        const char *mps_pct;
        const char *problem;            /* substring, NULL: none */
} MatrixCase;

static const MatrixCase matrix[] = {
        /* none: whole GPUs (the H100 in MIG mode too). */
        { MIG_STRATEGY_NONE, 0, NULL, 0, DEVICE_ID_STRATEGY_UUID, true, "nvidia.com/gpu", 2,
          H100B_UUID, H100B_UUID, NULL, NULL, NULL },
        { MIG_STRATEGY_NONE, 0, NULL, 0, DEVICE_ID_STRATEGY_INDEX, true, "nvidia.com/gpu", 2,
          L40S_UUID, "1", NULL, NULL, NULL },
        { MIG_STRATEGY_NONE, 1, "nvidia.com/gpu", 0, DEVICE_ID_STRATEGY_INDEX, true, "nvidia.com/gpu", 4,
          H100B_UUID "::1", "0", NULL, NULL, NULL },
        { MIG_STRATEGY_NONE, 1, "nvidia.com/gpu", 0, DEVICE_ID_STRATEGY_UUID, true, "nvidia.com/gpu", 4,
          L40S_UUID "::0", L40S_UUID, NULL, NULL, NULL },
        /* MPS: the L40S is sliced (46068 MiB / 2 = 23034 MiB, 50 %), the H100 in MIG mode not. */
        { MIG_STRATEGY_NONE, 2, "nvidia.com/gpu", 0, DEVICE_ID_STRATEGY_UUID, true, "nvidia.com/gpu", 3,
          L40S_UUID "::1", L40S_UUID, "0=23034M", "50", "MPS is not supported with MIG" },
        { MIG_STRATEGY_NONE, 2, "nvidia.com/gpu", 4, DEVICE_ID_STRATEGY_INDEX, true, "nvidia.com/gpu", 3,
          L40S_UUID "::0", "1", "0=4096M", "8", "MPS is not supported with MIG" },
        /* single: the 7 MIG devices are nvidia.com/gpu. */
        { MIG_STRATEGY_SINGLE, 0, NULL, 0, DEVICE_ID_STRATEGY_UUID, false, "nvidia.com/gpu", 7,
          B7("0f709664-740c-52b0-ae79-3e4c9ede6d3b"), B7("0f709664-740c-52b0-ae79-3e4c9ede6d3b"), NULL, NULL, NULL },
        { MIG_STRATEGY_SINGLE, 0, NULL, 0, DEVICE_ID_STRATEGY_INDEX, false, "nvidia.com/gpu", 7,
          B7("0f709664-740c-52b0-ae79-3e4c9ede6d3b"), "0:3", NULL, NULL, NULL },
        { MIG_STRATEGY_SINGLE, 1, "nvidia.com/gpu", 0, DEVICE_ID_STRATEGY_UUID, false, "nvidia.com/gpu", 14,
          B7("3f6f389f-b0cc-5e5c-8e32-eaa8fd067902") "::1", B7("3f6f389f-b0cc-5e5c-8e32-eaa8fd067902"), NULL, NULL, NULL },
        { MIG_STRATEGY_SINGLE, 1, "nvidia.com/gpu", 0, DEVICE_ID_STRATEGY_INDEX, false, "nvidia.com/gpu", 14,
          B7("981c86e9-3607-57d7-9426-295347e4b925") "::0", "0:6", NULL, NULL, NULL },
        { MIG_STRATEGY_SINGLE, 2, "nvidia.com/gpu", 0, DEVICE_ID_STRATEGY_UUID, false, "nvidia.com/gpu", 7,
          B7("981c86e9-3607-57d7-9426-295347e4b925"), B7("981c86e9-3607-57d7-9426-295347e4b925"), NULL, NULL,
          "MPS is not supported on MIG device" },
        /* single with the L40S beside: nothing. */
        { MIG_STRATEGY_SINGLE, 0, NULL, 0, DEVICE_ID_STRATEGY_UUID, true, "nvidia.com/gpu", 0,
          NULL, NULL, NULL, NULL, "migStrategy single" },
        /* mixed: the L40S is nvidia.com/gpu, the MIG devices nvidia.com/mig-1g.10gb. */
        { MIG_STRATEGY_MIXED, 0, NULL, 0, DEVICE_ID_STRATEGY_UUID, true, "nvidia.com/mig-1g.10gb", 7,
          B7("5d23f73a-d378-50ac-a6f5-3bf5184773bb"), B7("5d23f73a-d378-50ac-a6f5-3bf5184773bb"), NULL, NULL, NULL },
        { MIG_STRATEGY_MIXED, 0, NULL, 0, DEVICE_ID_STRATEGY_INDEX, true, "nvidia.com/gpu", 1,
          L40S_UUID, "1", NULL, NULL, NULL },
        { MIG_STRATEGY_MIXED, 1, "nvidia.com/mig-1g.10gb", 0, DEVICE_ID_STRATEGY_INDEX, true, "nvidia.com/mig-1g.10gb", 14,
          B7("5d23f73a-d378-50ac-a6f5-3bf5184773bb") "::1", "0:4", NULL, NULL, NULL },
        { MIG_STRATEGY_MIXED, 1, "nvidia.com/gpu", 0, DEVICE_ID_STRATEGY_UUID, true, "nvidia.com/gpu", 2,
          L40S_UUID "::1", L40S_UUID, NULL, NULL, NULL },
        { MIG_STRATEGY_MIXED, 2, "nvidia.com/gpu", 4, DEVICE_ID_STRATEGY_UUID, true, "nvidia.com/gpu", 2,
          L40S_UUID "::1", L40S_UUID, "0=4096M", "8", NULL },
        { MIG_STRATEGY_MIXED, 2, "nvidia.com/gpu", 0, DEVICE_ID_STRATEGY_INDEX, true, "nvidia.com/gpu", 2,
          L40S_UUID "::0", "1", "0=23034M", "50", NULL },
};

START_TEST(test_matrix) {
        const MatrixCase *m = &matrix[_i];
        Config c = defaults();
        GpuInfo g[] = { h100_7x1g(), l40s(1) };
        ConfigSharedResource entry = { .name = (char *) m->share_name, .replicas = 2, .memory_bytes = m->memory * GIB };
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_(answer_done) Answer a = {};
        _cleanup_free_ Device *d = NULL;
        size_t n;

        for (size_t i = 0; i < ELEMENTSOF(g); i++) {
                g[i].mps_state = "running";
                g[i].mps_pipe_directory = "/run/kgpu/mps/x/pipe";
        }
        c.nvidia_mig_strategy = m->mig;
        c.nvidia_device_id_strategy = m->id;
        if (m->sharing == 1)
                c.nvidia_time_slicing = (ConfigSharing) { .resources = &entry, .n_resources = 1 };
        else if (m->sharing == 2)
                c.nvidia_mps = (ConfigSharing) { .resources = &entry, .n_resources = 1 };
        r = setup(&c, g, m->with_l40s ? 2 : 1);

        if (m->n_ids == 0)
                ck_assert(resources_get_devices(r, m->resource, &d, &n) < 0 || n == 0);
        else {
                ck_assert_int_eq(resources_get_devices(r, m->resource, &d, &n), 0);
                ck_assert_uint_eq(n, m->n_ids);
        }
        if (m->problem)
                ck_assert_ptr_nonnull(strstr(resources_nvidia_problem(r) ?: "", m->problem));
        else
                ck_assert_ptr_null(resources_nvidia_problem(r));
        if (!m->allocate)
                return;
        ck_assert_int_eq(allocate(r, m->resource, (char *[]) { (char *) m->allocate, NULL }, &a, NULL), 0);
        ck_assert_str_eq(env_get(a.envs, "NVIDIA_VISIBLE_DEVICES"), m->visible);
        if (m->mps_mem) {
                ck_assert_str_eq(env_get(a.envs, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), m->mps_mem);
                ck_assert_str_eq(env_get(a.envs, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), m->mps_pct);
                ck_assert_str_eq(env_get(a.envs, "CUDA_MPS_PIPE_DIRECTORY"), "/mps/nvidia.com/gpu/pipe");
        } else
                ck_assert_ptr_null(env_get(a.envs, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"));
}
END_TEST

/* ---- MPS ---- */

START_TEST(test_mps_2_2_4) {
        Config c = defaults();
        GpuInfo g[] = { nv_gpu(H100_UUID, 0, "NVIDIA H100 80GB HBM3", 81559, 0, "Disabled") };
        ConfigSharedResource mps[] = {
                { .name = "nvidia.com/gpu", .rename = "nvidia.com/gpu-2gb", .replicas = 2, .memory_bytes = 2 * GIB },
                { .name = "nvidia.com/gpu", .rename = "nvidia.com/gpu-4gb", .replicas = 1, .memory_bytes = 4 * GIB },
        };
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_free_ NvidiaMpsRequest *q = NULL;
        _cleanup_(answer_done) Answer a = {};
        _cleanup_(answer_done) Answer b = {};
        _cleanup_strv_free_ char **changed = NULL;
        ResourceError e = {};
        size_t n;

        c.nvidia_mps = (ConfigSharing) { .fail_requests_greater_than_one = true, .resources = mps, .n_resources = 2 };
        r = setup(&c, g, 1);
        /* Numbering continues across the entries on one GPU. Unhealthy: MPS not running. */
        assert_ids(r, "nvidia.com/gpu-2gb", "!" H100_UUID "::0,!" H100_UUID "::1");
        assert_ids(r, "nvidia.com/gpu-4gb", "!" H100_UUID "::2");
        ck_assert(!resources_known(r, "nvidia.com/gpu"));
        ck_assert_int_eq(resources_check_allocate(r, "nvidia.com/gpu-4gb", (char **[]) { STRV(H100_UUID "::2") }, 1, &e),
                         -EIO);

        /* The probe: SetMps with the largest slice's limits: 4 GiB, floor(100*4096/81559) = 5 %
         * (a client's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE only narrows the daemon's: with the
         * 2 GB slice's 2 % there, the 4 GB slice would get 2 % too). */
        ck_assert_int_eq(resources_nvidia_mps_requests(r, &q, &n), 0);
        ck_assert_uint_eq(n, 1);
        ck_assert_str_eq(q[0].gpu_id, H100_UUID);
        ck_assert(q[0].enabled);
        ck_assert_uint_eq(q[0].pinned_memory_bytes, 4 * GIB);
        ck_assert_uint_eq(q[0].active_thread_percentage, 5);
        const uint32_t daemon_pct = q[0].active_thread_percentage;
        q = nvidia_mps_requests_free(q, n);

        /* MPS running: healthy, and the change is reported. */
        g[0].mps_state = "running";
        g[0].mps_pipe_directory = "/run/kgpu/mps/" H100_UUID "/pipe";
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/nv0", &g[0], &changed), 0);
        ck_assert(strv_contains(changed, "nvidia.com/gpu-2gb"));
        ck_assert(strv_contains(changed, "nvidia.com/gpu-4gb"));
        assert_ids(r, "nvidia.com/gpu-4gb", H100_UUID "::2");

        /* Each answer carries its own slice's limits: 4 GiB = 4096M, floor(100*4096/81559) = 5. */
        ck_assert_int_eq(allocate(r, "nvidia.com/gpu-4gb", STRV(H100_UUID "::2"), &a, NULL), 0);
        ck_assert_str_eq(env_get(a.envs, "CUDA_MPS_PIPE_DIRECTORY"), "/mps/nvidia.com/gpu-4gb/pipe");
        ck_assert_str_eq(env_get(a.envs, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=4096M");
        ck_assert_str_eq(env_get(a.envs, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "5");
        ck_assert_str_eq(env_get(a.envs, "NVIDIA_VISIBLE_DEVICES"), H100_UUID);
        ck_assert_uint_eq(a.n_mounts, 2);
        ck_assert_str_eq(a.mounts[0].container_path, "/mps/nvidia.com/gpu-4gb/pipe");
        ck_assert_str_eq(a.mounts[0].host_path, "/run/kgpu/mps/" H100_UUID "/pipe");
        /* Pods only connect to the daemon's sockets there: nothing of theirs goes in. */
        ck_assert(a.mounts[0].read_only);
        ck_assert_str_eq(a.mounts[1].container_path, "/dev/shm");
        ck_assert_str_eq(a.mounts[1].host_path, "/dev/shm");
        ck_assert(!a.mounts[1].read_only);

        ck_assert_int_eq(allocate(r, "nvidia.com/gpu-2gb", STRV(H100_UUID "::1"), &b, NULL), 0);
        ck_assert_str_eq(env_get(b.envs, "CUDA_MPS_PIPE_DIRECTORY"), "/mps/nvidia.com/gpu-2gb/pipe");
        ck_assert_str_eq(env_get(b.envs, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=2048M");
        ck_assert_str_eq(env_get(b.envs, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "2");
        /* Every slice's own percentage narrows the daemon's default, none exceeds it. */
        ck_assert_uint_le(strtoul(env_get(a.envs, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), NULL, 10), daemon_pct);
        ck_assert_uint_le(strtoul(env_get(b.envs, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), NULL, 10), daemon_pct);

        /* failRequestsGreaterThanOne (default true for MPS). */
        ck_assert_int_eq(resources_check_allocate(r, "nvidia.com/gpu-2gb",
                                                  (char **[]) { STRV(H100_UUID "::0", H100_UUID "::1") }, 1, &e),
                         -EINVAL);
        ck_assert_str_eq(e.message, "request for 'nvidia.com/gpu-2gb: 2' too large: maximum request size for shared resources is 1");

        /* A lost GPU takes every slice with it. */
        g[0].healthy = false;
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/nv0", &g[0], NULL), 0);
        assert_ids(r, "nvidia.com/gpu-2gb", "!" H100_UUID "::0,!" H100_UUID "::1");
        assert_ids(r, "nvidia.com/gpu-4gb", "!" H100_UUID "::2");
}
END_TEST

START_TEST(test_mps_without_memory_and_stop) {
        Config c = defaults();
        GpuInfo g[] = { nv_gpu(H100_UUID, 0, "NVIDIA H100 80GB HBM3", 81559, 0, "Disabled"), l40s(1) };
        ConfigSharedResource mps[] = { { .name = "nvidia.com/gpu", .replicas = 4, .devices = STRV("0") } };
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_free_ NvidiaMpsRequest *q = NULL;
        _cleanup_(answer_done) Answer a = {};
        size_t n;

        g[0].mps_state = "running";
        g[0].mps_pipe_directory = "/run/kgpu/mps/" H100_UUID "/pipe";
        g[1].mps_state = "running";     /* left over: the config has no MPS for it */
        c.nvidia_mps = (ConfigSharing) { .rename_by_default = true, .resources = mps, .n_resources = 1 };
        r = setup(&c, g, 2);
        assert_ids(r, "nvidia.com/gpu.shared", H100_UUID "::0," H100_UUID "::1," H100_UUID "::2," H100_UUID "::3");
        assert_ids(r, "nvidia.com/gpu", L40S_UUID);
        ck_assert_int_eq(allocate(r, "nvidia.com/gpu.shared", STRV(H100_UUID "::3"), &a, NULL), 0);
        /* GPU memory / 4 = 20389.75 MiB -> 20389M; 100 / 4 = 25 %. */
        ck_assert_str_eq(env_get(a.envs, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=20389M");
        ck_assert_str_eq(env_get(a.envs, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");

        ck_assert_int_eq(resources_nvidia_mps_requests(r, &q, &n), 0);
        ck_assert_uint_eq(n, 2);
        ck_assert_str_eq(q[0].gpu_id, H100_UUID);
        ck_assert(q[0].enabled);
        ck_assert_uint_eq(q[0].pinned_memory_bytes, 81559 * MIB / 4);
        ck_assert_uint_eq(q[0].active_thread_percentage, 25);
        ck_assert_str_eq(q[1].gpu_id, L40S_UUID);
        ck_assert(!q[1].enabled);
        q = nvidia_mps_requests_free(q, n);

        /* MPS removed from the config: both GPUs get SetMps(false). */
        c.nvidia_mps.n_resources = 0;
        ck_assert_int_eq(resources_set_nvidia_options(r, &c), 0);
        ck_assert_int_eq(resources_nvidia_mps_requests(r, &q, &n), 0);
        ck_assert_uint_eq(n, 2);
        ck_assert(!q[0].enabled && !q[1].enabled);
        q = nvidia_mps_requests_free(q, n);
        assert_ids(r, "nvidia.com/gpu", H100_UUID "," L40S_UUID);
}
END_TEST

START_TEST(test_mps_refused_layouts) {
        Config c = defaults();
        GpuInfo g[] = { h100_mig() };
        ConfigSharedResource mps[] = { { .name = "nvidia.com/gpu", .replicas = 3, .memory_bytes = 40 * GIB } };
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_free_ NvidiaMpsRequest *q = NULL;
        size_t n;

        /* 3 x 40 GiB on 81559 MiB: no slices, the GPU stays whole, the reason is given. */
        g[0].mig_mode = "Disabled";
        c.nvidia_mps = (ConfigSharing) { .resources = mps, .n_resources = 1 };
        r = setup(&c, g, 1);
        assert_ids(r, "nvidia.com/gpu", H100_UUID);
        ck_assert_ptr_nonnull(strstr(resources_nvidia_problem(r), "MPS slices need more than"));
        ck_assert_int_eq(resources_nvidia_mps_requests(r, &q, &n), 0);
        ck_assert_uint_eq(n, 0);
        q = nvidia_mps_requests_free(q, n);

        /* A GPU in MIG mode under migStrategy none: served whole, no MPS (the probe
         * refuses SetMps on it). */
        resources_free(TAKE_PTR(r));
        g[0] = h100_mig();
        mps[0].memory_bytes = 0;
        r = setup(&c, g, 1);
        assert_ids(r, "nvidia.com/gpu", H100_UUID);
        ck_assert_ptr_nonnull(strstr(resources_nvidia_problem(r), "MPS is not supported with MIG"));
        ck_assert_int_eq(resources_nvidia_mps_requests(r, &q, &n), 0);
        ck_assert_uint_eq(n, 0);
        q = nvidia_mps_requests_free(q, n);

        /* MPS on MIG devices (single strategy): not supported, left unshared. */
        resources_free(TAKE_PTR(r));
        g[0] = h100_7x1g();
        mps[0].memory_bytes = 0;
        c.nvidia_mig_strategy = MIG_STRATEGY_SINGLE;
        r = setup(&c, g, 1);
        ck_assert(resources_known(r, "nvidia.com/gpu"));
        ck_assert_ptr_nonnull(strstr(resources_nvidia_problem(r), "MPS is not supported on MIG device"));
        ck_assert_int_eq(resources_nvidia_mps_requests(r, &q, &n), 0);
        ck_assert_uint_eq(n, 0);
}
END_TEST

/* ---- health, changes, Intel beside NVIDIA ---- */

START_TEST(test_health_and_changes) {
        Config c = defaults();
        GpuInfo g[] = { l40s(0) };
        ConfigSharedResource ts[] = { { .name = "nvidia.com/gpu", .replicas = 2 } };
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_strv_free_ char **changed = NULL, **changed2 = NULL, **changed3 = NULL;

        c.nvidia_time_slicing = (ConfigSharing) { .resources = ts, .n_resources = 1 };
        ck_assert_int_eq(resources_new(true, &r), 0);
        ck_assert_int_eq(resources_set_nvidia_options(r, &c), 0);
        ck_assert_int_eq(resources_update_gpu(r, "/gpu/0", &g[0], &changed), 1);
        ck_assert(strv_contains(changed, "nvidia.com/gpu"));
        g[0].healthy = false;
        g[0].health_reason = "gpu-lost";
        ck_assert_int_eq(resources_update_gpu(r, "/gpu/0", &g[0], &changed2), 0);
        ck_assert(strv_contains(changed2, "nvidia.com/gpu"));
        assert_ids(r, "nvidia.com/gpu", "!" L40S_UUID "::0,!" L40S_UUID "::1");
        /* Same record again: nothing changed. */
        ck_assert_int_eq(resources_update_gpu(r, "/gpu/0", &g[0], &changed3), 0);
        ck_assert_uint_eq(strv_length(changed3), 0);
        ck_assert_int_eq(resources_remove_gpu(r, "/gpu/0", &changed3), 1);
        ck_assert(strv_contains(changed3, "nvidia.com/gpu"));
        ck_assert(resources_known(r, "nvidia.com/gpu"));
        assert_ids(r, "nvidia.com/gpu", "");
}
END_TEST

START_TEST(test_intel_beside_nvidia) {
        Config c = defaults();
        GpuInfo nv = l40s(0);
        GpuInfo intel = {
                .id = "0000:00:02.0", .vendor = "intel", .driver = "i915", .card_node = "/dev/dri/card0",
                .render_node = "/dev/dri/renderD128", .health_reason = "", .numa_node = -1,
                .device_id = 0x56a0, .healthy = true, .index = -1,
        };
        _cleanup_(resources_freep) Resources *r = NULL;
        _cleanup_free_ DeviceSpec *specs = NULL;
        size_t n;

        ck_assert_int_eq(resources_new(true, &r), 0);
        ck_assert_int_eq(resources_set_intel_options(r, 2, ALLOCATION_POLICY_NONE, false, BY_PATH_SINGLE, false), 0);
        ck_assert_int_eq(resources_set_nvidia_options(r, &c), 0);
        ck_assert_int_eq(resources_update_gpu(r, "/gpu/intel", &intel, NULL), 1);
        ck_assert_int_eq(resources_update_gpu(r, "/gpu/nv", &nv, NULL), 1);
        assert_ids(r, RESOURCE_INTEL_I915, "0000:00:02.0-0,0000:00:02.0-1");
        assert_ids(r, "nvidia.com/gpu", L40S_UUID);
        ck_assert_uint_eq(resources_share_limit(r, RESOURCE_INTEL_I915), 2);
        ck_assert_uint_eq(resources_share_limit(r, "nvidia.com/gpu"), 0);
        ck_assert_int_eq(resources_allocate_container(r, RESOURCE_INTEL_I915, STRV("0000:00:02.0-1"), &specs, &n), 0);
        ck_assert_uint_eq(n, 2);
        ck_assert_str_eq(specs[0].host_path, "/dev/dri/card0");

        /* nvidia.enabled false: nothing NVIDIA. */
        c.nvidia_enabled = false;
        ck_assert_int_eq(resources_set_nvidia_options(r, &c), 0);
        assert_ids(r, "nvidia.com/gpu", "");
        assert_ids(r, RESOURCE_INTEL_I915, "0000:00:02.0-0,0000:00:02.0-1");
}
END_TEST

/* ---- preferred allocation ---- */

/* The 8x H100 box of topo-m-8xH100-1.txt: NV18 between every pair, NUMA 0 / 1. */
static char h8_ids[8][64];
static GpuLinkInfo h8_links[8][7];

static void h8_gpus(GpuInfo *g, const char *type, uint8_t n) {
        for (int i = 0; i < 8; i++)
                snprintf(h8_ids[i], sizeof(h8_ids[i]), "GPU-00000000-0000-0000-0000-00000000000%d", i);
        for (int i = 0; i < 8; i++) {
                int m = 0;

                g[i] = nv_gpu(h8_ids[i], i, "NVIDIA H100 80GB HBM3", 81559, i < 4 ? 0 : 1, "Disabled");
                for (int j = 0; j < 8; j++)
                        if (j != i)
                                h8_links[i][m++] = (GpuLinkInfo) { .peer = h8_ids[j], .type = (char *) type, .nvlinks = n };
                g[i].links = h8_links[i];
                g[i].n_links = 7;
        }
}

static char *preferred(const Resources *r, const char *resource, char **available, char **must, int32_t size,
                       char **held) {
        _cleanup_strv_free_ char **l = NULL;
        ResourceError e = {};

        if (held)
                ck_assert_int_eq(resources_nvidia_preferred_allocation(r, resource, available, must, held, size, &l, &e), 0);
        else
                ck_assert_int_eq(resources_preferred_allocation(r, resource, available, must, size, &l, &e), 0);
        return strv_join(l, ",");
}

#define assert_preferred(r, res, avail, must, size, held, expected) do {                 \
                _cleanup_free_ char *_p = preferred(r, res, avail, must, size, held);   \
                ck_assert_str_eq(_p, expected);                                         \
        } while (0)

#define H(i) "GPU-00000000-0000-0000-0000-00000000000" #i

START_TEST(test_preferred_8xh100) {
        Config c = defaults();
        GpuInfo g[8];
        _cleanup_(resources_freep) Resources *r = NULL;
        char **all = STRV(H(7), H(6), H(5), H(4), H(3), H(2), H(1), H(0));
        _cleanup_strv_free_ char **l = NULL;
        ResourceError e = {};

        h8_gpus(g, "NV", 18);
        r = setup(&c, g, 8);
        /* All NVLink-connected: the NUMA node decides, lowest index first. */
        assert_preferred(r, "nvidia.com/gpu", all, NULL, 4, NULL, H(0) "," H(1) "," H(2) "," H(3));
        assert_preferred(r, "nvidia.com/gpu", all, STRV(H(5)), 4, NULL, H(5) "," H(4) "," H(6) "," H(7));
        assert_preferred(r, "nvidia.com/gpu", all, NULL, 2, NULL, H(0) "," H(1));
        assert_preferred(r, "nvidia.com/gpu", STRV(H(0), H(2), H(3), H(4), H(5), H(6)), NULL, 3, NULL,
                         H(0) "," H(2) "," H(3));
        assert_preferred(r, "nvidia.com/gpu", all, NULL, 8, NULL,
                         H(0) "," H(1) "," H(2) "," H(3) "," H(4) "," H(5) "," H(6) "," H(7));
        /* Every chosen pair is NVLink-connected (a connected set). */
        ck_assert_int_eq(resources_preferred_allocation(r, "nvidia.com/gpu", all, STRV(H(6)), 5, &l, &e), 0);
        ck_assert_uint_eq(strv_length(l), 5);
        for (size_t i = 0; l[i]; i++)
                for (size_t j = 0; l[j]; j++) {
                        int a = l[i][strlen(l[i]) - 1] - '0', b = l[j][strlen(l[j]) - 1] - '0';
                        bool nv = false;

                        if (a == b)
                                continue;
                        for (size_t k = 0; k < g[a].n_links; k++)
                                nv = nv || (streq(g[a].links[k].peer, l[j]) && streq(g[a].links[k].type, "NV"));
                        ck_assert(nv);
                }
        /* An unhealthy GPU is never chosen. */
        g[1].healthy = false;
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/nv1", &g[1], NULL), 0);
        assert_preferred(r, "nvidia.com/gpu", all, NULL, 4, NULL, H(4) "," H(5) "," H(6) "," H(7));
        /* Bounds. */
        ck_assert_int_eq(resources_preferred_allocation(r, "nvidia.com/gpu", all, NULL, 0, &l, &e), -EINVAL);
        ck_assert_str_eq(e.name, KGPU_ERROR_INVALID_ARGS);
}
END_TEST

/* topo-m-5xRTX4090-mixedNUMA-1.txt: GPU0 alone on NUMA 1 (SYS to all); GPU1-GPU2 and
 * GPU3-GPU4 PHB pairs, NODE across. */
static const char *rtx_matrix[5][5] = {
        { "X", "SYS", "SYS", "SYS", "SYS" },
        { "SYS", "X", "PHB", "NODE", "NODE" },
        { "SYS", "PHB", "X", "NODE", "NODE" },
        { "SYS", "NODE", "NODE", "X", "PHB" },
        { "SYS", "NODE", "NODE", "PHB", "X" },
};

START_TEST(test_preferred_partial_topology) {
        Config c = defaults();
        GpuInfo g[5];
        GpuLinkInfo links[5][4];
        char ids[5][64];
        _cleanup_(resources_freep) Resources *r = NULL;

        for (int i = 0; i < 5; i++)
                snprintf(ids[i], sizeof(ids[i]), "GPU-00000000-0000-0000-0000-0000000004%02d", i);
        for (int i = 0; i < 5; i++) {
                int m = 0;

                g[i] = nv_gpu(ids[i], i, "NVIDIA GeForce RTX 4090", 24564, i == 0 ? 1 : 0, "");
                for (int j = 0; j < 5; j++)
                        if (j != i)
                                links[i][m++] = (GpuLinkInfo) { .peer = ids[j], .type = (char *) rtx_matrix[i][j] };
                g[i].links = links[i];
                g[i].n_links = 4;
        }
        r = setup(&c, g, 5);
        char **all = STRV(ids[0], ids[1], ids[2], ids[3], ids[4]);
        /* Two PHB pairs: the lower one. Not GPU0 (other NUMA node). */
        assert_preferred(r, "nvidia.com/gpu", all, NULL, 2, NULL,
                         "GPU-00000000-0000-0000-0000-000000000401,GPU-00000000-0000-0000-0000-000000000402");
        assert_preferred(r, "nvidia.com/gpu", all, STRV(ids[4]), 2, NULL,
                         "GPU-00000000-0000-0000-0000-000000000404,GPU-00000000-0000-0000-0000-000000000403");

        /* GPU3-GPU4 bridged by NVLink (NV2 as in topo-m-2xGPU-NV2-1.txt): the NVLink pair wins. */
        links[3][3] = (GpuLinkInfo) { .peer = ids[4], .type = "NV", .nvlinks = 2 };
        links[4][3] = (GpuLinkInfo) { .peer = ids[3], .type = "NV", .nvlinks = 2 };
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/nv3", &g[3], NULL), 0);
        ck_assert_int_eq(resources_update_gpu(r, "/io/kgpu/Probe1/gpu/nv4", &g[4], NULL), 0);
        assert_preferred(r, "nvidia.com/gpu", all, NULL, 2, NULL,
                         "GPU-00000000-0000-0000-0000-000000000403,GPU-00000000-0000-0000-0000-000000000404");
        /* Three: the NVLink pair plus the NUMA-0 GPU with the lowest index. */
        assert_preferred(r, "nvidia.com/gpu", all, NULL, 3, NULL,
                         "GPU-00000000-0000-0000-0000-000000000401,GPU-00000000-0000-0000-0000-000000000403,"
                         "GPU-00000000-0000-0000-0000-000000000404");
}
END_TEST

/* A partially NVLinked 8-GPU box: the DGX-1 (V100) hybrid cube-mesh as NVIDIA publishes
 * its `nvidia-smi topo -m` (no recording in tests/data): GPUs 0-3 and 4-7 are NVLink
 * cliques on NUMA nodes 0 and 1, each GPU has one NV2 link across (0-4, 1-5, 2-6 NV1,
 * 3-7 NV1), the rest is SYS. Only here can an answer be disconnected, so every answer of
 * sizes 2-4 around each GPU must be a clique, and the sets below are the unique best ones
 * by summed NVLinks (NUMA alone would pick 0,1,2 and 1,4). */
static const char *dgx1_matrix[8][8] = {
        { "X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS" },
        { "NV1", "X", "NV2", "NV1", "SYS", "NV2", "SYS", "SYS" },
        { "NV1", "NV2", "X", "NV2", "SYS", "SYS", "NV1", "SYS" },
        { "NV2", "NV1", "NV2", "X", "SYS", "SYS", "SYS", "NV1" },
        { "NV2", "SYS", "SYS", "SYS", "X", "NV1", "NV1", "NV2" },
        { "SYS", "NV2", "SYS", "SYS", "NV1", "X", "NV2", "NV1" },
        { "SYS", "SYS", "NV1", "SYS", "NV1", "NV2", "X", "NV2" },
        { "SYS", "SYS", "SYS", "NV1", "NV2", "NV1", "NV2", "X" },
};

START_TEST(test_preferred_dgx1_cube_mesh) {
        Config c = defaults();
        GpuInfo g[8];
        GpuLinkInfo links[8][7];
        _cleanup_(resources_freep) Resources *r = NULL;
        char **all = STRV(H(7), H(6), H(5), H(4), H(3), H(2), H(1), H(0));

        h8_gpus(g, "NV", 18);           /* ids, NUMA 0 / 1; links replaced below */
        for (int i = 0; i < 8; i++) {
                int m = 0;

                for (int j = 0; j < 8; j++) {
                        const char *t = dgx1_matrix[i][j];

                        if (j == i)
                                continue;
                        links[i][m++] = startswith(t, "NV") ?
                                (GpuLinkInfo) { .peer = h8_ids[j], .type = "NV", .nvlinks = (uint8_t) (t[2] - '0') } :
                                (GpuLinkInfo) { .peer = h8_ids[j], .type = (char *) t };
                }
                g[i].links = links[i];
                g[i].n_links = 7;
        }
        r = setup(&c, g, 8);

        /* Connected: each answer around each GPU is pairwise NVLinked. */
        for (int must = 0; must < 8; must++)
                for (int32_t size = 2; size <= 4; size++) {
                        _cleanup_strv_free_ char **l = NULL;
                        ResourceError e = {};

                        ck_assert_int_eq(resources_preferred_allocation(r, "nvidia.com/gpu", all, STRV(h8_ids[must]),
                                                                        size, &l, &e), 0);
                        ck_assert_uint_eq(strv_length(l), (size_t) size);
                        ck_assert_str_eq(l[0], h8_ids[must]);
                        for (size_t i = 0; l[i]; i++)
                                for (size_t j = i + 1; l[j]; j++) {
                                        int a = l[i][strlen(l[i]) - 1] - '0', b = l[j][strlen(l[j]) - 1] - '0';

                                        ck_assert_msg(startswith(dgx1_matrix[a][b], "NV"),
                                                      "size %d around GPU %d: GPUs %d and %d are not NVLinked (%s)",
                                                      (int) size, must, a, b, dgx1_matrix[a][b]);
                                }
                }
        /* The best sets: 0-2 NV1 + 0-3 NV2 + 2-3 NV2 beats the NUMA-only 0,1,2 (4 links). */
        assert_preferred(r, "nvidia.com/gpu", all, STRV(H(0)), 3, NULL, H(0) "," H(2) "," H(3));
        assert_preferred(r, "nvidia.com/gpu", all, NULL, 4, NULL, H(0) "," H(1) "," H(2) "," H(3));
        assert_preferred(r, "nvidia.com/gpu", all, STRV(H(5)), 2, NULL, H(5) "," H(6));
        /* GPU 1 with only 4, 5, 6 offered: its NV2 partner across the NUMA nodes, not GPU 4. */
        assert_preferred(r, "nvidia.com/gpu", STRV(H(6), H(5), H(4), H(1)), STRV(H(1)), 2, NULL, H(1) "," H(5));
        assert_preferred(r, "nvidia.com/gpu", STRV(H(0), H(2), H(4), H(6), H(7)), NULL, 3, NULL,
                         H(4) "," H(6) "," H(7));
}
END_TEST

START_TEST(test_preferred_replicas) {
        Config c = defaults();
        GpuInfo g[8];
        ConfigSharedResource ts[] = { { .name = "nvidia.com/gpu", .replicas = 4, .devices = STRV("0", "1") } };
        _cleanup_(resources_freep) Resources *r = NULL;
        char **all = STRV(H(1) "::3", H(1) "::2", H(1) "::1", H(1) "::0", H(0) "::3", H(0) "::2", H(0) "::1", H(0) "::0");
        char **busy0 = STRV(H(1) "::3", H(1) "::2", H(1) "::1", H(1) "::0", H(0) "::3", H(0) "::2");

        h8_gpus(g, "NV", 18);
        c.nvidia_time_slicing = (ConfigSharing) { .rename_by_default = true, .resources = ts, .n_resources = 1 };
        r = setup(&c, g, 2);
        /* distributed (default): spread, then by the replicas in use. */
        assert_preferred(r, "nvidia.com/gpu.shared", all, NULL, 2, NULL, H(0) "::0," H(1) "::0");
        assert_preferred(r, "nvidia.com/gpu.shared", all, NULL, 3, NULL, H(0) "::0," H(1) "::0," H(0) "::1");
        assert_preferred(r, "nvidia.com/gpu.shared", busy0, NULL, 2, NULL, H(1) "::0," H(1) "::1");
        assert_preferred(r, "nvidia.com/gpu.shared", all, STRV(H(0) "::2"), 2, NULL, H(0) "::2," H(1) "::0");
        /* held: the broker's records count as in use even when listed available. */
        assert_preferred(r, "nvidia.com/gpu.shared", all, NULL, 1, STRV(H(0) "::3"), H(1) "::0");

        /* packed: fill the GPU with the most in use first. */
        c.nvidia_replica_policy = REPLICA_POLICY_PACKED;
        ck_assert_int_eq(resources_set_nvidia_options(r, &c), 0);
        assert_preferred(r, "nvidia.com/gpu.shared", all, NULL, 2, NULL, H(0) "::0," H(0) "::1");
        assert_preferred(r, "nvidia.com/gpu.shared", busy0, NULL, 3, NULL, H(0) "::2," H(0) "::3," H(1) "::0");
        assert_preferred(r, "nvidia.com/gpu.shared", all, NULL, 1, STRV(H(1) "::3"), H(1) "::0");
}
END_TEST

START_TEST(test_preferred_mig_order) {
        Config c = defaults();
        GpuInfo g[] = { h100_7x1g() };
        _cleanup_(resources_freep) Resources *r = NULL;

        c.nvidia_mig_strategy = MIG_STRATEGY_SINGLE;
        r = setup(&c, g, 1);
        assert_preferred(r, "nvidia.com/gpu",
                         STRV("MIG-981c86e9-3607-57d7-9426-295347e4b925", "MIG-3f6f389f-b0cc-5e5c-8e32-eaa8fd067902",
                              "MIG-unknown"), NULL, 2, NULL,
                         "MIG-981c86e9-3607-57d7-9426-295347e4b925,MIG-3f6f389f-b0cc-5e5c-8e32-eaa8fd067902");
}
END_TEST

/* ---- bounds ---- */

START_TEST(test_bounds) {
        Config c = defaults();
        ConfigSharedResource bad[] = { { .name = "nvidia.com/gpu", .replicas = 0 } };
        ConfigSharedResource many[] = { { .name = "nvidia.com/gpu", .replicas = 1024 } };
        _cleanup_(resources_freep) Resources *r = NULL;
        static char ids[70][64];
        GpuInfo g[70];
        MigDeviceInfo migs[9];
        char mig_ids[9][64];

        ck_assert_int_eq(resources_new(true, &r), 0);
        c.nvidia_time_slicing = (ConfigSharing) { .resources = bad, .n_resources = 1 };
        ck_assert_int_eq(resources_set_nvidia_options(r, &c), -EINVAL);
        bad[0].replicas = 1025;
        ck_assert_int_eq(resources_set_nvidia_options(r, &c), -EINVAL);
        bad[0] = (ConfigSharedResource) { .name = "", .replicas = 1 };
        ck_assert_int_eq(resources_set_nvidia_options(r, &c), -EINVAL);

        /* 70 GPUs: the first 64 (by index) are served, the reason is given. */
        c.nvidia_time_slicing = (ConfigSharing) {};
        ck_assert_int_eq(resources_set_nvidia_options(r, &c), 0);
        for (int i = 0; i < 70; i++) {
                char path[32];

                snprintf(ids[i], sizeof(ids[i]), "GPU-00000000-0000-0000-0000-0000000007%02d", i);
                g[i] = nv_gpu(ids[i], i, "NVIDIA H100 80GB HBM3", 81559, 0, "");
                snprintf(path, sizeof(path), "/gpu/%d", i);
                ck_assert_int_ge(resources_update_gpu(r, path, &g[i], NULL), 0);
        }
        c.nvidia_time_slicing = (ConfigSharing) { .resources = many, .n_resources = 1 };
        ck_assert_int_eq(resources_set_nvidia_options(r, &c), 0);
        {
                _cleanup_free_ Device *d = NULL;
                size_t n;

                ck_assert_int_eq(resources_get_devices(r, "nvidia.com/gpu", &d, &n), 0);
                ck_assert_uint_eq(n, 64 * 1024);
                ck_assert_ptr_nonnull(resources_find_device(d, n, "GPU-00000000-0000-0000-0000-000000000763::1023"));
                ck_assert_ptr_null(resources_find_device(d, n, "GPU-00000000-0000-0000-0000-000000000764::0"));
        }
        ck_assert_ptr_nonnull(strstr(resources_nvidia_problem(r), "more than 64 NVIDIA GPUs"));
        /* A preferred allocation over 1024 of them stays bounded. */
        {
                _cleanup_strv_free_ char **l = NULL;
                static char buf[1024][80];
                char *avail[1025];
                ResourceError e = {};

                for (int i = 0; i < 1024; i++) {
                        snprintf(buf[i], sizeof(buf[i]), "%s::%d", ids[i % 64], i / 64);
                        avail[i] = buf[i];
                }
                avail[1024] = NULL;
                ck_assert_int_eq(resources_preferred_allocation(r, "nvidia.com/gpu", avail, NULL, 64, &l, &e), 0);
                ck_assert_uint_eq(strv_length(l), 64);
                /* distributed: one per GPU. */
                for (int i = 0; i < 64; i++)
                        ck_assert_ptr_nonnull(strstr(l[i], ids[i]));
        }
        resources_free(TAKE_PTR(r));

        /* 9 MIG devices on one GPU: 8 served. A bad profile or UUID: ignored. */
        c = defaults();
        c.nvidia_mig_strategy = MIG_STRATEGY_MIXED;
        g[0] = nv_gpu(H100_UUID, 0, "NVIDIA H100 80GB HBM3", 81559, 0, "Enabled");
        for (int i = 0; i < 9; i++) {
                snprintf(mig_ids[i], sizeof(mig_ids[i]), "MIG-00000000-0000-0000-0000-0000000009%02d", i);
                migs[i] = (MigDeviceInfo) { .index = (uint32_t) i, .uuid = mig_ids[i], .profile = "1g.10gb" };
        }
        migs[1].profile = "1g 10gb";
        migs[2].uuid = "MIG-with,comma";
        g[0].mig_devices = migs;
        g[0].n_mig_devices = 9;
        r = setup(&c, g, 1);
        {
                _cleanup_free_ Device *d = NULL;
                size_t n;

                ck_assert_int_eq(resources_get_devices(r, "nvidia.com/mig-1g.10gb", &d, &n), 0);
                ck_assert_uint_eq(n, 6);        /* indexes 0, 3..7 */
        }
        ck_assert_ptr_nonnull(strstr(resources_nvidia_problem(r), "more than 8 MIG devices"));
        ck_assert_ptr_nonnull(strstr(resources_nvidia_problem(r), "bad UUID or profile"));
}
END_TEST


/* ---- randomized: any layout and config keeps the table's invariants ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd(uint32_t n) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return n ? (uint32_t) (rng_state % n) : 0;
}

static const char *pick(const char * const *l, size_t n) {
        return l[rnd((uint32_t) n)];
}

static Resources *random_build(const Config *c, const GpuInfo *g, size_t n, bool remove) {
        Resources *r = NULL;

        ck_assert_int_eq(resources_new(true, &r), 0);
        ck_assert_int_eq(resources_set_nvidia_options(r, c), 0);
        for (size_t i = 0; i < n; i++) {
                char path[32];

                snprintf(path, sizeof(path), "/gpu/%zu", i);
                (void) resources_update_gpu(r, path, &g[i], NULL);      /* -EEXIST for a repeated id */
        }
        if (remove)
                ck_assert_int_ge(resources_remove_gpu(r, "/gpu/0", NULL), 0);
        return r;
}

/* Same resources, same devices (id, health, NUMA node). */
static void assert_same_resources(const Resources *a, const Resources *b) {
        ck_assert(strv_equal(a->seen, b->seen));
        for (char **res = a->seen; res && *res; res++) {
                _cleanup_free_ Device *x = NULL, *y = NULL;
                size_t nx, ny;

                ck_assert_int_eq(resources_get_devices(a, *res, &x, &nx), 0);
                ck_assert_int_eq(resources_get_devices(b, *res, &y, &ny), 0);
                ck_assert_uint_eq(nx, ny);
                for (size_t i = 0; i < nx; i++) {
                        ck_assert_str_eq(x[i].id, y[i].id);
                        ck_assert_int_eq(x[i].healthy, y[i].healthy);
                        ck_assert_int_eq(x[i].numa_node, y[i].numa_node);
                }
        }
}

/* test_random_layouts, step by step: each iteration draws a configuration and a GPU
 * layout, builds the resources, then checks their devices and preferred allocations,
 * the MPS requests, and an update in place against a rebuild from scratch. */

static const char * const mps_states[] = { "", "starting", "running", "failed" };

/* A random NVIDIA configuration; ts, mps and dev_lists hold what it points to. */
static void random_config(Config *c, ConfigSharedResource ts[2], ConfigSharedResource mps[2],
                          char *dev_lists[4][4]) {
        static const char * const names[] = { "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb" };
        static const char * const filters[] = { "0", "1", "0:1", H100_UUID, H100_MIG2, "bogus" };

        c->nvidia_mig_strategy = (ConfigMigStrategy) rnd(3);
        c->nvidia_device_id_strategy = (ConfigDeviceIdStrategy) rnd(2);
        c->nvidia_device_list_strategy = 1 + rnd(15);
        c->nvidia_pass_device_specs = rnd(2);
        c->nvidia_replica_policy = (ConfigReplicaPolicy) rnd(2);
        for (int i = 0; i < 4; i++) {
                for (int j = 0; j < 3; j++)
                        dev_lists[i][j] = (char *) pick(filters, ELEMENTSOF(filters));
                dev_lists[i][1 + rnd(3)] = NULL;
        }
        for (int i = 0; i < 2; i++) {
                ts[i] = (ConfigSharedResource) { .name = (char *) pick(names, ELEMENTSOF(names)),
                                                 .rename = rnd(2) ? NULL : "nvidia.com/shared",
                                                 .replicas = 1 + rnd(8),
                                                 .devices = rnd(2) ? NULL : dev_lists[i] };
                mps[i] = (ConfigSharedResource) { .name = (char *) pick(names, ELEMENTSOF(names)),
                                                  .rename = rnd(2) ? NULL : (i ? "nvidia.com/mps-b" : "nvidia.com/mps-a"),
                                                  .replicas = 1 + rnd(4),
                                                  .memory_bytes = rnd(2) ? 0 : (1 + rnd(30)) * GIB,
                                                  .devices = rnd(2) ? NULL : dev_lists[2 + i] };
        }
        c->nvidia_time_slicing = (ConfigSharing) { .rename_by_default = rnd(2), .resources = ts,
                                                   .n_resources = rnd(3),
                                                   .fail_requests_greater_than_one = rnd(2) };
        c->nvidia_mps = (ConfigSharing) { .rename_by_default = rnd(2), .resources = mps, .n_resources = rnd(3),
                                          .fail_requests_greater_than_one = rnd(2) };
}

/* n_gpus random GPUs in g; m and links hold their MIG devices and links. */
static void random_gpus(GpuInfo g[6], MigDeviceInfo m[6][9], GpuLinkInfo links[6][6], size_t n_gpus) {
        static const char * const uuids[] = { H100_UUID, H100B_UUID, L40S_UUID, "GPU-x", "", "GPU-with space" };
        static const char * const mig_uuids[] = { H100_MIG0, H100_MIG1, H100_MIG2, "MIG-y", "", H100_UUID };
        static const char * const profiles[] = { "1g.10gb", "2g.20gb", "3g.40gb", "bad profile", "" };
        static const char * const migs[] = { "", "Disabled", "Enabled" };
        static const char * const types[] = { "NV", "PIX", "PXB", "PHB", "NODE", "SYS", "" };

        for (size_t i = 0; i < n_gpus; i++) {
                g[i] = nv_gpu(pick(uuids, ELEMENTSOF(uuids)), (int32_t) rnd(4) - 1, "NVIDIA H100 80GB HBM3",
                              rnd(4) ? 20000 + rnd(70000) : 0, (int32_t) rnd(3) - 1, pick(migs, ELEMENTSOF(migs)));
                g[i].id = g[i].uuid[0] ? g[i].uuid : "GPU-empty-uuid";
                g[i].healthy = rnd(4) != 0;
                g[i].mps_state = (char *) pick(mps_states, ELEMENTSOF(mps_states));
                g[i].mps_pipe_directory = "/run/kgpu/mps/x/pipe";
                g[i].n_mig_devices = rnd(10);
                for (size_t j = 0; j < g[i].n_mig_devices; j++)
                        m[i][j] = (MigDeviceInfo) { .index = rnd(9), .uuid = (char *) pick(mig_uuids, ELEMENTSOF(mig_uuids)),
                                                    .profile = (char *) pick(profiles, ELEMENTSOF(profiles)),
                                                    .device_nodes = rnd(2) ? NULL : gpu_nodes1 };
                g[i].mig_devices = m[i];
                g[i].n_links = rnd(6);
                for (size_t j = 0; j < g[i].n_links; j++)
                        links[i][j] = (GpuLinkInfo) { .peer = (char *) pick(uuids, ELEMENTSOF(uuids)),
                                                      .type = (char *) pick(types, ELEMENTSOF(types)),
                                                      .nvlinks = (uint8_t) rnd(20) };
                g[i].links = links[i];
        }
}

/* Every advertised resource: sorted, findable, bounded ids; healthy devices allocate;
 * a preferred allocation stays within what was available, without repeats. */
static void check_devices_and_preferred(Resources *r, size_t *seen_devices, size_t *seen_replicas,
                                        size_t *seen_mig, size_t *seen_preferred) {
        for (char **res = r->seen; res && *res; res++) {
                _cleanup_free_ Device *d = NULL;
                _cleanup_strv_free_ char **all = NULL, **pref = NULL;
                ResourceError e = {};
                size_t n;

                ck_assert(resources_is_nvidia(r, *res));
                ck_assert_int_eq(resources_get_devices(r, *res, &d, &n), 0);
                for (size_t i = 0; i < n; i++) {
                        _cleanup_(answer_done) Answer a = {};

                        ck_assert(i == 0 || policy_id_cmp(d[i - 1].id, d[i].id) < 0);
                        ck_assert_ptr_eq(resources_find_device(d, n, d[i].id), &d[i]);
                        ck_assert_uint_le(strlen(d[i].id), RESOURCES_ID_MAX);
                        ck_assert_int_eq(strv_extend(&all, d[i].id), 0);
                        (*seen_devices)++;
                        *seen_replicas += strstr(d[i].id, "::") != NULL;
                        *seen_mig += startswith(d[i].id, "MIG-") != NULL;
                        if (d[i].healthy)
                                ck_assert_int_eq(allocate(r, *res, (char *[]) { (char *) d[i].id, NULL }, &a, &e), 0);
                }
                if (n == 0)
                        continue;
                int32_t size = 1 + (int32_t) rnd((uint32_t) n);
                char *must[] = { all[rnd((uint32_t) n)], NULL };
                ck_assert_int_eq(resources_nvidia_preferred_allocation(r, *res, all, rnd(2) ? must : NULL,
                                                                       rnd(2) ? all : NULL, size, &pref, &e), 0);
                ck_assert_uint_le(strv_length(pref), (size_t) size);
                *seen_preferred += strv_length(pref);
                for (size_t i = 0; pref[i]; i++) {
                        ck_assert(strv_contains(all, pref[i]));
                        for (size_t j = i + 1; pref[j]; j++)
                                ck_assert_str_ne(pref[i], pref[j]);
                }
        }
}

/* The MPS requests: enabled ones carry limits, one per GPU. */
static void check_mps_requests(Resources *r) {
        NvidiaMpsRequest *q = NULL;
        size_t n;

        ck_assert_int_eq(resources_nvidia_mps_requests(r, &q, &n), 0);
        for (size_t i = 0; i < n; i++) {
                ck_assert(!q[i].enabled || (q[i].pinned_memory_bytes > 0 &&
                                            q[i].active_thread_percentage >= 1 &&
                                            q[i].active_thread_percentage <= 100));
                for (size_t j = i + 1; j < n; j++)
                        ck_assert_str_ne(q[i].gpu_id, q[j].gpu_id);
        }
        nvidia_mps_requests_free(q, n);
}

/* Health, NUMA or MPS state changes (updated in place) give what a
 * rebuild from scratch gives. */
static void check_update_matches_rebuild(Resources *r, const Config *c, GpuInfo *g, size_t n_gpus, bool remove) {
        _cleanup_(resources_freep) Resources *fresh = NULL;
        size_t i = remove ? 1 + rnd((uint32_t) n_gpus) : rnd((uint32_t) n_gpus);
        char path[32];

        if (i < n_gpus) {
                g[i].healthy = !g[i].healthy;
                g[i].numa_node = (int32_t) rnd(3) - 1;
                g[i].mps_state = (char *) pick(mps_states, ELEMENTSOF(mps_states));
                snprintf(path, sizeof(path), "/gpu/%zu", i);
                (void) resources_update_gpu(r, path, &g[i], NULL);
        }
        fresh = random_build(c, g, n_gpus, remove);
        /* The same update again: a GPU refused for a repeated id before the
         * removal is accepted now, in both. */
        if (i < n_gpus)
                (void) resources_update_gpu(fresh, path, &g[i], NULL);
        /* Names advertised before the change stay known in r only. */
        for (char **res = fresh->seen; res && *res; res++)
                ck_assert(strv_contains(r->seen, *res));
        if (strv_equal(r->seen, fresh->seen))
                assert_same_resources(r, fresh);
}

START_TEST(test_random_layouts) {
        size_t seen_devices = 0, seen_replicas = 0, seen_mig = 0, seen_preferred = 0;

        for (int iter = 0; iter < 300; iter++) {
                _cleanup_(resources_freep) Resources *r = NULL;
                ConfigSharedResource ts[2], mps[2];
                char *dev_lists[4][4];
                GpuInfo g[6];
                MigDeviceInfo m[6][9];
                GpuLinkInfo links[6][6];
                Config c = defaults();
                size_t n_gpus = 1 + rnd(6);

                random_config(&c, ts, mps, dev_lists);
                random_gpus(g, m, links, n_gpus);

                bool remove = rnd(3) == 0;

                r = random_build(&c, g, n_gpus, remove);

                check_devices_and_preferred(r, &seen_devices, &seen_replicas, &seen_mig, &seen_preferred);
                check_mps_requests(r);
                check_update_matches_rebuild(r, &c, g, n_gpus, remove);
        }
        /* The layouts reached every kind of device. */
        ck_assert_uint_gt(seen_devices, 500);
        ck_assert_uint_gt(seen_replicas, 100);
        ck_assert_uint_gt(seen_mig, 50);
        ck_assert_uint_gt(seen_preferred, 100);
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("nvidia-resources");
        TCase *t = tcase_create("core");

        tcase_set_timeout(t, 60);
        tcase_add_test(t, test_none_uuid_l40s);
        tcase_add_test(t, test_none_index_volume_mounts_specs);
        tcase_add_test(t, test_single_inconsistent);
        tcase_add_test(t, test_single_mig_on_and_off);
        tcase_add_test(t, test_single_7x1g_index);
        tcase_add_test(t, test_single_all_off_is_none);
        tcase_add_test(t, test_mixed_index_specs);
        tcase_add_test(t, test_cdi_strategies);
        tcase_add_test(t, test_cdi_and_envvar_index);
        tcase_add_test(t, test_time_slicing_replicas);
        tcase_add_test(t, test_time_slicing_rename_per_gpu);
        tcase_add_test(t, test_time_slicing_mig_devices);
        tcase_add_test(t, test_devices_references);
        tcase_add_loop_test(t, test_matrix, 0, ELEMENTSOF(matrix));
        tcase_add_test(t, test_mps_2_2_4);
        tcase_add_test(t, test_mps_without_memory_and_stop);
        tcase_add_test(t, test_mps_refused_layouts);
        tcase_add_test(t, test_health_and_changes);
        tcase_add_test(t, test_intel_beside_nvidia);
        tcase_add_test(t, test_preferred_8xh100);
        tcase_add_test(t, test_preferred_partial_topology);
        tcase_add_test(t, test_preferred_dgx1_cube_mesh);
        tcase_add_test(t, test_preferred_replicas);
        tcase_add_test(t, test_preferred_mig_order);
        tcase_add_test(t, test_bounds);
        tcase_add_test(t, test_random_layouts);
        suite_add_tcase(s, t);
        return s;
}

KGPU_TEST_SUITE(suite)
