/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-probe-props.c — libFuzzer target for the broker's reader of the probe's
 * io.kgpu.Gpu1 properties (probe_gpu_properties_apply()), then the resource table the
 * accepted values feed (resources_update_gpu(), resources_get_devices()).
 *
 * Contract: input byte 0 picks the body signature (mostly the right "a{sv}", also
 * wrong shapes); the rest is a fuzz-bus.h recipe whose words are the Gpu1 property
 * names and typical values. On failure the GpuInfo must be exactly as before; on
 * success its strings are set and its NUMA node is -1 or a real node. A crash, a
 * leak or a sanitizer report is a bug.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "common/log.h"
#include "daemons/broker/probe-client.h"
#include "daemons/broker/resources.h"
#include "fuzz-bus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const words[] = {
        "Id", "Vendor", "Driver", "CardNode", "RenderNode", "Health", "HealthReason",
        "NumaNode", "DeviceId", "DeviceNodes", "ByPathNodes", "PciAddress", "MemoryBytes",
        "Healthy", "Unhealthy", "intel", "nvidia", "i915", "xe", "0000:03:00.0",
        "/dev/dri/card0", "/dev/dri/renderD128", "/dev/../etc/shadow", "/dev/dri/", "dri/card0",
        "/dev//dri/card0", "/dev/dri/by-path/pci-0000:03:00.0-card", "", NULL,
};

static const char *const signatures[] = {
        "a{sv}", "a{sv}", "a{sv}", "a{sv}", "a{sv}", "a{sv}",
        "a{ss}", "a{sv}s", "as", "s", "a{si}", "v",
};

static bool str_eq(const char *a, const char *b) {
        return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool info_eq(const GpuInfo *a, const GpuInfo *b) {
        return str_eq(a->id, b->id) && str_eq(a->vendor, b->vendor) && str_eq(a->driver, b->driver) &&
               str_eq(a->card_node, b->card_node) && str_eq(a->render_node, b->render_node) &&
               str_eq(a->health_reason, b->health_reason) &&
               a->numa_node == b->numa_node && a->device_id == b->device_id && a->healthy == b->healthy;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        FuzzInput in = { .p = data, .n = size, .words = words };
        const char *sig;
        sd_bus_message *m = NULL;
        GpuInfo info = {}, before = {};
        int r;

        log_set_max_level(LOG_CRIT);
        if (size < 1)
                return 0;
        sig = signatures[fuzz_input_byte(&in) % (sizeof signatures / sizeof signatures[0])];
        if (fuzz_bus_build(sig, &in, &m) < 0)
                return 0;

        info.id = strdup("0000:03:00.0");
        info.vendor = strdup("intel");
        info.driver = strdup("i915");
        info.card_node = strdup("/dev/dri/card0");
        info.render_node = strdup("/dev/dri/renderD128");
        info.health_reason = strdup("");
        info.numa_node = -1;
        info.healthy = true;
        if (!info.id || !info.vendor || !info.driver || !info.card_node || !info.render_node ||
            !info.health_reason || gpu_info_copy(&info, &before) < 0)
                abort();

        r = probe_gpu_properties_apply(m, &info);
        if (r < 0) {
                if (!info_eq(&info, &before))
                        abort();
        } else {
                Resources *res = NULL;
                char **changed = NULL;

                if (!info.id || !info.vendor || !info.driver || !info.card_node || !info.render_node ||
                    !info.health_reason || info.numa_node < -1)
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
