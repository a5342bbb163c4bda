/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * inventory.c — the probe's last GPU inventory, kept in the state database.
 *
 * Contract: see inventory.h. Rows read back are validated by the store and again by
 * resources_update_gpu(), like a probe object would be.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/inventory.h"
#include "daemons/broker/manager.h"

/* strv -> "a\nb", NULL for NULL; -EINVAL if an element holds a newline. */
static int join_nodes(char * const *l, char **ret) {
        for (char * const *i = l; i && *i; i++)
                if (strchr(*i, '\n'))
                        return -EINVAL;
        if (!l) {
                *ret = NULL;
                return 0;
        }
        *ret = strv_join((char **) l, "\n");
        return *ret ? 0 : -ENOMEM;
}

static int split_nodes(const char *s, char ***ret) {
        _cleanup_strv_free_ char **l = NULL;
        const char *p = s;

        if (!s) {
                *ret = NULL;
                return 0;
        }
        l = calloc(1, sizeof(char *));
        if (!l)
                return -ENOMEM;
        while (*p) {
                const char *e = strchrnul(p, '\n');
                char *x = strndup(p, (size_t) (e - p));

                if (!x)
                        return -ENOMEM;
                if (strv_consume(&l, x) < 0)
                        return -ENOMEM;
                p = *e ? e + 1 : e;
        }
        *ret = TAKE_PTR(l);
        return 0;
}

void inventory_save(Manager *m) {
        const Resources *res = m->resources;
        _cleanup_free_ StoreInventoryGpu *g = NULL;
        char **joined = NULL;
        size_t n = 0;
        int r = 0;

        if (!m->store)
                return;
        g = calloc(res->n_gpus ?: 1, sizeof(StoreInventoryGpu));
        joined = calloc(2 * res->n_gpus + 1, sizeof(char *));
        if (!g || !joined) {
                free(joined);
                log_oom();
                return;
        }
        for (size_t i = 0; i < res->n_gpus; i++) {
                const Gpu *gpu = &res->gpus[i];
                char *dn = NULL, *bp = NULL;

                if (join_nodes(gpu->info.device_nodes, &dn) < 0 || join_nodes(gpu->info.by_path_nodes, &bp) < 0) {
                        free(dn);
                        log_debug("Not saving GPU %s: a device node name holds a newline.", gpu->info.id);
                        continue;
                }
                joined[2 * n] = dn;
                joined[2 * n + 1] = bp;
                g[n++] = (StoreInventoryGpu) {
                        .path = gpu->path,
                        .id = gpu->info.id,
                        .vendor = gpu->info.vendor,
                        .driver = gpu->info.driver,
                        .card_node = gpu->info.card_node,
                        .render_node = gpu->info.render_node,
                        .health_reason = gpu->info.health_reason,
                        .device_nodes = dn,
                        .by_path_nodes = bp,
                        .numa_node = gpu->info.numa_node,
                        .device_id = gpu->info.device_id,
                        .healthy = gpu->info.healthy,
                };
        }
        r = store_save_inventory(m->store, g, n);
        for (size_t i = 0; i < 2 * n; i++)
                free(joined[i]);
        free(joined);
        if (r < 0)
                log_warning_errno(r, "Failed to save the GPU inventory in %s, ignoring: %m",
                                  store_get_path(m->store));
        else
                log_debug("Saved the inventory of %zu GPU(s).", n);
}

static int load_one(const StoreInventoryGpu *s, void *userdata) {
        Manager *m = userdata;
        GpuInfo info = {
                .id = (char *) s->id,
                .vendor = (char *) s->vendor,
                .driver = (char *) s->driver,
                .card_node = (char *) s->card_node,
                .render_node = (char *) s->render_node,
                .health_reason = (char *) s->health_reason,
                .numa_node = s->numa_node,
                .device_id = s->device_id,
                .healthy = s->healthy,
                .index = -1,            /* NVIDIA fields are not stored: unknown until the probe answers */
        };
        int r;

        r = split_nodes(s->device_nodes, &info.device_nodes);
        if (r >= 0)
                r = split_nodes(s->by_path_nodes, &info.by_path_nodes);
        if (r >= 0) {
                r = resources_update_gpu(m->resources, s->path, &info, NULL);
                if (r < 0 && r != -ENOMEM) {
                        log_debug_errno(r, "Saved GPU %s refused, skipping: %m", s->path);
                        r = 0;
                }
        }
        strv_free(info.device_nodes);
        strv_free(info.by_path_nodes);
        return r;
}

int inventory_load(Manager *m) {
        int r;

        if (!m->store)
                return 0;
        r = store_foreach_inventory(m->store, load_one, m);
        if (r < 0)
                return log_warning_errno(r, "Failed to read the saved GPU inventory from %s, ignoring: %m",
                                         store_get_path(m->store));
        if (m->resources->n_gpus > 0)
                log_info("Serving the GPU inventory saved by the last run (%zu GPU object(s)) until the probe "
                         "reports.", m->resources->n_gpus);
        return (int) m->resources->n_gpus;
}
