/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia.c — the NVIDIA backend: its options, the device table kept current, its devices,
 * and its table of operations (backend.h).
 *
 * Contract: see nvidia.h. Pure: no D-Bus, no I/O, no logging. The device table (at
 * most NVIDIA_GPUS_MAX GPUs x NVIDIA_REPLICAS_MAX devices) is rebuilt from scratch
 * (nvidia-table.c) when a GPU's layout or the options change, and updated in place when
 * only health, NUMA node or MPS state did. Allocate answers are in nvidia-allocate.c,
 * preferred allocations in nvidia-preferred.c.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/broker/nvidia-internal.h"

/* ---- state ---- */

static void shares_free(NvidiaShare *l, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(l[i].name);
                free(l[i].resource);
                strv_free(l[i].devices);
        }
        free(l);
}

static void *nvidia_state_free(void *p) {
        NvidiaState *s = p;

        if (!s)
                return NULL;
        free(s->cdi_prefix);
        shares_free(s->shares, s->n_shares);
        nvidia_table_done(&s->table);
        strv_free(s->ever);
        strv_free(s->shapes);
        return mfree(s);
}

NvidiaState *nvidia_state(const Resources *r) {
        return resources_backend_state(r, &nvidia_backend);
}

/* ---- options ---- */

/* The advertised name of a sharing entry (config_shared_resource_name()'s rule). */
static char *share_resource_name(const ConfigSharing *s, const ConfigSharedResource *e) {
        char *n = NULL;

        if (!isempty(e->rename))
                return strdup(e->rename);
        if (s->rename_by_default)
                return asprintf(&n, "%s.shared", e->name) < 0 ? NULL : n;
        return strdup(e->name);
}

static int shares_add(const ConfigSharing *cs, NvidiaSharing kind, NvidiaShare *l, size_t *n) {
        for (size_t i = 0; i < cs->n_resources; i++) {
                const ConfigSharedResource *e = &cs->resources[i];
                NvidiaShare *s = &l[(*n)++];

                if (isempty(e->name) || strlen(e->name) > RESOURCES_NAME_MAX ||
                    e->replicas < 1 || e->replicas > NVIDIA_REPLICAS_MAX ||
                    strv_length(e->devices) > RESOURCES_IDS_MAX)
                        return -EINVAL;
                *s = (NvidiaShare) {
                        .kind = kind,
                        .replicas = e->replicas,
                        .memory_bytes = kind == SHARING_MPS ? e->memory_bytes : 0,
                };
                s->name = strdup(e->name);
                s->resource = share_resource_name(cs, e);
                if (!s->name || !s->resource)
                        return -ENOMEM;
                if (isempty(s->resource) || strlen(s->resource) > RESOURCES_NAME_MAX)
                        return -EINVAL;
                if (e->devices) {
                        s->devices = strv_copy(e->devices);
                        if (!s->devices)
                                return -ENOMEM;
                }
        }
        return 0;
}

int resources_set_nvidia_options(Resources *r, const Config *c) {
        _cleanup_free_ char *prefix = NULL;
        NvidiaShare *shares = NULL;
        size_t n_shares = 0, room;
        NvidiaState *s;
        int k;

        if (!r || !c)
                return -EINVAL;
        room = c->nvidia_time_slicing.n_resources + c->nvidia_mps.n_resources;
        if (room > 256)
                return -EINVAL;
        shares = calloc(room ?: 1, sizeof(NvidiaShare));
        if (!shares)
                return -ENOMEM;
        /* MPS entries first: a device an MPS entry matches is an MPS slice. */
        k = shares_add(&c->nvidia_mps, SHARING_MPS, shares, &n_shares);
        if (k >= 0)
                k = shares_add(&c->nvidia_time_slicing, SHARING_TIME_SLICING, shares, &n_shares);
        prefix = strdup(c->nvidia_cdi_annotation_prefix ?: "cdi.k8s.io/");
        if (k >= 0 && !prefix)
                k = -ENOMEM;
        if (k >= 0 && strlen(prefix) > RESOURCES_NAME_MAX)
                k = -EINVAL;
        if (k < 0) {
                shares_free(shares, n_shares);
                return k;
        }

        s = nvidia_state(r);
        if (!s) {
                s = calloc(1, sizeof(NvidiaState));
                if (!s) {
                        shares_free(shares, n_shares);
                        return -ENOMEM;
                }
                resources_backend_set_state(r, &nvidia_backend, s);
        }
        s->enabled = c->nvidia_enabled;
        s->mig_strategy = c->nvidia_mig_strategy;
        s->id_strategy = c->nvidia_device_id_strategy;
        s->list_strategy = c->nvidia_device_list_strategy ?: DEVICE_LIST_STRATEGY_ENVVAR;
        s->pass_device_specs = c->nvidia_pass_device_specs;
        s->replica_policy = c->nvidia_replica_policy;
        s->ts_fail_greater_than_one = c->nvidia_time_slicing.fail_requests_greater_than_one;
        s->mps_fail_greater_than_one = c->nvidia_mps.fail_requests_greater_than_one;
        free(s->cdi_prefix);
        s->cdi_prefix = TAKE_PTR(prefix);
        shares_free(s->shares, s->n_shares);
        s->shares = shares;
        s->n_shares = n_shares;
        s->shapes = strv_free(s->shapes);

        return resources_refresh(r, NULL);
}

static bool same_devices(const NvidiaTable *a, const NvidiaTable *b, const char *name) {
        const NvidiaResource *x = nvidia_table_resource(a, name), *y = nvidia_table_resource(b, name);
        size_t nx = x ? x->n : 0, ny = y ? y->n : 0;

        if (nx != ny)
                return false;
        for (size_t i = 0; i < nx; i++) {
                const NvidiaDevice *p = &a->devices[x->start + i], *q = &b->devices[y->start + i];

                if (!streq(p->id, q->id) || p->healthy != q->healthy || p->numa_node != q->numa_node)
                        return false;
        }
        return true;
}

/* Everything of a GPU record the table's ids and resources depend on (health, NUMA
 * node and MPS state only change device fields; links and nodes are read at use). */
static char *gpu_shape(const GpuInfo *g) {
        _cleanup_free_ char *mig = NULL;
        char *shape = NULL;

        if (!nvidia_gpu_is_nvidia(g))
                return strdup("-");
        for (size_t i = 0; i < g->n_mig_devices; i++) {
                char *n = NULL;

                if (asprintf(&n, "%s\x1e%" PRIu32 "\x1f%s\x1f%s", mig ?: "", g->mig_devices[i].index,
                             g->mig_devices[i].uuid ?: "", g->mig_devices[i].profile ?: "") < 0)
                        return NULL;
                free(mig);
                mig = n;
        }
        if (asprintf(&shape, "%s\x1f%s\x1f%" PRIi32 "\x1f%" PRIu64 "\x1f%s\x1f%s", g->id, g->uuid ?: "", g->index,
                     g->memory_bytes, g->mig_mode ?: "", mig ?: "") < 0)
                return NULL;
        return shape;
}

static int nvidia_refresh(Resources *r, char ***ret_advertised, char ***ret_changed) {
        _cleanup_strv_free_ char **shapes = NULL;
        NvidiaState *s = nvidia_state(r);
        NvidiaTable t = {};
        int k;

        if (!s)
                return 0;
        shapes = calloc(r->n_gpus + 1, sizeof(char *));
        if (!shapes) {
                k = -ENOMEM;
                goto fail;
        }
        for (size_t i = 0; i < r->n_gpus; i++)
                if (!(shapes[i] = gpu_shape(&r->gpus[i].info))) {
                        k = -ENOMEM;
                        goto fail;
                }

        if (s->shapes && strv_equal(s->shapes, shapes)) {
                /* Same GPUs, same layout: only health and NUMA nodes may have changed;
                 * update the devices in place (no rebuild: 64 x 1024 ids stay cheap). */
                for (size_t i = 0; i < s->table.n_devices; i++) {
                        NvidiaDevice *d = &s->table.devices[i];
                        const GpuInfo *g = &r->gpus[s->table.units[d->unit].gpu].info;
                        bool healthy = nvidia_device_healthy(g, d->sharing);
                        const char *name = s->table.resources[d->resource].name;

                        if (healthy == d->healthy && g->numa_node == d->numa_node)
                                continue;
                        d->healthy = healthy;
                        d->numa_node = g->numa_node;
                        if (ret_changed && !strv_contains(*ret_changed, name)) {
                                k = strv_extend(ret_changed, name);
                                if (k < 0)
                                        return k;
                        }
                }
                for (size_t i = 0; ret_advertised && i < s->table.n_resources; i++)
                        if (!strv_contains(*ret_advertised, s->table.resources[i].name)) {
                                k = strv_extend(ret_advertised, s->table.resources[i].name);
                                if (k < 0)
                                        return k;
                        }
                return 0;
        }

        k = nvidia_table_build(r, s, &t);
        if (k < 0)
                goto fail;

        for (size_t i = 0; i < t.n_resources; i++) {
                if (!strv_contains(s->ever, t.resources[i].name)) {
                        k = strv_extend(&s->ever, t.resources[i].name);
                        if (k < 0)
                                goto fail;
                }
                if (ret_advertised && !strv_contains(*ret_advertised, t.resources[i].name)) {
                        k = strv_extend(ret_advertised, t.resources[i].name);
                        if (k < 0)
                                goto fail;
                }
        }
        for (char **n = s->ever; ret_changed && n && *n; n++)
                if (!same_devices(&s->table, &t, *n) && !strv_contains(*ret_changed, *n)) {
                        k = strv_extend(ret_changed, *n);
                        if (k < 0)
                                goto fail;
                }

        nvidia_table_done(&s->table);
        s->table = t;
        strv_free(s->shapes);
        s->shapes = TAKE_PTR(shapes);
        return 0;
fail:
        /* The old table may point at GPU indexes that moved (a removal): serve nothing
         * until a refresh succeeds rather than stale devices. */
        nvidia_table_done(&t);
        nvidia_table_done(&s->table);
        s->shapes = strv_free(s->shapes);
        return k;
}

/* Rebuilds the device table and advertises its names. */
static int nvidia_refresh_names(Resources *r, char ***changed) {
        _cleanup_strv_free_ char **advertised = NULL;
        int k;

        if (!nvidia_state(r))
                return 0;
        k = nvidia_refresh(r, &advertised, changed);
        for (char **n = advertised; k >= 0 && n && *n; n++)
                k = resources_advertise(r, &nvidia_backend, *n, changed);
        return k;
}

const char *resources_nvidia_problem(const Resources *r) {
        return nvidia_state(r) ? nvidia_state(r)->table.problem : NULL;
}

bool resources_is_nvidia(const Resources *r, const char *resource) {
        return nvidia_state(r) && resource && strv_contains(nvidia_state(r)->ever, resource);
}

static int nvidia_get_devices(const Resources *r, const char *resource, Device **ret, size_t *ret_n) {
        const NvidiaState *s = nvidia_state(r);
        const NvidiaResource *res = s ? nvidia_table_resource(&s->table, resource) : NULL;
        _cleanup_free_ Device *d = NULL;
        size_t n = res ? res->n : 0;

        d = calloc(n ?: 1, sizeof(Device));
        if (!d)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                const NvidiaDevice *x = &s->table.devices[res->start + i];

                d[i] = (Device) {
                        .id = x->id,
                        .healthy = x->healthy,
                        .numa_node = x->numa_node,
                        .gpu = nvidia_unit_gpu(r, &s->table.units[x->unit]),
                        .share = x->replica,
                };
        }
        *ret = TAKE_PTR(d);
        *ret_n = n;
        return 0;
}

/* NVIDIA replicas are ids of their own: no per-GPU container limit. */
static uint32_t nvidia_share_limit(const Resources *r, const char *resource) {
        return 0;
}

static int nvidia_configure(Resources *r, const Config *c, const char **ret_what) {
        int k;

        k = resources_set_nvidia_options(r, c);
        if (k < 0 && k != -ENOMEM)
                *ret_what = "NVIDIA sharing configuration (sharing.timeSlicing / sharing.mps resources)";
        return k;
}

const Backend nvidia_backend = {
        .name = "nvidia",
        .state_free = nvidia_state_free,
        .configure = nvidia_configure,
        .refresh = nvidia_refresh_names,
        .devices = nvidia_get_devices,
        .check_allocate = nvidia_check_allocate,
        .allocate_specs = nvidia_allocate_specs,
        .allocate_extras = nvidia_allocate_extras,
        .allocate_envs = nvidia_allocate_envs,
        .preferred_allocation = nvidia_preferred,
        .share_limit = nvidia_share_limit,
        .problem = resources_nvidia_problem,
        .label = "NVIDIA GPUs",
};
