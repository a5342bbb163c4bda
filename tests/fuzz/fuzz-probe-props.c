/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-probe-props.c — libFuzzer target for the broker's reader of the probe's
 * io.kgpu.Gpu1 properties (probe_gpu_properties_apply()), then the resource table the
 * accepted values feed (resources_update_gpu(), resources_get_devices()).
 *
 * Contract: input byte 0 picks the body signature (mostly the right "a{sv}", also
 * wrong shapes); the rest is a fuzz-bus.h recipe whose words are the Gpu1 property
 * names and typical values. Byte 0 >= 0xf0 instead builds an a{sv} whose variants
 * take the NVIDIA properties' types (a(ussuuast) MigDevices, a(ssy) Links, ...), which
 * fuzz-bus.c's variant table lacks: a count byte (mod 16), then per entry a name
 * string, a type byte (index into nvidia_types) and the value's recipe. On failure the
 * GpuInfo must be exactly as before; on success its strings are set, its NUMA node is
 * -1 or a real node, its index -1..4095 and its lists within their bounds. A crash, a
 * leak or a sanitizer report is a bug.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "common/log.h"
#include "daemons/broker/intel.h"
#include "daemons/broker/probe-client.h"
#include "daemons/broker/resources.h"
#include "fuzz-bus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const words[] = {
        "Id", "Vendor", "Driver", "CardNode", "RenderNode", "Health", "HealthReason",
        "NumaNode", "DeviceId", "DeviceNodes", "ByPathNodes", "PciAddress", "MemoryBytes",
        "Healthy", "Unhealthy", "intel", "nvidia", "i915", "xe", "0000:03:00.0",
        "/dev/dri/card0", "/dev/dri/renderD128", "/dev/../etc/shadow", "/dev/dri/", "dri/card0",
        "/dev//dri/card0", "/dev/dri/by-path/pci-0000:03:00.0-card", "",
        /* 28..: NVIDIA (issue 4) */
        "Index", "Uuid", "Product", "ComputeMode", "MigMode", "MigDevices", "ComputeCapability",
        "DriverVersion", "CudaVersion", "Links", "MpsState", "MpsPipeDirectory",
        "GPU-00000000-0000-0000-0000-000000000000", "MIG-0b8e5a80-1f6e-5c1a-9a43-2c6c0f1c8e11",
        "NVIDIA H100 80GB HBM3", "Default", "Exclusive_Process", "Enabled", "Disabled",
        "1g.10gb", "3g.40gb", "9.0", "NV", "PIX", "PXB", "PHB", "NODE", "SYS", "C2C",
        "running", "failed", "/run/kgpu/mps/GPU-0/pipe", "/run/kgpu/../etc",
        "/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-caps/nvidia-cap21", NULL,
};

/* Variant contents for the NVIDIA mode: the right types of every Gpu1 property, and
 * near misses. */
static const char *const nvidia_types[] = {
        "s", "i", "t", "q", "u", "as", "a(ussuuast)", "a(ssy)", "a(ssu)", "a(ussuuas)", "a(sss)", "b",
};

static const char *const signatures[] = {
        "a{sv}", "a{sv}", "a{sv}", "a{sv}", "a{sv}", "a{sv}",
        "a{ss}", "a{sv}s", "as", "s", "a{si}", "v",
};

/* a{sv} with NVIDIA-typed variants (see the contract above). */
static int build_nvidia(FuzzInput *in, sd_bus_message **ret) {
        static uint64_t cookie = 1;
        sd_bus_message *m = NULL;
        unsigned n;
        int r;

        r = sd_bus_message_new_method_call(fuzz_bus_get(), &m, "io.kgpu.Fuzz", "/io/kgpu/Fuzz",
                                           "io.kgpu.Fuzz", "Reply");
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(m, 'a', "{sv}");
        n = fuzz_input_byte(in) % 16;
        for (unsigned i = 0; r >= 0 && i < n; i++) {
                const char *name = fuzz_input_string(in, NULL), *t;

                r = sd_bus_message_open_container(m, 'e', "sv");
                if (r >= 0) {
                        r = sd_bus_message_append_basic(m, 's', name);
                        if (r < 0)
                                r = sd_bus_message_append_basic(m, 's', "");
                }
                t = nvidia_types[fuzz_input_byte(in) % (sizeof nvidia_types / sizeof nvidia_types[0])];
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'v', t);
                if (r >= 0)
                        r = fuzz_bus_append(m, t, in);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = sd_bus_message_seal(m, cookie++, 0);
        if (r >= 0)
                r = sd_bus_message_rewind(m, true);
        if (r < 0) {
                sd_bus_message_unref(m);
                return r;
        }
        *ret = m;
        return 0;
}

static bool str_eq(const char *a, const char *b) {
        return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool info_eq(const GpuInfo *a, const GpuInfo *b) {
        return str_eq(a->id, b->id) && str_eq(a->vendor, b->vendor) && str_eq(a->driver, b->driver) &&
               str_eq(a->card_node, b->card_node) && str_eq(a->render_node, b->render_node) &&
               str_eq(a->health_reason, b->health_reason) &&
               a->numa_node == b->numa_node && a->device_id == b->device_id && a->healthy == b->healthy &&
               str_eq(a->uuid, b->uuid) && str_eq(a->product, b->product) &&
               str_eq(a->compute_mode, b->compute_mode) && str_eq(a->mig_mode, b->mig_mode) &&
               str_eq(a->compute_capability, b->compute_capability) && str_eq(a->mps_state, b->mps_state) &&
               str_eq(a->mps_pipe_directory, b->mps_pipe_directory) && a->index == b->index &&
               a->memory_bytes == b->memory_bytes && a->n_mig_devices == b->n_mig_devices &&
               a->n_links == b->n_links &&
               (a->n_mig_devices == 0 || str_eq(a->mig_devices[0].uuid, b->mig_devices[0].uuid)) &&
               (a->n_links == 0 || str_eq(a->links[0].peer, b->links[0].peer));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        FuzzInput in = { .p = data, .n = size, .words = words };
        const char *sig;
        sd_bus_message *m = NULL;
        GpuInfo info = {}, before = {};
        uint8_t mode;
        int r;

        log_set_max_level(LOG_CRIT);
        if (size < 1)
                return 0;
        mode = fuzz_input_byte(&in);
        if (mode >= 0xf0) {
                in.budget = FUZZ_BUS_BUDGET;
                if (build_nvidia(&in, &m) < 0)
                        return 0;
        } else {
                sig = signatures[mode % (sizeof signatures / sizeof signatures[0])];
                if (fuzz_bus_build(sig, &in, &m) < 0)
                        return 0;
        }

        info.id = strdup("0000:03:00.0");
        info.vendor = strdup("intel");
        info.driver = strdup("i915");
        info.card_node = strdup("/dev/dri/card0");
        info.render_node = strdup("/dev/dri/renderD128");
        info.health_reason = strdup("");
        info.numa_node = -1;
        info.index = 0;
        info.healthy = true;
        /* One MIG device and one link, so that a refused update must keep them. */
        info.mig_devices = calloc(1, sizeof(MigDeviceInfo));
        info.links = calloc(1, sizeof(GpuLinkInfo));
        if (!info.mig_devices || !info.links)
                abort();
        info.n_mig_devices = info.n_links = 1;
        info.mig_devices[0] = (MigDeviceInfo) { .uuid = strdup("MIG-x"), .profile = strdup("1g.10gb"),
                                                .device_nodes = calloc(1, sizeof(char *)) };
        info.links[0] = (GpuLinkInfo) { .peer = strdup("GPU-y"), .type = strdup("NV"), .nvlinks = 4 };
        if (!info.id || !info.vendor || !info.driver || !info.card_node || !info.render_node ||
            !info.health_reason || !info.mig_devices[0].uuid || !info.mig_devices[0].profile ||
            !info.mig_devices[0].device_nodes || !info.links[0].peer || !info.links[0].type ||
            gpu_info_copy(&info, &before) < 0)
                abort();
        /* Compare copies with copies (gpu_info_copy() turns NULL strings into ""). */
        gpu_info_done(&info);
        if (gpu_info_copy(&before, &info) < 0)
                abort();

        r = probe_gpu_properties_apply(m, &info);
        if (r < 0) {
                if (!info_eq(&info, &before))
                        abort();
        } else {
                Resources *res = NULL;
                char **changed = NULL;

                if (!info.id || !info.vendor || !info.driver || !info.card_node || !info.render_node ||
                    !info.health_reason || info.numa_node < -1 || info.index < -1 || info.index > 4095 ||
                    info.n_mig_devices > 64 || info.n_links > 1024 || (info.n_mig_devices > 0) != !!info.mig_devices ||
                    (info.n_links > 0) != !!info.links)
                        abort();
                for (size_t i = 0; i < info.n_mig_devices; i++)
                        if (!info.mig_devices[i].uuid || !info.mig_devices[i].profile ||
                            !info.mig_devices[i].device_nodes || info.mig_devices[i].uuid[0] == 0)
                                abort();
                for (size_t i = 0; i < info.n_links; i++)
                        if (!info.links[i].peer || !info.links[i].type)
                                abort();
                /* What the broker does next with an accepted object. */
                if (resources_new(true, &res) < 0)
                        abort();
                if (resources_update_gpu(res, "/io/kgpu/Probe1/gpu/fuzz", &info, &changed) >= 0) {
                        const char *name = resources_name_for_gpu(res, &info);

                        if (name) {
                                Device *d = NULL;
                                size_t n = 0;

                                if (resources_get_devices(res, name, &d, &n) >= 0)
                                        free(d);
                        }
                }
                strv_free(changed);
                resources_free(res);
        }
        gpu_info_done(&info);
        gpu_info_done(&before);
        sd_bus_message_unref(m);
        return 0;
}
