/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* kgpuctl-status.c — "kgpuctl status": which daemons answer, their versions and uptime. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bus-names.h"
#include "common/util.h"
#include "tools/kgpuctl.h"

typedef struct DaemonStatus {
        const char *name;
        const char *bus_name;
        const char *path;
        const char *interface;
        char *version;
        uint64_t start_time;
        char *error;
} DaemonStatus;

static void query(Ctl *c, DaemonStatus *d) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        int r;

        r = sd_bus_get_property_string(c->bus, d->bus_name, d->path, d->interface, "Version", &e, &d->version);
        if (r >= 0)
                r = sd_bus_get_property_trivial(c->bus, d->bus_name, d->path, d->interface, "StartTime", &e, 't',
                                                &d->start_time);
        if (r < 0) {
                if (sd_bus_error_has_name(&e, SD_BUS_ERROR_SERVICE_UNKNOWN) ||
                    sd_bus_error_has_name(&e, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
                        d->error = strdup("not running");
                else
                        d->error = strdup(e.message ?: "error");
        }
        sd_bus_error_free(&e);
}

int ctl_status(Ctl *c, int argc, char **argv) {
        DaemonStatus ds[] = {
                { "kgpu-probed", KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH, KGPU_PROBE_INTERFACE },
                { "kgpu-brokerd", KGPU_BROKER_BUS_NAME, KGPU_BROKER_PATH, KGPU_BROKER_INTERFACE },
        };
        uint64_t now = now_usec(CLOCK_REALTIME);
        bool all_up = true;

        for (size_t i = 0; i < ELEMENTSOF(ds); i++) {
                query(c, &ds[i]);
                all_up = all_up && !ds[i].error;
        }

        if (c->json)
                printf("[");
        else
                printf("%-14s %-10s %-10s %s\n", "DAEMON", "STATE", "VERSION", "UPTIME");
        for (size_t i = 0; i < ELEMENTSOF(ds); i++) {
                uint64_t up = ds[i].start_time && now > ds[i].start_time ? (now - ds[i].start_time) / 1000000ULL : 0;

                if (c->json) {
                        printf("%s{\"daemon\":", i ? "," : "");
                        ctl_json_string(ds[i].name);
                        printf(",\"running\":%s,\"version\":", ds[i].error ? "false" : "true");
                        ctl_json_string(ds[i].version);
                        printf(",\"uptime_seconds\":%llu", (unsigned long long) up);
                        if (ds[i].error) {
                                printf(",\"error\":");
                                ctl_json_string(ds[i].error);
                        }
                        printf("}");
                } else if (ds[i].error)
                        printf("%-14s %-10s %-10s %s\n", ds[i].name, "down", "-", ds[i].error);
                else
                        printf("%-14s %-10s %-10s %llud %02lluh %02llum %02llus\n", ds[i].name, "running",
                               ds[i].version, (unsigned long long) up / 86400, (unsigned long long) up / 3600 % 24,
                               (unsigned long long) up / 60 % 60, (unsigned long long) up % 60);
                free(ds[i].version);
                free(ds[i].error);
        }
        if (c->json)
                printf("]\n");
        return all_up ? 0 : -ENOTCONN;
}
