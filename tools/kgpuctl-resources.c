/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* kgpuctl-resources.c — "kgpuctl resources": what the broker advertises to the kubelet. */

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/util.h"
#include "tools/kgpuctl.h"

static int print_devices(Ctl *c, const char *resource) {
        sd_bus_message *reply = NULL;
        unsigned n = 0;
        int r;

        r = ctl_call(c, "Cannot get devices", "kgpu-brokerd", KGPU_BROKER_BUS_NAME, KGPU_BROKER_PATH,
                     KGPU_BROKER_INTERFACE, "GetDevices", &reply, "s", resource);
        if (r < 0)
                return r;
        r = sd_bus_message_enter_container(reply, 'a', "(ssai)");
        while (r > 0 && (r = sd_bus_message_enter_container(reply, 'r', "ssai")) > 0) {
                const char *id, *health;
                const int32_t *numa;
                size_t sz = 0;

                r = sd_bus_message_read(reply, "ss", &id, &health);
                if (r < 0)
                        break;
                r = sd_bus_message_read_array(reply, 'i', (const void **) &numa, &sz);
                if (r < 0)
                        break;
                if (c->json) {
                        printf("%s{\"id\":", n ? "," : "");
                        ctl_json_string(id);
                        printf(",\"health\":");
                        ctl_json_string(health);
                        printf(",\"numa_nodes\":[");
                        for (size_t i = 0; i < sz / sizeof(int32_t); i++)
                                printf("%s%d", i ? "," : "", numa[i]);
                        printf("]}");
                } else {
                        printf("  %-30s %-10s numa:", id, health);
                        for (size_t i = 0; i < sz / sizeof(int32_t); i++)
                                printf("%s%d", i ? "," : "", numa[i]);
                        printf("%s\n", sz ? "" : "-");
                }
                n++;
                r = sd_bus_message_exit_container(reply);
        }
        sd_bus_message_unref(reply);
        if (r < 0) {
                fprintf(stderr, "Malformed reply from kgpu-brokerd: %s\n", strerror(-r));
                return r;
        }
        return 0;
}

int ctl_resources(Ctl *c, int argc, char **argv) {
        sd_bus_message *reply = NULL;
        unsigned n = 0;
        int r;

        r = ctl_call(c, "Cannot list resources", "kgpu-brokerd", KGPU_BROKER_BUS_NAME, KGPU_BROKER_PATH,
                     KGPU_BROKER_INTERFACE, "ListResources", &reply, "");
        if (r < 0)
                return r;
        if (c->json)
                printf("[");
        r = sd_bus_message_enter_container(reply, 'a', "(sbb)");
        while (r > 0) {
                const char *name;
                int pre_start, preferred;

                r = sd_bus_message_read(reply, "(sbb)", &name, &pre_start, &preferred);
                if (r <= 0)
                        break;
                if (c->json) {
                        printf("%s{\"name\":", n ? "," : "");
                        ctl_json_string(name);
                        printf(",\"pre_start_required\":%s,\"get_preferred_allocation_available\":%s,\"devices\":[",
                               pre_start ? "true" : "false", preferred ? "true" : "false");
                } else
                        printf("%s%s (pre-start: %s, preferred allocation: %s)\n", n ? "\n" : "", name,
                               pre_start ? "yes" : "no", preferred ? "yes" : "no");
                r = print_devices(c, name);
                if (c->json)
                        printf("]}");
                n++;
                if (r < 0)
                        break;
                r = 1;
        }
        sd_bus_message_unref(reply);
        if (c->json)
                printf("]\n");
        else if (n == 0)
                printf("No resources advertised.\n");
        return r < 0 ? r : 0;
}
