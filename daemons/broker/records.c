/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * records.c — the shared GPU, device and answer records.
 *
 * Contract: see records.h. Pure: no D-Bus, no I/O.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/broker/policy.h"
#include "daemons/broker/records.h"

void gpu_info_done(GpuInfo *info) {
        if (!info)
                return;
        info->id = mfree(info->id);
        info->vendor = mfree(info->vendor);
        info->driver = mfree(info->driver);
        info->card_node = mfree(info->card_node);
        info->render_node = mfree(info->render_node);
        info->health_reason = mfree(info->health_reason);
        strv_free(info->device_nodes);
        info->device_nodes = NULL;
        strv_free(info->by_path_nodes);
        info->by_path_nodes = NULL;
        strv_free(info->mei_nodes);
        info->mei_nodes = NULL;
        info->uuid = mfree(info->uuid);
        info->product = mfree(info->product);
        info->compute_mode = mfree(info->compute_mode);
        info->mig_mode = mfree(info->mig_mode);
        info->compute_capability = mfree(info->compute_capability);
        info->mps_state = mfree(info->mps_state);
        info->mps_pipe_directory = mfree(info->mps_pipe_directory);
        for (size_t i = 0; i < info->n_mig_devices; i++) {
                free(info->mig_devices[i].uuid);
                free(info->mig_devices[i].profile);
                strv_free(info->mig_devices[i].device_nodes);
        }
        info->mig_devices = mfree(info->mig_devices);
        info->n_mig_devices = 0;
        for (size_t i = 0; i < info->n_links; i++) {
                free(info->links[i].peer);
                free(info->links[i].type);
        }
        info->links = mfree(info->links);
        info->n_links = 0;
}

static int mig_devices_copy(const GpuInfo *from, GpuInfo *to) {
        if (from->n_mig_devices == 0)
                return 0;
        to->mig_devices = calloc(from->n_mig_devices, sizeof(MigDeviceInfo));
        if (!to->mig_devices)
                return -ENOMEM;
        for (size_t i = 0; i < from->n_mig_devices; i++) {
                const MigDeviceInfo *f = &from->mig_devices[i];
                MigDeviceInfo *t = &to->mig_devices[i];

                to->n_mig_devices = i + 1;
                *t = (MigDeviceInfo) { .index = f->index, .gi = f->gi, .ci = f->ci, .memory_bytes = f->memory_bytes };
                if (free_and_strdup(&t->uuid, f->uuid ?: "") < 0 ||
                    free_and_strdup(&t->profile, f->profile ?: "") < 0 ||
                    !(t->device_nodes = strv_copy(f->device_nodes)))
                        return -ENOMEM;
        }
        return 0;
}

static int links_copy(const GpuInfo *from, GpuInfo *to) {
        if (from->n_links == 0)
                return 0;
        to->links = calloc(from->n_links, sizeof(GpuLinkInfo));
        if (!to->links)
                return -ENOMEM;
        for (size_t i = 0; i < from->n_links; i++) {
                to->n_links = i + 1;
                to->links[i].nvlinks = from->links[i].nvlinks;
                if (free_and_strdup(&to->links[i].peer, from->links[i].peer ?: "") < 0 ||
                    free_and_strdup(&to->links[i].type, from->links[i].type ?: "") < 0)
                        return -ENOMEM;
        }
        return 0;
}

int gpu_info_copy(const GpuInfo *from, GpuInfo *to) {
        GpuInfo c = {
                .numa_node = from->numa_node,
                .device_id = from->device_id,
                .healthy = from->healthy,
                .index = from->index,
                .memory_bytes = from->memory_bytes,
        };

        if (free_and_strdup(&c.id, from->id ?: "") < 0 ||
            free_and_strdup(&c.vendor, from->vendor ?: "") < 0 ||
            free_and_strdup(&c.driver, from->driver ?: "") < 0 ||
            free_and_strdup(&c.card_node, from->card_node ?: "") < 0 ||
            free_and_strdup(&c.render_node, from->render_node ?: "") < 0 ||
            free_and_strdup(&c.health_reason, from->health_reason ?: "") < 0 ||
            (from->device_nodes && !(c.device_nodes = strv_copy(from->device_nodes))) ||
            (from->by_path_nodes && !(c.by_path_nodes = strv_copy(from->by_path_nodes))) ||
            (from->mei_nodes && !(c.mei_nodes = strv_copy(from->mei_nodes))) ||
            free_and_strdup(&c.uuid, from->uuid ?: "") < 0 ||
            free_and_strdup(&c.product, from->product ?: "") < 0 ||
            free_and_strdup(&c.compute_mode, from->compute_mode ?: "") < 0 ||
            free_and_strdup(&c.mig_mode, from->mig_mode ?: "") < 0 ||
            free_and_strdup(&c.compute_capability, from->compute_capability ?: "") < 0 ||
            free_and_strdup(&c.mps_state, from->mps_state ?: "") < 0 ||
            free_and_strdup(&c.mps_pipe_directory, from->mps_pipe_directory ?: "") < 0 ||
            mig_devices_copy(from, &c) < 0 || links_copy(from, &c) < 0) {
                gpu_info_done(&c);
                return -ENOMEM;
        }
        *to = c;
        return 0;
}

int resource_error_set(ResourceError *e, const char *name, int error, const char *format, ...) {
        va_list ap;

        if (e) {
                e->name = name;
                va_start(ap, format);
                (void) vsnprintf(e->message, sizeof(e->message), format, ap);
                va_end(ap);
                /* Ids come from callers; keep messages printable ASCII (and thus UTF-8). */
                for (char *p = e->message; *p; p++)
                        if ((unsigned char) *p < 0x20 || (unsigned char) *p >= 0x7f)
                                *p = '?';
        }
        return -(error < 0 ? -error : error);
}

static int device_cmp(const void *a, const void *b) {
        return policy_id_cmp(((const Device *) a)->id, ((const Device *) b)->id);
}

const Device *resources_find_device(const Device *d, size_t n, const char *id) {
        Device key = { .id = id };
        const Device *f;

        if (!id || n == 0)
                return NULL;
        f = bsearch(&key, d, n, sizeof(Device), device_cmp);
        return f && streq(f->id, id) ? f : NULL;
}

void device_specs_add(DeviceSpec *specs, size_t *n, const char *path) {
        if (isempty(path))
                return;
        for (size_t i = 0; i < *n; i++)
                if (streq(specs[i].host_path, path))
                        return;
        specs[(*n)++] = (DeviceSpec) {
                .container_path = path,
                .host_path = path,
                .permissions = "rw",
        };
}
