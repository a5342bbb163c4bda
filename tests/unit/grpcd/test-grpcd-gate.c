/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-grpcd-gate.c — kgpu-grpcd's copy of the probe's GPU objects (probe-gpus.c) and the
 * gate every Allocate answer of the broker passes (gate.c).
 *
 * The inventory is read from GetManagedObjects-shaped messages built on a bus object that
 * is never connected (one end of a socketpair): two Intel GPUs (i915 and xe) and two
 * NVIDIA GPUs (one with a MIG device, one under MPS). Answers are protobuf messages as
 * grpcd_allocate_reply_read() makes them. Checks: what the real broker sends for each
 * vendor and strategy passes; a host mount, a foreign device node, a node with "m", a
 * forbidden or foreign env, a foreign CDI name or annotation is refused with a reason
 * naming it; no inventory refuses everything; hostile inventories (bad paths, types,
 * counts, duplicate ids) grant nothing; partial updates keep the rest; and the gate's
 * constants agree with what the broker puts in its answers.
 */

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <systemd/sd-bus.h>

#include "common/util.h"
#include "daemons/broker/intel.h"
#include "daemons/broker/nvidia.h"
#include "daemons/broker/resources.h"
#include "daemons/grpc/convert.h"
#include "daemons/grpc/gate.h"
#include "daemons/grpc/probe-gpus.h"
#include "deviceplugin.pb-c.h"
#include "tests/unit/test-main.h"

#define PREFIX "cdi.k8s.io/"
#define I915 "0000:03:00.0"
#define XE "0000:04:00.0"
#define NV0 "GPU-aaaaaaaa-0000-0000-0000-000000000000"
#define NV1 "GPU-bbbbbbbb-0000-0000-0000-000000000000"
#define MIG0 "MIG-cccccccc-0000-0000-0000-000000000000"
#define MPS_PIPE "/run/kgpu/mps/" NV1 "/pipe"

static sd_bus *bus;

static void setup(void) {
        int fds[2];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0, fds), 0);
        ck_assert_int_ge(sd_bus_new(&bus), 0);
        ck_assert_int_ge(sd_bus_set_fd(bus, fds[0], fds[0]), 0);
        ck_assert_int_ge(sd_bus_start(bus), 0);
        close(fds[1]);
}

static void teardown(void) {
        bus = sd_bus_close_unref(bus);
}

typedef struct TMig {
        uint32_t index;
        const char *uuid;
        const char *nodes[4];
} TMig;

/* One GPU object; NULL strings are not sent, an Id of type "i" when id_as_int. */
typedef struct TGpu {
        const char *path;
        const char *id, *vendor, *driver, *uuid, *card, *render, *mps;
        int32_t index;
        const char *nodes[20];
        const char *by_path[4];
        TMig migs[2];
        size_t n_migs;
        bool id_as_int;
        const char *mei[2];
} TGpu;

static const TGpu gpu_i915 = {
        "/io/kgpu/Probe1/gpu/pci_0000_03_00_0", I915, "intel", "i915", "", "/dev/dri/card0", "/dev/dri/renderD128", "",
        -1, { "/dev/dri/card0", "/dev/dri/renderD128" },
        { "/dev/dri/by-path/pci-" I915 "-card", "/dev/dri/by-path/pci-" I915 "-render" },
        .mei = { "/dev/mei0" },
};
static const TGpu gpu_xe = {
        "/io/kgpu/Probe1/gpu/pci_0000_04_00_0", XE, "intel", "xe", "", "/dev/dri/card1", "/dev/dri/renderD129", "",
        -1, { "/dev/dri/card1", "/dev/dri/renderD129" }, { "/dev/dri/by-path/pci-" XE "-card" },
        .mei = { "/dev/mei1" },
};
static const TGpu gpu_nv0 = {
        "/io/kgpu/Probe1/gpu/nv0", NV0, "nvidia", "nvidia", NV0, "", "", "",
        0, { "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools" }, {},
        { { 1, MIG0, { "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13" } } }, 1,
};
static const TGpu gpu_nv1 = {
        "/io/kgpu/Probe1/gpu/nv1", NV1, "nvidia", "nvidia", NV1, "", "", MPS_PIPE,
        1, { "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools" },
};

static void append_strv(sd_bus_message *m, const char *name, const char * const *l, size_t max) {
        ck_assert_int_ge(sd_bus_message_open_container(m, 'e', "sv"), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "s", name), 0);
        ck_assert_int_ge(sd_bus_message_open_container(m, 'v', "as"), 0);
        ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "s"), 0);
        for (size_t i = 0; i < max && l[i]; i++)
                ck_assert_int_ge(sd_bus_message_append(m, "s", l[i]), 0);
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
}

static void append_props(sd_bus_message *m, const TGpu *g) {
        const char *names[] = { "Vendor", "Driver", "Uuid", "CardNode", "RenderNode", "MpsPipeDirectory" };
        const char *values[] = { g->vendor, g->driver, g->uuid, g->card, g->render, g->mps };

        ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "{sv}"), 0);
        if (g->id_as_int)
                ck_assert_int_ge(sd_bus_message_append(m, "{sv}", "Id", "i", 3), 0);
        else if (g->id)
                ck_assert_int_ge(sd_bus_message_append(m, "{sv}", "Id", "s", g->id), 0);
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (values[i])
                        ck_assert_int_ge(sd_bus_message_append(m, "{sv}", names[i], "s", values[i]), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "{sv}", "Index", "i", g->index), 0);
        /* A property grpcd does not keep, of any type, is skipped. */
        ck_assert_int_ge(sd_bus_message_append(m, "{sv}", "MemoryBytes", "t", UINT64_C(1) << 34), 0);
        append_strv(m, "DeviceNodes", g->nodes, ELEMENTSOF(g->nodes));
        append_strv(m, "ByPathNodes", g->by_path, ELEMENTSOF(g->by_path));
        append_strv(m, "MeiNodes", g->mei, ELEMENTSOF(g->mei));
        ck_assert_int_ge(sd_bus_message_open_container(m, 'e', "sv"), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "s", "MigDevices"), 0);
        ck_assert_int_ge(sd_bus_message_open_container(m, 'v', "a(ussuuast)"), 0);
        ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "(ussuuast)"), 0);
        for (size_t i = 0; i < g->n_migs; i++) {
                ck_assert_int_ge(sd_bus_message_open_container(m, 'r', "ussuuast"), 0);
                ck_assert_int_ge(sd_bus_message_append(m, "ussuu", g->migs[i].index, g->migs[i].uuid, "1g.10gb", 1, 0), 0);
                ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "s"), 0);
                for (size_t j = 0; j < ELEMENTSOF(g->migs[i].nodes) && g->migs[i].nodes[j]; j++)
                        ck_assert_int_ge(sd_bus_message_append(m, "s", g->migs[i].nodes[j]), 0);
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                ck_assert_int_ge(sd_bus_message_append(m, "t", UINT64_C(10) << 30), 0);
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        }
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
}

static void seal(sd_bus_message *m) {
        static uint64_t cookie = 1;

        ck_assert_int_ge(sd_bus_message_seal(m, cookie++, 0), 0);
        ck_assert_int_ge(sd_bus_message_rewind(m, true), 0);
}

/* A GetManagedObjects reply listing the probe's own object (no Gpu1) and gpus. */
static sd_bus_message *managed_objects(const TGpu * const *gpus, size_t n) {
        sd_bus_message *m = NULL;

        ck_assert_int_ge(sd_bus_message_new_method_call(bus, &m, "io.kgpu.Test", "/", "io.kgpu.Test", "T"), 0);
        ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "{oa{sa{sv}}}"), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "{oa{sa{sv}}}", "/io/kgpu/Probe1", 1, "io.kgpu.Probe1", 0), 0);
        for (size_t i = 0; i < n; i++) {
                ck_assert_int_ge(sd_bus_message_open_container(m, 'e', "oa{sa{sv}}"), 0);
                ck_assert_int_ge(sd_bus_message_append(m, "o", gpus[i]->path), 0);
                ck_assert_int_ge(sd_bus_message_open_container(m, 'a', "{sa{sv}}"), 0);
                ck_assert_int_ge(sd_bus_message_open_container(m, 'e', "sa{sv}"), 0);
                ck_assert_int_ge(sd_bus_message_append(m, "s", "io.kgpu.Gpu1"), 0);
                append_props(m, gpus[i]);
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
                ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        }
        ck_assert_int_ge(sd_bus_message_close_container(m), 0);
        seal(m);
        return m;
}

static ProbeGpus *inventory(const TGpu * const *gpus, size_t n, size_t *ret_skipped) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = managed_objects(gpus, n);
        ProbeGpus *s = probe_gpus_new();
        size_t skipped = SIZE_MAX;

        ck_assert_ptr_nonnull(s);
        ck_assert_int_eq(probe_gpus_replace(s, m, &skipped), 0);
        ck_assert(s->known);
        if (ret_skipped)
                *ret_skipped = skipped;
        return s;
}

static ProbeGpus *node_inventory(void) {
        const TGpu *l[] = { &gpu_i915, &gpu_xe, &gpu_nv0, &gpu_nv1 };
        size_t skipped;
        ProbeGpus *s = inventory(l, ELEMENTSOF(l), &skipped);

        ck_assert_uint_eq(skipped, 0);
        ck_assert_uint_eq(s->n_gpus, 4);
        return s;
}

/* One container's answer, as NULL-terminated tables. */
typedef struct TAnswer {
        const char *devices[8][3];      /* container, host, permissions */
        const char *mounts[6][2];       /* container, host */
        bool ro[6];
        const char *envs[6][2];
        const char *annotations[3][2];
        const char *cdi[4];
} TAnswer;

typedef struct Built {
        V1beta1__DeviceSpec devices[8], *devp[8];
        V1beta1__Mount mounts[6], *mountp[6];
        V1beta1__ContainerAllocateResponse__EnvsEntry envs[6], *envp[6];
        V1beta1__ContainerAllocateResponse__AnnotationsEntry annotations[3], *annp[3];
        V1beta1__CDIDevice cdi[4], *cdip[4];
        V1beta1__ContainerAllocateResponse c;
} Built;

static void build(const TAnswer *a, Built *b) {
        size_t n;

        v1beta1__container_allocate_response__init(&b->c);
        for (n = 0; n < ELEMENTSOF(a->devices) && a->devices[n][0]; n++) {
                v1beta1__device_spec__init(&b->devices[n]);
                b->devices[n].container_path = (char *) a->devices[n][0];
                b->devices[n].host_path = (char *) a->devices[n][1];
                b->devices[n].permissions = (char *) a->devices[n][2];
                b->devp[n] = &b->devices[n];
        }
        b->c.devices = b->devp;
        b->c.n_devices = n;
        for (n = 0; n < ELEMENTSOF(a->mounts) && a->mounts[n][0]; n++) {
                v1beta1__mount__init(&b->mounts[n]);
                b->mounts[n].container_path = (char *) a->mounts[n][0];
                b->mounts[n].host_path = (char *) a->mounts[n][1];
                b->mounts[n].read_only = a->ro[n];
                b->mountp[n] = &b->mounts[n];
        }
        b->c.mounts = b->mountp;
        b->c.n_mounts = n;
        for (n = 0; n < ELEMENTSOF(a->envs) && a->envs[n][0]; n++) {
                v1beta1__container_allocate_response__envs_entry__init(&b->envs[n]);
                b->envs[n].key = (char *) a->envs[n][0];
                b->envs[n].value = (char *) a->envs[n][1];
                b->envp[n] = &b->envs[n];
        }
        b->c.envs = b->envp;
        b->c.n_envs = n;
        for (n = 0; n < ELEMENTSOF(a->annotations) && a->annotations[n][0]; n++) {
                v1beta1__container_allocate_response__annotations_entry__init(&b->annotations[n]);
                b->annotations[n].key = (char *) a->annotations[n][0];
                b->annotations[n].value = (char *) a->annotations[n][1];
                b->annp[n] = &b->annotations[n];
        }
        b->c.annotations = b->annp;
        b->c.n_annotations = n;
        for (n = 0; n < ELEMENTSOF(a->cdi) && a->cdi[n]; n++) {
                v1beta1__cdidevice__init(&b->cdi[n]);
                b->cdi[n].name = (char *) a->cdi[n];
                b->cdip[n] = &b->cdi[n];
        }
        b->c.cdi_devices = b->cdip;
        b->c.n_cdi_devices = n;
}

/* Checks a one-container answer for the ids (NULL-terminated); returns the gate's result,
 * the reason in *ret_reason (or NULL). */
static int check1(const ProbeGpus *s, const char *resource, const char * const *ids, const TAnswer *a,
                  char **ret_reason) {
        V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
        V1beta1__ContainerAllocateRequest c = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT, *cp = &c;
        V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
        V1beta1__ContainerAllocateResponse *rp;
        Built b;
        char *reason = NULL;
        int r;

        c.devices_ids = (char **) ids;
        c.n_devices_ids = strv_length((char **) ids);
        req.container_requests = &cp;
        req.n_container_requests = 1;
        build(a, &b);
        rp = &b.c;
        resp.container_responses = &rp;
        resp.n_container_responses = 1;
        r = gate_check_allocate(s, PREFIX, resource, &req, &resp, &reason);
        ck_assert(r >= 0 ? !reason : !!reason);
        *ret_reason = reason;
        return r;
}

#define IDS(...) ((const char *[]) { __VA_ARGS__, NULL })

static void pass(const ProbeGpus *s, const char *resource, const char * const *ids, const TAnswer *a) {
        char *reason = NULL;
        int r = check1(s, resource, ids, a, &reason);

        ck_assert_msg(r == 0, "%s %s refused (%d): %s", resource, ids[0], r, reason);
}

/* Refused, with a reason containing want. */
static void refused(const ProbeGpus *s, const char *resource, const char * const *ids, const TAnswer *a,
                    const char *want) {
        _cleanup_free_ char *reason = NULL;
        int r = check1(s, resource, ids, a, &reason);

        ck_assert_msg(r == -EPERM, "%s %s: %d, expected a refusal naming %s", resource, ids[0], r, want);
        ck_assert_msg(strstr(reason, want), "reason '%s' does not name '%s'", reason, want);
}

static const TAnswer intel_ok = {
        .devices = { { "/dev/dri/card0", "/dev/dri/card0", "rw" }, { "/dev/dri/renderD128", "/dev/dri/renderD128", "rw" } },
        .mounts = { { "/dev/dri/by-path/pci-" I915 "-card", "/dev/dri/by-path/pci-" I915 "-card" },
                    { "/dev/dri/by-path/pci-" I915 "-render", "/dev/dri/by-path/pci-" I915 "-render" } },
        .ro = { true, true },
        .cdi = { "gpu.intel.com/gpu=" I915 },
};

START_TEST(test_constants) {
        /* The gate lets through what the broker sends: the same names. */
        ck_assert_str_eq(GATE_CDI_KIND_INTEL, RESOURCES_CDI_KIND_INTEL);
        ck_assert_str_eq(GATE_CDI_KIND_NVIDIA, NVIDIA_CDI_KIND);
        ck_assert_str_eq(GATE_BY_PATH_DIR, RESOURCES_BY_PATH_DIR);
        ck_assert_str_eq(GATE_NVIDIA_VOLUME_MOUNTS_ROOT, NVIDIA_VOLUME_MOUNTS_ROOT);
        ck_assert_str_eq(GATE_NVIDIA_VOLUME_MOUNTS_HOST, NVIDIA_VOLUME_MOUNTS_HOST);
        ck_assert_str_eq(GATE_MPS_CONTAINER_ROOT, NVIDIA_MPS_CONTAINER_ROOT);
        ck_assert_str_eq(GATE_MPS_SHM, NVIDIA_MPS_SHM);
}
END_TEST

START_TEST(test_no_inventory) {
        _cleanup_(probe_gpus_freep) ProbeGpus *s = probe_gpus_new();
        _cleanup_free_ char *reason = NULL;

        /* Before the probe's inventory was read, even a harmless answer is refused. */
        ck_assert_int_eq(check1(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {}, &reason), -ENODATA);
        ck_assert_ptr_nonnull(strstr(reason, "kgpu-probed"));
        reason = mfree(reason);
        ck_assert_int_eq(check1(NULL, "gpu.intel.com/i915", IDS(I915), &intel_ok, &reason), -ENODATA);
}
END_TEST

START_TEST(test_intel) {
        _cleanup_(probe_gpus_freep) ProbeGpus *s = node_inventory();

        /* What the broker sends: nodes, by-path links read-only, the CDI name; for a share too. */
        pass(s, "gpu.intel.com/i915", IDS(I915), &intel_ok);
        pass(s, "gpu.intel.com/i915", IDS(I915 "-0", I915 "-7"), &intel_ok);
        pass(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {
                .devices = { { "/dev/dri/card0", "/dev/dri/card0", "r" } },
                .mounts = { { "/dev/dri/by-path", "/dev/dri/by-path" } }, .ro = { true } });
        pass(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {});

        /* The incident: host / read-write at /host, /dev/sda with rwm, any env. */
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {
                .devices = { { "/dev/dri/card0", "/dev/dri/card0", "rw" } },
                .mounts = { { "/host", "/" } } }, "read-write mount of host path '/' at '/host'");
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {
                .devices = { { "/dev/sda", "/dev/sda", "rwm" } } }, "device node '/dev/sda'");
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {
                .envs = { { "LD_PRELOAD", "/tmp/x.so" } } }, "environment variable 'LD_PRELOAD'");
        /* The other GPU's nodes, links or CDI name. */
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {
                .devices = { { "/dev/dri/card1", "/dev/dri/card1", "rw" } } }, "'/dev/dri/card1'");
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {
                .mounts = { { "/dev/dri/by-path/pci-" XE "-card", "/dev/dri/by-path/pci-" XE "-card" } },
                .ro = { true } }, "pci-" XE "-card");
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) { .cdi = { "gpu.intel.com/gpu=" XE } },
                "CDI device 'gpu.intel.com/gpu=" XE "'");
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) { .cdi = { "vendor.com/x=" I915 } }, "vendor.com/x");
        /* Right nodes, wrong terms: mknod, another place, a link read-write. */
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {
                .devices = { { "/dev/dri/card0", "/dev/dri/card0", "rwm" } } }, "permissions 'rwm'");
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {
                .devices = { { "/dev/dri/card9", "/dev/dri/card0", "rw" } } }, "as '/dev/dri/card9'");
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {
                .mounts = { { "/dev/dri/by-path/pci-" I915 "-card", "/dev/dri/by-path/pci-" I915 "-card" } } },
                "read-write mount");
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {
                .mounts = { { "/dev/dri/by-path", "/dev" } }, .ro = { true } }, "'/dev'");
        /* NVIDIA things for an Intel device. */
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {
                .devices = { { "/dev/nvidiactl", "/dev/nvidiactl", "rw" } } }, "nvidiactl");
        /* Ids that name nothing grant nothing, and the reason says so; so does a resource
         * outside kgpu's vendors, and an NVIDIA id under an Intel resource. */
        refused(s, "gpu.intel.com/i915", IDS("0000:ff:00.0"), &intel_ok, "name no GPU");
        refused(s, "gpu.intel.com/i915", IDS(I915 "-01"), &intel_ok, "name no GPU");
        refused(s, "example.com/gpu", IDS(I915), &intel_ok, "name no GPU");
        refused(s, "gpu.intel.com/i915", IDS(NV0), &(TAnswer) {
                .devices = { { "/dev/nvidia0", "/dev/nvidia0", "rw" } } }, "name no GPU");
}
END_TEST

/* The Intel resource manager's Level Zero tile mask: device indexes below the GPUs granted. */
START_TEST(test_intel_affinity_mask) {
        _cleanup_(probe_gpus_freep) ProbeGpus *s = node_inventory();

        pass(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) { .envs = { { "ZE_AFFINITY_MASK", "0.0,0.1" } } });
        pass(s, "gpu.intel.com/i915", IDS(I915 "-3"), &(TAnswer) { .envs = { { "ZE_AFFINITY_MASK", "0" } } });
        pass(s, "gpu.intel.com/xe", IDS(XE), &(TAnswer) { .envs = { { "ZE_AFFINITY_MASK", "0.1" } } });
        /* One GPU granted: device 1 would be another one's. */
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) { .envs = { { "ZE_AFFINITY_MASK", "0.0,1.0" } } },
                "ZE_AFFINITY_MASK");
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) { .envs = { { "ZE_AFFINITY_MASK", "0.0," } } },
                "ZE_AFFINITY_MASK");
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) { .envs = { { "ZE_AFFINITY_MASK", "0.x" } } },
                "ZE_AFFINITY_MASK");
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) { .envs = { { "ZE_AFFINITY_MASK", "" } } },
                "ZE_AFFINITY_MASK");
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) { .envs = { { "ZE_AFFINITY_MASK", "0.00000" } } },
                "ZE_AFFINITY_MASK");
        /* Not for the monitoring device, not for NVIDIA. */
        refused(s, "gpu.intel.com/monitoring", IDS("all"), &(TAnswer) { .envs = { { "ZE_AFFINITY_MASK", "0" } } },
                "ZE_AFFINITY_MASK");
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) { .envs = { { "ZE_AFFINITY_MASK", "0" } } },
                "ZE_AFFINITY_MASK");
}
END_TEST

START_TEST(test_intel_monitoring) {
        _cleanup_(probe_gpus_freep) ProbeGpus *s = node_inventory();
        const TAnswer i915_nodes = {
                .devices = { { "/dev/dri/card0", "/dev/dri/card0", "rw" }, { "/dev/dri/renderD128", "/dev/dri/renderD128", "rw" } },
        };

        /* "all" of gpu.intel.com/i915_monitoring grants every i915 GPU, not the xe one. */
        pass(s, "gpu.intel.com/i915_monitoring", IDS("all"), &i915_nodes);
        refused(s, "gpu.intel.com/i915_monitoring", IDS("all"), &(TAnswer) {
                .devices = { { "/dev/dri/card1", "/dev/dri/card1", "rw" } } }, "card1");
        pass(s, "gpu.intel.com/xe_monitoring", IDS("all"), &(TAnswer) {
                .devices = { { "/dev/dri/card1", "/dev/dri/card1", "rw" } } });
        /* "all" means nothing elsewhere. */
        refused(s, "gpu.intel.com/i915", IDS("all"), &i915_nodes, "name no GPU");

        /* A monitoring grant takes its GPUs' MeiNodes, only theirs. */
        pass(s, "gpu.intel.com/i915_monitoring", IDS("all"), &(TAnswer) {
                .devices = { { "/dev/dri/card0", "/dev/dri/card0", "rw" }, { "/dev/mei0", "/dev/mei0", "rw" } } });
        refused(s, "gpu.intel.com/i915_monitoring", IDS("all"), &(TAnswer) {
                .devices = { { "/dev/mei1", "/dev/mei1", "rw" } } }, "mei1");
        refused(s, "gpu.intel.com/i915_monitoring", IDS("all"), &(TAnswer) {
                .devices = { { "/dev/mei2", "/dev/mei2", "rw" } } }, "mei2");
        /* A GPU's own resource does not. */
        refused(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) {
                .devices = { { "/dev/dri/card0", "/dev/dri/card0", "rw" }, { "/dev/mei0", "/dev/mei0", "rw" } } },
                "mei0");

        /* gpu.intel.com/monitoring (monitoringMode single): every Intel GPU, no other. */
        pass(s, "gpu.intel.com/monitoring", IDS("all"), &(TAnswer) {
                .devices = { { "/dev/dri/card0", "/dev/dri/card0", "rw" }, { "/dev/dri/renderD128", "/dev/dri/renderD128", "rw" },
                             { "/dev/mei0", "/dev/mei0", "rw" }, { "/dev/dri/card1", "/dev/dri/card1", "rw" },
                             { "/dev/dri/renderD129", "/dev/dri/renderD129", "rw" }, { "/dev/mei1", "/dev/mei1", "rw" } } });
        refused(s, "gpu.intel.com/monitoring", IDS("all"), &(TAnswer) {
                .devices = { { "/dev/nvidia0", "/dev/nvidia0", "rw" } } }, "nvidia0");
        refused(s, "gpu.intel.com/monitoring", IDS(I915), &i915_nodes, "name no GPU");
}
END_TEST

START_TEST(test_nvidia) {
        _cleanup_(probe_gpus_freep) ProbeGpus *s = node_inventory();
        const TAnswer whole = {
                .devices = { { "/dev/nvidia0", "/dev/nvidia0", "rw" }, { "/dev/nvidiactl", "/dev/nvidiactl", "rw" },
                             { "/dev/nvidia-uvm", "/dev/nvidia-uvm", "rw" }, { "/dev/nvidia-uvm-tools", "/dev/nvidia-uvm-tools", "rw" },
                             { "/dev/nvidia-modeset", "/dev/nvidia-modeset", "rw" } },
                .envs = { { "NVIDIA_VISIBLE_DEVICES", NV0 } },
                .cdi = { "nvidia.com/gpu=" NV0, "nvidia.com/gpu=0" },
                .annotations = { { PREFIX "nvidia-device-plugin_0123456789abcdef", "nvidia.com/gpu=" NV0 ",nvidia.com/gpu=0" } },
        };

        /* envvar (uuid and index), passDeviceSpecs, cdi-cri, cdi-annotations; a replica. */
        pass(s, "nvidia.com/gpu", IDS(NV0), &whole);
        pass(s, "nvidia.com/gpu.shared", IDS(NV0 "::3"), &whole);
        pass(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) { .envs = { { "NVIDIA_VISIBLE_DEVICES", "0" } } });
        pass(s, "nvidia.com/gpu", IDS(NV0, NV1), &(TAnswer) { .envs = { { "NVIDIA_VISIBLE_DEVICES", "0,1" } } });
        /* volume-mounts. */
        pass(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) {
                .envs = { { "NVIDIA_VISIBLE_DEVICES", "/var/run/nvidia-container-devices" } },
                .mounts = { { "/var/run/nvidia-container-devices/" NV0, "/dev/null" },
                            { "/var/run/nvidia-container-devices/0", "/dev/null" } } });

        /* Every GPU, the other GPU, nothing at all. */
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) { .envs = { { "NVIDIA_VISIBLE_DEVICES", "all" } } },
                "NVIDIA_VISIBLE_DEVICES'='all'");
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) { .envs = { { "NVIDIA_VISIBLE_DEVICES", NV0 "," NV1 } } },
                "NVIDIA_VISIBLE_DEVICES");
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) { .envs = { { "NVIDIA_VISIBLE_DEVICES", NV0 "," } } },
                "NVIDIA_VISIBLE_DEVICES");
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) { .envs = { { "NVIDIA_DRIVER_CAPABILITIES", "all" } } },
                "NVIDIA_DRIVER_CAPABILITIES");
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) {
                .devices = { { "/dev/nvidia1", "/dev/nvidia1", "rw" } } }, "/dev/nvidia1");
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) { .cdi = { "nvidia.com/gpu=1" } }, "nvidia.com/gpu=1");
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) { .cdi = { "nvidia.com/gpu=all" } }, "nvidia.com/gpu=all");
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) {
                .mounts = { { "/var/run/nvidia-container-devices/" NV1, "/dev/null" } } }, NV1);
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) {
                .mounts = { { "/var/run/nvidia-container-devices/" NV0, "/etc" } } }, "'/etc'");
        /* Annotations: the configured prefix only, naming granted devices only. */
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) {
                .annotations = { { "io.kubernetes.cri-o.Devices", "/dev/sda" } } }, "io.kubernetes.cri-o.Devices");
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) {
                .annotations = { { PREFIX "x", "nvidia.com/gpu=" NV1 } } }, NV1);
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) {
                .annotations = { { PREFIX "a/b", "nvidia.com/gpu=" NV0 } } }, "a/b");
        /* The MPS pieces without a GPU under MPS. */
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) { .mounts = { { "/dev/shm", "/dev/shm" } } }, "/dev/shm");
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) {
                .envs = { { "CUDA_MPS_PIPE_DIRECTORY", "/mps/nvidia.com/gpu/pipe" } } }, "CUDA_MPS_PIPE_DIRECTORY");
}
END_TEST

START_TEST(test_nvidia_mig) {
        _cleanup_(probe_gpus_freep) ProbeGpus *s = node_inventory();

        /* The parent GPU's nodes and the MIG device's capability nodes; UUID or "0:1". */
        pass(s, "nvidia.com/mig-1g.10gb", IDS(MIG0), &(TAnswer) {
                .devices = { { "/dev/nvidia0", "/dev/nvidia0", "rw" }, { "/dev/nvidiactl", "/dev/nvidiactl", "rw" },
                             { "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap12", "rw" },
                             { "/dev/nvidia-caps/nvidia-cap13", "/dev/nvidia-caps/nvidia-cap13", "rw" } },
                .envs = { { "NVIDIA_VISIBLE_DEVICES", MIG0 } },
                .cdi = { "nvidia.com/gpu=" MIG0, "nvidia.com/gpu=0:1" } });
        pass(s, "nvidia.com/gpu", IDS(MIG0 "::0"), &(TAnswer) { .envs = { { "NVIDIA_VISIBLE_DEVICES", "0:1" } } });
        /* The MIG device is not its whole GPU. */
        refused(s, "nvidia.com/mig-1g.10gb", IDS(MIG0), &(TAnswer) { .envs = { { "NVIDIA_VISIBLE_DEVICES", "0" } } },
                "NVIDIA_VISIBLE_DEVICES");
        refused(s, "nvidia.com/mig-1g.10gb", IDS(MIG0), &(TAnswer) { .cdi = { "nvidia.com/gpu=" NV0 } }, NV0);
        /* A whole GPU does not grant its MIG devices' capabilities. */
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) {
                .devices = { { "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap12", "rw" } } }, "cap12");
}
END_TEST

START_TEST(test_nvidia_mps) {
        _cleanup_(probe_gpus_freep) ProbeGpus *s = node_inventory();
        const TAnswer mps = {
                .devices = { { "/dev/nvidia1", "/dev/nvidia1", "rw" } },
                .mounts = { { "/mps/nvidia.com/gpu/pipe", MPS_PIPE }, { "/dev/shm", "/dev/shm" } },
                .ro = { true },
                .envs = { { "CUDA_MPS_PIPE_DIRECTORY", "/mps/nvidia.com/gpu/pipe" },
                          { "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=40960M" },
                          { "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50" },
                          { "NVIDIA_VISIBLE_DEVICES", NV1 } },
        };

        pass(s, "nvidia.com/gpu", IDS(NV1 "::0", NV1 "::1"), &mps);
        /* The pipe only read-only: a pod writing there could break the daemon's stop. */
        refused(s, "nvidia.com/gpu", IDS(NV1 "::0"), &(TAnswer) {
                .mounts = { { "/mps/nvidia.com/gpu/pipe", MPS_PIPE } } }, "read-write mount");
        /* The pipe as the probe exports it, at the resource's place, only. */
        refused(s, "nvidia.com/gpu", IDS(NV1 "::0"), &(TAnswer) {
                .mounts = { { "/mps/nvidia.com/gpu/pipe", "/run/kgpu/mps" } } }, "'/run/kgpu/mps'");
        refused(s, "nvidia.com/gpu", IDS(NV1 "::0"), &(TAnswer) {
                .mounts = { { "/mps/other/pipe", MPS_PIPE } } }, "/mps/other/pipe");
        refused(s, "nvidia.com/gpu", IDS(NV1 "::0"), &(TAnswer) {
                .mounts = { { "/dev/shm", "/run" } } }, "'/run'");
        refused(s, "nvidia.com/gpu", IDS(NV1 "::0"), &(TAnswer) {
                .envs = { { "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "0" } } }, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
        refused(s, "nvidia.com/gpu", IDS(NV1 "::0"), &(TAnswer) {
                .envs = { { "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "+50" } } }, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
        refused(s, "nvidia.com/gpu", IDS(NV1 "::0"), &(TAnswer) {
                .envs = { { "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1M;rm -rf /" } } }, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
        refused(s, "nvidia.com/gpu", IDS(NV1 "::0"), &(TAnswer) {
                .envs = { { "CUDA_MPS_PIPE_DIRECTORY", "/tmp" } } }, "CUDA_MPS_PIPE_DIRECTORY");
}
END_TEST

START_TEST(test_containers) {
        _cleanup_(probe_gpus_freep) ProbeGpus *s = node_inventory();
        V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
        V1beta1__ContainerAllocateRequest c[2] = { V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT,
                                                    V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT }, *cp[2] = { &c[0], &c[1] };
        V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
        V1beta1__ContainerAllocateResponse *rp[2];
        _cleanup_free_ char *reason = NULL;
        char *ids0[] = { (char *) I915 "-0" }, *ids1[] = { (char *) I915 "-1" };
        Built b[2];

        /* Each container gets only its own request's devices: the second one asks for a
         * share of the same GPU, so it may have its nodes. */
        c[0].devices_ids = ids0;
        c[0].n_devices_ids = 1;
        c[1].devices_ids = ids1;
        c[1].n_devices_ids = 1;
        req.container_requests = cp;
        req.n_container_requests = 2;
        build(&intel_ok, &b[0]);
        build(&intel_ok, &b[1]);
        rp[0] = &b[0].c;
        rp[1] = &b[1].c;
        resp.container_responses = rp;
        resp.n_container_responses = 2;
        ck_assert_int_eq(gate_check_allocate(s, PREFIX, "gpu.intel.com/i915", &req, &resp, &reason), 0);

        /* The second container asks for the xe GPU: the i915 nodes are not its. */
        ids1[0] = (char *) XE;
        ck_assert_int_eq(gate_check_allocate(s, PREFIX, "gpu.intel.com/i915", &req, &resp, &reason), -EPERM);
        ck_assert_ptr_nonnull(strstr(reason, "container 1:"));
        reason = mfree(reason);

        /* A count that is not the request's. */
        resp.n_container_responses = 1;
        ck_assert_int_eq(gate_check_allocate(s, PREFIX, "gpu.intel.com/i915", &req, &resp, &reason), -EINVAL);
        ck_assert_ptr_null(reason);
}
END_TEST

START_TEST(test_hostile_text) {
        _cleanup_(probe_gpus_freep) ProbeGpus *s = node_inventory();
        _cleanup_free_ char *reason = NULL, *long_key = NULL;

        /* Control characters and length never reach the log or the kubelet as they are. */
        long_key = malloc(70001);
        ck_assert_ptr_nonnull(long_key);
        memset(long_key, 'A', 70000);
        long_key[0] = '\n';
        long_key[1] = '\033';
        long_key[70000] = 0;
        ck_assert_int_eq(check1(s, "gpu.intel.com/i915", IDS(I915), &(TAnswer) { .envs = { { long_key, "x" } } },
                                &reason), -EPERM);
        ck_assert_ptr_null(strchr(reason, '\n'));
        ck_assert_ptr_null(strchr(reason, '\033'));
        ck_assert_uint_lt(strlen(reason), 400);
        ck_assert_ptr_nonnull(strstr(reason, "'??AAA"));
}
END_TEST

START_TEST(test_hostile_inventory) {
        /* Each of these objects is left out whole: its devices grant nothing. */
        TGpu bad[] = { gpu_i915, gpu_i915, gpu_i915, gpu_i915, gpu_i915, gpu_i915, gpu_i915, gpu_nv0, gpu_nv0, gpu_i915 };
        const TGpu *l[ELEMENTSOF(bad) + 1];
        _cleanup_(probe_gpus_freep) ProbeGpus *s = NULL;
        size_t skipped = 0;

        bad[0].nodes[1] = "/dev/../etc/shadow";
        bad[1].by_path[0] = "/etc/passwd";
        bad[2].id = "0000:03:00.0,GPU-x";
        bad[3].mps = "/";
        bad[4].id_as_int = true;
        for (size_t i = 0; i < 17; i++)
                bad[5].nodes[i] = "/dev/dri/card0";
        bad[6].card = "dri/card0";
        bad[7].n_migs = 2;      /* the same MIG device index twice */
        bad[7].migs[1] = bad[7].migs[0];
        bad[7].migs[1].uuid = "MIG-other";
        bad[8].index = 4096;
        bad[9].path = "/io/kgpu/Probe1/gpu/a/b";
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                l[i] = &bad[i];
        l[ELEMENTSOF(bad)] = &gpu_xe;
        s = inventory(l, ELEMENTSOF(l), &skipped);
        ck_assert_uint_eq(skipped, ELEMENTSOF(bad) - 1);        /* the bad path is no GPU object */
        ck_assert_uint_eq(s->n_gpus, 1);
        ck_assert_str_eq(s->gpus[0]->id, XE);
        refused(s, "gpu.intel.com/i915", IDS(I915), &intel_ok, "name no GPU");
        refused(s, "nvidia.com/gpu", IDS(NV0), &(TAnswer) { .envs = { { "NVIDIA_VISIBLE_DEVICES", NV0 } } },
                "name no GPU");
        pass(s, "gpu.intel.com/xe", IDS(XE), &(TAnswer) { .devices = { { "/dev/dri/card1", "/dev/dri/card1", "rw" } } });

        /* Two objects claiming one id: neither grants anything. */
        s = probe_gpus_free(s);
        bad[0] = gpu_xe;
        bad[0].path = "/io/kgpu/Probe1/gpu/twin";
        l[0] = &gpu_xe;
        l[1] = &bad[0];
        s = inventory(l, 2, &skipped);
        ck_assert_uint_eq(s->n_gpus, 2);
        refused(s, "gpu.intel.com/xe", IDS(XE), &(TAnswer) { .devices = { { "/dev/dri/card1", "/dev/dri/card1", "rw" } } },
                "name no GPU");

        /* A malformed reply changes nothing. */
        {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;

                ck_assert_int_ge(sd_bus_message_new_method_call(bus, &m, "io.kgpu.Test", "/", "io.kgpu.Test", "T"), 0);
                ck_assert_int_ge(sd_bus_message_append(m, "a{ss}", 1, "a", "b"), 0);
                seal(m);
                ck_assert_int_eq(probe_gpus_replace(s, m, NULL), -EBADMSG);
                ck_assert_uint_eq(s->n_gpus, 2);
        }
}
END_TEST

START_TEST(test_updates) {
        _cleanup_(probe_gpus_freep) ProbeGpus *s = node_inventory();
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *bad = NULL, *added = NULL;
        ProbeGpu *g = probe_gpus_get(s, gpu_nv0.path), *n = NULL;
        TGpu other = gpu_xe;

        /* A PropertiesChanged carrying one property changes that one only. */
        ck_assert_ptr_nonnull(g);
        ck_assert_int_ge(sd_bus_message_new_method_call(bus, &m, "io.kgpu.Test", "/", "io.kgpu.Test", "T"), 0);
        ck_assert_int_ge(sd_bus_message_append(m, "a{sv}", 1, "MpsPipeDirectory", "s", "/run/other/pipe"), 0);
        seal(m);
        ck_assert_int_eq(probe_gpu_apply_properties(g, m), 0);
        ck_assert_int_eq(probe_gpus_reindex(s), 0);
        ck_assert_str_eq(g->mps_pipe_directory, "/run/other/pipe");
        ck_assert_str_eq(g->id, NV0);
        ck_assert_uint_eq(strv_length(g->device_nodes), 4);
        ck_assert_uint_eq(g->n_migs, 1);
        pass(s, "nvidia.com/gpu", IDS(NV0 "::0"), &(TAnswer) { .mounts = { { "/mps/nvidia.com/gpu/pipe", "/run/other/pipe" } },
                                                            .ro = { true } });

        /* An invalid one changes nothing. */
        ck_assert_int_ge(sd_bus_message_new_method_call(bus, &bad, "io.kgpu.Test", "/", "io.kgpu.Test", "T"), 0);
        ck_assert_int_ge(sd_bus_message_append(bad, "a{sv}", 2, "MpsPipeDirectory", "s", "/run/x/../../etc",
                                               "Driver", "s", "evil"), 0);
        seal(bad);
        ck_assert_int_eq(probe_gpu_apply_properties(g, bad), -EBADMSG);
        ck_assert_str_eq(g->mps_pipe_directory, "/run/other/pipe");
        ck_assert_str_eq(g->driver, "nvidia");

        /* An object added and removed (InterfacesAdded, InterfacesRemoved). */
        other.path = "/io/kgpu/Probe1/gpu/added";
        other.id = "0000:05:00.0";
        other.card = "/dev/dri/card2";
        {
                const TGpu *one[] = { &other };
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *r = managed_objects(one, 1);
                const char *path;

                /* Walk into the first GPU entry, as InterfacesAdded carries it. */
                ck_assert_int_gt(sd_bus_message_enter_container(r, 'a', "{oa{sa{sv}}}"), 0);
                ck_assert_int_ge(sd_bus_message_skip(r, "{oa{sa{sv}}}"), 0);
                ck_assert_int_gt(sd_bus_message_enter_container(r, 'e', "oa{sa{sv}}"), 0);
                ck_assert_int_gt(sd_bus_message_read(r, "o", &path), 0);
                ck_assert_int_eq(probe_gpus_read_interfaces(r, path, &n), 1);
        }
        ck_assert_int_eq(probe_gpus_put(s, n), 0);
        ck_assert_uint_eq(s->n_gpus, 5);
        pass(s, "gpu.intel.com/xe", IDS("0000:05:00.0"), &(TAnswer) {
                .devices = { { "/dev/dri/card2", "/dev/dri/card2", "rw" } } });
        ck_assert_int_eq(probe_gpus_remove(s, other.path), 1);
        ck_assert_int_eq(probe_gpus_remove(s, other.path), 0);
        refused(s, "gpu.intel.com/xe", IDS("0000:05:00.0"), &(TAnswer) {
                .devices = { { "/dev/dri/card2", "/dev/dri/card2", "rw" } } }, "name no GPU");
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("grpcd-gate");
        TCase *tc = tcase_create("gate");

        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_constants);
        tcase_add_test(tc, test_no_inventory);
        tcase_add_test(tc, test_intel);
        tcase_add_test(tc, test_intel_affinity_mask);
        tcase_add_test(tc, test_intel_monitoring);
        tcase_add_test(tc, test_nvidia);
        tcase_add_test(tc, test_nvidia_mig);
        tcase_add_test(tc, test_nvidia_mps);
        tcase_add_test(tc, test_containers);
        tcase_add_test(tc, test_hostile_text);
        tcase_add_test(tc, test_hostile_inventory);
        tcase_add_test(tc, test_updates);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(suite)
