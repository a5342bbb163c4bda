/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* kgpuctl-allocations.c — "kgpuctl allocations": every allocation the broker holds. */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/bus-names.h"
#include "common/util.h"
#include "tools/kgpuctl.h"

int ctl_allocations(Ctl *c, int argc, char **argv) {
        sd_bus_message *reply = NULL;
        unsigned n = 0;
        int r;

        r = ctl_call(c, "Cannot list allocations", "kgpu-brokerd", KGPU_BROKER_BUS_NAME, KGPU_BROKER_PATH,
                     KGPU_BROKER_INTERFACE, "ListAllocations", &reply, "");
        if (r < 0)
                return r;
        if (c->json)
                printf("[");
        else
                printf("%-6s %-24s %-20s %s\n", "ID", "RESOURCE", "CREATED", "DEVICES");
        r = sd_bus_message_enter_container(reply, 'a', "(tsast)");
        while (r > 0 && (r = sd_bus_message_enter_container(reply, 'r', "tsast")) > 0) {
                _cleanup_strv_free_ char **devices = NULL;
                _cleanup_free_ char *joined = NULL;
                const char *resource;
                uint64_t id, created;
                char when[32] = "-";
                time_t t;
                struct tm tm;

                r = sd_bus_message_read(reply, "ts", &id, &resource);
                if (r < 0)
                        break;
                r = sd_bus_message_read_strv(reply, &devices);
                if (r < 0)
                        break;
                r = sd_bus_message_read(reply, "t", &created);
                if (r < 0)
                        break;
                t = (time_t) (created / 1000000ULL);
                if (gmtime_r(&t, &tm))
                        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
                if (c->json) {
                        printf("%s{\"id\":%llu,\"resource\":", n ? "," : "", (unsigned long long) id);
                        ctl_json_string(resource);
                        printf(",\"created_usec\":%llu,\"devices\":[", (unsigned long long) created);
                        for (size_t i = 0; devices && devices[i]; i++) {
                                printf("%s", i ? "," : "");
                                ctl_json_string(devices[i]);
                        }
                        printf("]}");
                } else {
                        joined = strv_join(devices, ",");
                        printf("%-6llu %-24s %-20s %s\n", (unsigned long long) id, resource, when, joined ?: "");
                }
                n++;
                r = sd_bus_message_exit_container(reply);
        }
        sd_bus_message_unref(reply);
        if (c->json)
                printf("]\n");
        if (r < 0) {
                fprintf(stderr, "Malformed reply from kgpu-brokerd: %s\n", strerror(-r));
                return r;
        }
        return 0;
}
