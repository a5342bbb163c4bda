/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* kgpuctl-devices.c — "kgpuctl devices": the GPUs the probe exports (ObjectManager). */

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/bus-util.h"
#include "common/util.h"
#include "tools/kgpuctl.h"

typedef struct GpuRow {
        char *id, *driver, *card, *render, *health, *reason;
        int32_t numa;
        uint16_t device_id;
        uint64_t memory;
} GpuRow;

static int gpu_property(sd_bus_message *m, const char *name, const char *contents, void *userdata) {
        GpuRow *g = userdata;
        int r;

        if (streq(name, "Id"))
                r = bus_read_string_dup(m, &g->id);
        else if (streq(name, "Driver"))
                r = bus_read_string_dup(m, &g->driver);
        else if (streq(name, "CardNode"))
                r = bus_read_string_dup(m, &g->card);
        else if (streq(name, "RenderNode"))
                r = bus_read_string_dup(m, &g->render);
        else if (streq(name, "Health"))
                r = bus_read_string_dup(m, &g->health);
        else if (streq(name, "HealthReason"))
                r = bus_read_string_dup(m, &g->reason);
        else if (streq(name, "NumaNode"))
                r = sd_bus_message_read_basic(m, 'i', &g->numa);
        else if (streq(name, "DeviceId"))
                r = sd_bus_message_read_basic(m, 'q', &g->device_id);
        else if (streq(name, "MemoryBytes"))
                r = sd_bus_message_read_basic(m, 't', &g->memory);
        else
                return 0;
        return r < 0 ? r : 1;
}

static void gpu_row_done(GpuRow *g) {
        free(g->id);
        free(g->driver);
        free(g->card);
        free(g->render);
        free(g->health);
        free(g->reason);
}

static void print_row(Ctl *c, const GpuRow *g, bool first) {
        if (c->json) {
                printf("%s{\"id\":", first ? "" : ",");
                ctl_json_string(g->id);
                printf(",\"driver\":");
                ctl_json_string(g->driver);
                printf(",\"device_id\":\"0x%04x\",\"numa_node\":%d,\"memory_bytes\":%llu,\"card\":",
                       g->device_id, g->numa, (unsigned long long) g->memory);
                ctl_json_string(g->card);
                printf(",\"render\":");
                ctl_json_string(g->render);
                printf(",\"health\":");
                ctl_json_string(g->health);
                printf(",\"health_reason\":");
                ctl_json_string(g->reason);
                printf("}");
        } else
                printf("%-14s %-7s 0x%04x %4d %-15s %-20s %s%s%s%s\n", g->id ?: "", g->driver ?: "", g->device_id,
                       g->numa, g->card ?: "", g->render ?: "", g->health ?: "",
                       isempty(g->reason) ? "" : " (", g->reason ?: "", isempty(g->reason) ? "" : ")");
}

int ctl_devices(Ctl *c, int argc, char **argv) {
        sd_bus_message *reply = NULL;
        unsigned n = 0;
        int r;

        r = ctl_call(c, "Cannot list GPUs", "kgpu-probed", KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH,
                     "org.freedesktop.DBus.ObjectManager", "GetManagedObjects", &reply, "");
        if (r < 0)
                return r;
        if (c->json)
                printf("[");
        else
                printf("%-14s %-7s %-6s %4s %-15s %-20s %s\n", "ID", "DRIVER", "DEVICE", "NUMA", "CARD", "RENDER",
                       "HEALTH");
        r = sd_bus_message_enter_container(reply, 'a', "{oa{sa{sv}}}");
        while (r > 0 && (r = sd_bus_message_enter_container(reply, 'e', "oa{sa{sv}}")) > 0) {
                const char *path;

                r = sd_bus_message_read(reply, "o", &path);
                if (r < 0)
                        break;
                r = sd_bus_message_enter_container(reply, 'a', "{sa{sv}}");
                while (r > 0 && (r = sd_bus_message_enter_container(reply, 'e', "sa{sv}")) > 0) {
                        const char *iface;

                        r = sd_bus_message_read(reply, "s", &iface);
                        if (r < 0)
                                break;
                        if (streq(iface, KGPU_GPU_INTERFACE)) {
                                GpuRow g = { .numa = -1 };

                                r = bus_read_property_map(reply, gpu_property, &g);
                                if (r >= 0)
                                        print_row(c, &g, n++ == 0);
                                gpu_row_done(&g);
                        } else
                                r = sd_bus_message_skip(reply, "a{sv}");
                        if (r < 0)
                                break;
                        r = sd_bus_message_exit_container(reply);
                }
                if (r < 0)
                        break;
                r = sd_bus_message_exit_container(reply);
                if (r >= 0)
                        r = sd_bus_message_exit_container(reply);
        }
        sd_bus_message_unref(reply);
        if (c->json)
                printf("]\n");
        if (r < 0) {
                fprintf(stderr, "Malformed reply from kgpu-probed: %s\n", strerror(-r));
                return r;
        }
        return 0;
}
