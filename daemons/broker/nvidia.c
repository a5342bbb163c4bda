/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia.c — NVIDIA GPU records to the NVIDIA device plugin's resources, devices,
 * Allocate answers, preferred allocations and MPS limits.
 *
 * Contract: see nvidia.h. Pure: no D-Bus, no I/O, no logging. The device table (at
 * most NVIDIA_GPUS_MAX GPUs x NVIDIA_REPLICAS_MAX devices) is rebuilt from scratch when a
 * GPU's layout or the options change, and updated in place when only health, NUMA node
 * or MPS state did. Devices are sorted by (resource, policy_id_cmp(id)), the order
 * resources_get_devices() promises; lookups go through a hash index. Units (GPUs or MIG
 * devices) and devices refer to GPUs by their index in Resources.gpus: every update or
 * removal refreshes the table, so the indexes are always current.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/nvidia-sharing.h"
#include "common/util.h"
#include "daemons/broker/nvidia.h"
#include "daemons/broker/policy.h"
#include "daemons/broker/resources.h"

#define PROBLEMS_MAX 16
#define EXHAUSTIVE_MAX 10000
#define REPLICA_SUFFIX_MAX 6            /* "::1023" */

typedef enum NvidiaSharing {
        SHARING_NONE,
        SHARING_TIME_SLICING,
        SHARING_MPS,
} NvidiaSharing;

/* One sharing entry of the config, flattened. */
typedef struct NvidiaShare {
        NvidiaSharing kind;
        char *name;             /* the resource it shares */
        char *resource;         /* the resource it advertises */
        uint32_t replicas;
        uint64_t memory_bytes;  /* MPS, 0: GPU memory / replicas */
        char **devices;         /* NULL: all */
} NvidiaShare;

/* A GPU or MIG device as the runtime sees it. */
typedef struct NvidiaUnit {
        size_t gpu;             /* index in Resources.gpus */
        int32_t mig;            /* index in the GPU's mig_devices, -1: whole GPU */
        uint32_t order;         /* position in GPU order (index), then MIG device index */
        char *uuid;             /* GPU or MIG UUID: the advertised id */
        char *runtime_id;       /* deviceIDStrategy form */
        char *mount_path;       /* NVIDIA_VOLUME_MOUNTS_ROOT/<runtime id> */
        char *cdi_name;         /* nvidia.com/gpu=<runtime id> */
} NvidiaUnit;

/* A device id split as policy_id_cmp() splits it, computed once: the table is sorted
 * and searched with id_key_cmp(), the same order as policy_id_cmp() without re-parsing. */
typedef struct IdKey {
        const char *id;
        size_t len;             /* the GPU part's length (whole id when no share) */
        uint32_t num;
        bool share;
} IdKey;

typedef struct NvidiaDevice {
        char *id;
        IdKey key;
        size_t resource;        /* index in NvidiaState.resources */
        size_t unit;
        uint32_t replica;
        NvidiaSharing sharing;
        uint64_t mps_memory_bytes;
        uint32_t mps_percentage;
        bool healthy;
        int32_t numa_node;
} NvidiaDevice;

typedef struct NvidiaResource {
        char *name;
        char *mps_pipe;         /* NVIDIA_MPS_CONTAINER_ROOT/<name>/pipe */
        size_t start, n;        /* range in devices */
} NvidiaResource;

/* Per NVIDIA GPU in GPU order: its MPS plan. The control daemon's defaults are the
 * LARGEST slice's limits on the GPU: a client's own CUDA_MPS_* variables only narrow
 * the daemon's setting (NVIDIA's MPS documentation: a lower daemon setting is obeyed),
 * so a smaller default would cap the larger slices. */
typedef struct NvidiaGpuPlan {
        size_t gpu;
        bool mps;
        uint64_t max_memory_bytes;
        uint32_t max_percentage;
} NvidiaGpuPlan;

typedef struct NvidiaTable {
        NvidiaUnit *units;
        size_t n_units;
        NvidiaDevice *devices;
        size_t n_devices;
        NvidiaResource *resources;
        size_t n_resources;
        NvidiaGpuPlan *plans;
        uint32_t *index;        /* open addressing over (resource, id) -> device, UINT32_MAX: empty */
        size_t index_mask;
        size_t n_plans;
        char *problem;
} NvidiaTable;

typedef struct NvidiaState {
        bool enabled;
        ConfigMigStrategy mig_strategy;
        ConfigDeviceIdStrategy id_strategy;
        uint32_t list_strategy;
        bool pass_device_specs;
        char *cdi_prefix;
        ConfigReplicaPolicy replica_policy;
        bool ts_fail_greater_than_one;
        bool mps_fail_greater_than_one;
        NvidiaShare *shares;
        size_t n_shares;

        NvidiaTable table;
        char **ever;            /* every NVIDIA resource name advertised so far */
        char **shapes;          /* per Resources.gpus entry, what the table was built from
                                 * (gpu_shape()); NULL: rebuild on the next refresh */
} NvidiaState;

/* ---- state ---- */

static void shares_free(NvidiaShare *l, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(l[i].name);
                free(l[i].resource);
                strv_free(l[i].devices);
        }
        free(l);
}

static void table_done(NvidiaTable *t) {
        for (size_t i = 0; i < t->n_units; i++) {
                free(t->units[i].uuid);
                free(t->units[i].runtime_id);
                free(t->units[i].mount_path);
                free(t->units[i].cdi_name);
        }
        for (size_t i = 0; i < t->n_devices; i++)
                free(t->devices[i].id);
        for (size_t i = 0; i < t->n_resources; i++) {
                free(t->resources[i].name);
                free(t->resources[i].mps_pipe);
        }
        free(t->units);
        free(t->devices);
        free(t->resources);
        free(t->plans);
        free(t->index);
        free(t->problem);
        *t = (NvidiaTable) {};
}

static void *nvidia_state_free(void *p) {
        NvidiaState *s = p;

        if (!s)
                return NULL;
        free(s->cdi_prefix);
        shares_free(s->shares, s->n_shares);
        table_done(&s->table);
        strv_free(s->ever);
        strv_free(s->shapes);
        return mfree(s);
}

static NvidiaState *state(const Resources *r) {
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

        s = state(r);
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

/* ---- building the table ---- */

typedef struct Builder {
        const Resources *r;
        const NvidiaState *s;
        NvidiaTable t;
        size_t room_units, room_devices, room_resources;
        char **problems;
        size_t n_problems;
} Builder;

static void problem(Builder *b, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void problem(Builder *b, const char *format, ...) {
        va_list ap;
        char *m = NULL;

        if (b->n_problems >= PROBLEMS_MAX)
                return;
        va_start(ap, format);
        if (vasprintf(&m, format, ap) < 0)
                m = NULL;
        va_end(ap);
        if (!m)
                return;
        if (strv_consume(&b->problems, m) >= 0)
                b->n_problems++;
}

static bool is_nvidia_gpu(const GpuInfo *i) {
        return streq(i->vendor, "nvidia") && !isempty(i->id);
}

static bool mig_enabled(const GpuInfo *i) {
        return streq(i->mig_mode, "Enabled");
}

static const char *gpu_uuid(const GpuInfo *i) {
        return isempty(i->uuid) ? i->id : i->uuid;
}

static bool profile_ok(const char *p) {
        if (isempty(p) || strlen(p) > RESOURCES_NAME_MAX - strlen(NVIDIA_RESOURCE_MIG_PREFIX))
                return false;
        for (; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                      *p == '.' || *p == '_' || *p == '+' || *p == '-'))
                        return false;
        return true;
}

static bool uuid_ok(const char *u) {
        size_t l = u ? strnlen(u, RESOURCES_ID_MAX + 1) : 0;

        if (l == 0 || l > RESOURCES_ID_MAX - REPLICA_SUFFIX_MAX)
                return false;
        for (; *u; u++)
                if ((unsigned char) *u <= 0x20 || (unsigned char) *u >= 0x7f || *u == ',')
                        return false;
        return true;
}

static int gpu_order_cmp(const void *a, const void *b, void *userdata) {
        const Resources *r = userdata;
        const GpuInfo *x = &r->gpus[*(const size_t *) a].info, *y = &r->gpus[*(const size_t *) b].info;

        /* Known indexes first, ascending; then by id. */
        if ((x->index < 0) != (y->index < 0))
                return x->index < 0 ? 1 : -1;
        if (x->index != y->index)
                return x->index < y->index ? -1 : 1;
        return strcmp(x->id, y->id);
}

static int mig_order_cmp(const void *a, const void *b, void *userdata) {
        const GpuInfo *g = userdata;
        uint32_t x = g->mig_devices[*(const size_t *) a].index, y = g->mig_devices[*(const size_t *) b].index;

        return x < y ? -1 : x > y;
}

static int resource_index(Builder *b, const char *name, size_t *ret) {
        NvidiaResource *n;

        for (size_t i = 0; i < b->t.n_resources; i++)
                if (streq(b->t.resources[i].name, name)) {
                        *ret = i;
                        return 0;
                }
        if (b->t.n_resources >= b->room_resources) {
                size_t room = MAX(b->room_resources * 2, (size_t) 8);

                n = reallocarray(b->t.resources, room, sizeof(NvidiaResource));
                if (!n)
                        return -ENOMEM;
                b->t.resources = n;
                b->room_resources = room;
        }
        n = &b->t.resources[b->t.n_resources];
        *n = (NvidiaResource) {};
        n->name = strdup(name);
        if (!n->name || asprintf(&n->mps_pipe, "%s/%s/pipe", NVIDIA_MPS_CONTAINER_ROOT, name) < 0) {
                free(n->name);
                return -ENOMEM;
        }
        *ret = b->t.n_resources++;
        return 0;
}

static int unit_add(Builder *b, size_t gpu, int32_t mig, uint32_t order, size_t *ret) {
        const GpuInfo *g = &b->r->gpus[gpu].info;
        NvidiaUnit u = { .gpu = gpu, .mig = mig, .order = order };
        int k = -ENOMEM;

        if (b->t.n_units >= b->room_units) {
                size_t room = MAX(b->room_units * 2, (size_t) 16);
                NvidiaUnit *n = reallocarray(b->t.units, room, sizeof(NvidiaUnit));

                if (!n)
                        return -ENOMEM;
                b->t.units = n;
                b->room_units = room;
        }

        u.uuid = strdup(mig < 0 ? gpu_uuid(g) : g->mig_devices[mig].uuid);
        if (!u.uuid)
                goto fail;
        if (b->s->id_strategy == DEVICE_ID_STRATEGY_INDEX) {
                if (mig < 0 ? asprintf(&u.runtime_id, "%" PRIi32, g->index) < 0 :
                              asprintf(&u.runtime_id, "%" PRIi32 ":%" PRIu32, g->index,
                                       g->mig_devices[mig].index) < 0) {
                        u.runtime_id = NULL;
                        goto fail;
                }
        } else if (!(u.runtime_id = strdup(u.uuid)))
                goto fail;
        if (asprintf(&u.mount_path, "%s/%s", NVIDIA_VOLUME_MOUNTS_ROOT, u.runtime_id) < 0) {
                u.mount_path = NULL;
                goto fail;
        }
        if (asprintf(&u.cdi_name, "%s=%s", NVIDIA_CDI_KIND, u.runtime_id) < 0) {
                u.cdi_name = NULL;
                goto fail;
        }
        b->t.units[b->t.n_units] = u;
        *ret = b->t.n_units++;
        return 0;
fail:
        free(u.uuid);
        free(u.runtime_id);
        free(u.mount_path);
        free(u.cdi_name);
        return k;
}

static IdKey id_key(const char *id) {
        IdKey k = { .id = id };

        k.share = policy_split_id(id, &k.len, &k.num) >= 0;
        if (!k.share)
                k.len = strlen(id);
        return k;
}

/* policy_id_cmp() on split ids. */
static int id_key_cmp(const IdKey *a, const IdKey *b) {
        int c = memcmp(a->id, b->id, MIN(a->len, b->len));

        if (c != 0)
                return c;
        if (a->len != b->len)
                return a->len < b->len ? -1 : 1;
        if (a->share != b->share)
                return a->share ? 1 : -1;
        if (!a->share || a->num == b->num)
                return 0;
        return a->num < b->num ? -1 : 1;
}

static bool device_healthy(const GpuInfo *g, NvidiaSharing sharing) {
        return g->healthy && (sharing != SHARING_MPS || streq(g->mps_state, "running"));
}

static int device_add(Builder *b, const char *resource, size_t unit, const char *id, uint32_t replica,
                      NvidiaSharing sharing, uint64_t memory, uint32_t percentage) {
        const GpuInfo *g = &b->r->gpus[b->t.units[unit].gpu].info;
        NvidiaDevice d = {
                .unit = unit,
                .replica = replica,
                .sharing = sharing,
                .mps_memory_bytes = memory,
                .mps_percentage = percentage,
                .healthy = device_healthy(g, sharing),
                .numa_node = g->numa_node,
        };
        int k;

        k = resource_index(b, resource, &d.resource);
        if (k < 0)
                return k;
        if (b->t.n_devices >= b->room_devices) {
                size_t room = MAX(b->room_devices * 2, (size_t) 16);
                NvidiaDevice *n = reallocarray(b->t.devices, room, sizeof(NvidiaDevice));

                if (!n)
                        return -ENOMEM;
                b->t.devices = n;
                b->room_devices = room;
        }
        if (sharing == SHARING_NONE)
                d.id = strdup(id);
        else if (asprintf(&d.id, "%s::%" PRIu32, id, replica) < 0)
                d.id = NULL;
        if (!d.id)
                return -ENOMEM;
        d.key = id_key(d.id);
        b->t.devices[b->t.n_devices++] = d;
        return 0;
}

/* The `devices` rule shared with the probe (common/nvidia-sharing.h). */
static bool share_matches(const NvidiaShare *sh, const GpuInfo *g, int32_t mig) {
        const MigDeviceInfo *m = mig >= 0 ? &g->mig_devices[mig] : NULL;
        const NvidiaDeviceRef d = {
                .gpu_index = g->index,
                .gpu_uuid = gpu_uuid(g),
                .gpu_id = g->id,
                .mig = m != NULL,
                .mig_index = m ? m->index : 0,
                .mig_uuid = m ? m->uuid : NULL,
                .mig_gi = m ? m->gi : 0,
                .mig_ci = m ? m->ci : 0,
        };

        return nvidia_devices_match(sh->devices, &d);
}

/* The devices of one unit of base resource `base`. */
static int unit_devices(Builder *b, size_t unit, const char *base, NvidiaGpuPlan *plan) {
        const NvidiaUnit *u = &b->t.units[unit];
        const GpuInfo *g = &b->r->gpus[u->gpu].info;
        const NvidiaShare *mps[256];
        size_t n_mps = 0;
        int k;

        for (size_t i = 0; i < b->s->n_shares; i++) {
                const NvidiaShare *sh = &b->s->shares[i];

                if (sh->kind != SHARING_MPS || !streq(sh->name, base) || !share_matches(sh, g, u->mig))
                        continue;
                if (u->mig >= 0) {
                        problem(b, "MPS is not supported on MIG device %s: left unshared", u->uuid);
                        n_mps = 0;
                        break;
                }
                if (mig_enabled(g)) {
                        /* migStrategy none serves the whole GPU, but the probe refuses MPS
                         * on a GPU in MIG mode: no slices that could never be healthy. */
                        problem(b, "GPU %s has MIG enabled: MPS is not supported with MIG, no MPS slices", g->id);
                        n_mps = 0;
                        break;
                }
                mps[n_mps++] = sh;
        }

        if (n_mps > 0) {
                uint64_t total = 0, max_mem = 0;
                uint32_t replica = 0, max_pct = 0;
                bool ok = g->memory_bytes > 0;

                if (!ok)
                        problem(b, "GPU %s: memory unknown, no MPS slices", g->id);
                for (size_t i = 0; i < n_mps && ok; i++) {
                        uint64_t mem = mps[i]->memory_bytes ?: g->memory_bytes / mps[i]->replicas;

                        if (mem == 0 || mem > g->memory_bytes ||
                            total + (uint64_t) mps[i]->replicas * mem > g->memory_bytes) {
                                problem(b, "GPU %s: MPS slices need more than its %" PRIu64 " bytes of memory, no MPS slices",
                                        g->id, g->memory_bytes);
                                ok = false;
                        }
                        total += (uint64_t) mps[i]->replicas * mem;
                }
                for (size_t i = 0; i < n_mps && ok; i++) {
                        uint64_t mem = mps[i]->memory_bytes ?: g->memory_bytes / mps[i]->replicas;
                        uint32_t pct = mps[i]->memory_bytes ?
                                (uint32_t) MAX((uint64_t) 1, (100 * mem) / g->memory_bytes) :
                                MAX(1U, 100U / mps[i]->replicas);

                        for (uint32_t n = 0; n < mps[i]->replicas; n++) {
                                if (replica >= NVIDIA_REPLICAS_MAX) {
                                        problem(b, "GPU %s: more than %u MPS slices, the rest is cut",
                                                g->id, NVIDIA_REPLICAS_MAX);
                                        break;
                                }
                                k = device_add(b, mps[i]->resource, unit, u->uuid, replica++, SHARING_MPS, mem, pct);
                                if (k < 0)
                                        return k;
                                /* Only slices that exist (not cut above) count. */
                                max_mem = MAX(max_mem, mem);
                                max_pct = MAX(max_pct, pct);
                        }
                }
                if (ok) {
                        plan->mps = true;
                        plan->max_memory_bytes = max_mem;
                        plan->max_percentage = max_pct;
                        return 0;
                }
        }

        for (size_t i = 0; i < b->s->n_shares; i++) {
                const NvidiaShare *sh = &b->s->shares[i];

                if (sh->kind != SHARING_TIME_SLICING || !streq(sh->name, base) || !share_matches(sh, g, u->mig))
                        continue;
                for (uint32_t n = 0; n < sh->replicas; n++) {
                        k = device_add(b, sh->resource, unit, u->uuid, n, SHARING_TIME_SLICING, 0, 0);
                        if (k < 0)
                                return k;
                }
                return 0;
        }

        return device_add(b, base, unit, u->uuid, 0, SHARING_NONE, 0, 0);
}

/* migStrategy single: may the MIG devices be advertised as nvidia.com/gpu? Returns 1
 * (use MIG devices), 0 (MIG off everywhere: whole GPUs), -1 (advertise nothing). */
static int single_layout(Builder *b, const size_t *gpus, size_t n) {
        const char *profile = NULL, *on = NULL, *off = NULL;
        size_t n_mig = 0;

        for (size_t i = 0; i < n; i++) {
                const GpuInfo *g = &b->r->gpus[gpus[i]].info;

                if (mig_enabled(g))
                        on = g->id;
                else
                        off = g->id;
        }
        if (!on)
                return 0;
        if (off) {
                problem(b, "migStrategy single: GPU %s has MIG enabled and GPU %s not: no %s advertised",
                        on, off, NVIDIA_RESOURCE_GPU);
                return -1;
        }
        for (size_t i = 0; i < n; i++) {
                const GpuInfo *g = &b->r->gpus[gpus[i]].info;

                for (size_t j = 0; j < g->n_mig_devices; j++) {
                        n_mig++;
                        if (!profile)
                                profile = g->mig_devices[j].profile;
                        else if (!streq(profile, g->mig_devices[j].profile)) {
                                problem(b, "migStrategy single: MIG devices of profiles %s and %s (GPU %s): no %s advertised",
                                        profile, g->mig_devices[j].profile, g->id, NVIDIA_RESOURCE_GPU);
                                return -1;
                        }
                }
        }
        if (n_mig == 0) {
                problem(b, "migStrategy single: MIG enabled but no MIG devices: no %s advertised",
                        NVIDIA_RESOURCE_GPU);
                return -1;
        }
        return 1;
}

static int gpu_units(Builder *b, size_t gpu, uint32_t position, int single) {
        const GpuInfo *g = &b->r->gpus[gpu].info;
        bool use_mig = b->s->mig_strategy == MIG_STRATEGY_MIXED ? mig_enabled(g) :
                       b->s->mig_strategy == MIG_STRATEGY_SINGLE ? single > 0 : false;
        NvidiaGpuPlan *plan = &b->t.plans[b->t.n_plans++];
        _cleanup_free_ size_t *order = NULL;
        size_t unit;
        int k;

        *plan = (NvidiaGpuPlan) { .gpu = gpu };
        if (b->s->mig_strategy == MIG_STRATEGY_SINGLE && single < 0)
                return 0;
        if (!uuid_ok(gpu_uuid(g))) {
                problem(b, "GPU %s: UUID empty, too long or not printable: ignored", g->id);
                return 0;
        }
        if (b->s->id_strategy == DEVICE_ID_STRATEGY_INDEX && g->index < 0) {
                problem(b, "GPU %s: index unknown, needed by deviceIDStrategy index: ignored", g->id);
                return 0;
        }

        if (!use_mig) {
                if (b->s->mig_strategy == MIG_STRATEGY_MIXED && mig_enabled(g))
                        return 0;
                k = unit_add(b, gpu, -1, position * (NVIDIA_MIG_MAX + 1), &unit);
                if (k < 0)
                        return k;
                return unit_devices(b, unit, NVIDIA_RESOURCE_GPU, plan);
        }

        order = calloc(g->n_mig_devices ?: 1, sizeof(size_t));
        if (!order)
                return -ENOMEM;
        for (size_t j = 0; j < g->n_mig_devices; j++)
                order[j] = j;
        qsort_r(order, g->n_mig_devices, sizeof(size_t), mig_order_cmp, (void *) g);
        if (g->n_mig_devices > NVIDIA_MIG_MAX)
                problem(b, "GPU %s: more than %u MIG devices, the rest is ignored", g->id, NVIDIA_MIG_MAX);
        for (size_t j = 0; j < MIN(g->n_mig_devices, (size_t) NVIDIA_MIG_MAX); j++) {
                const MigDeviceInfo *m = &g->mig_devices[order[j]];
                _cleanup_free_ char *base = NULL;

                if (!uuid_ok(m->uuid) || !profile_ok(m->profile)) {
                        problem(b, "GPU %s: MIG device %" PRIu32 " has a bad UUID or profile: ignored",
                                g->id, m->index);
                        continue;
                }
                if (b->s->mig_strategy == MIG_STRATEGY_MIXED) {
                        if (asprintf(&base, "%s%s", NVIDIA_RESOURCE_MIG_PREFIX, m->profile) < 0)
                                return -ENOMEM;
                } else if (!(base = strdup(NVIDIA_RESOURCE_GPU)))
                        return -ENOMEM;
                k = unit_add(b, gpu, (int32_t) order[j], position * (NVIDIA_MIG_MAX + 1) + 1 + (uint32_t) j, &unit);
                if (k < 0)
                        return k;
                k = unit_devices(b, unit, base, plan);
                if (k < 0)
                        return k;
        }
        return 0;
}

static int device_sort_cmp(const void *a, const void *b) {
        const NvidiaDevice *x = a, *y = b;

        if (x->resource != y->resource)
                return x->resource < y->resource ? -1 : 1;
        int c = id_key_cmp(&x->key, &y->key);

        /* Equal ids (two GPUs claiming one UUID): the first GPU's first; the other is dropped. */
        if (c == 0 && x->unit != y->unit)
                return x->unit < y->unit ? -1 : 1;
        return c;
}

static int name_cmp(const void *a, const void *b) {
        return strcmp(((const NvidiaResource *) a)->name, ((const NvidiaResource *) b)->name);
}

static uint64_t id_hash(const char *id, size_t resource) {
        uint64_t h = UINT64_C(0xcbf29ce484222325) ^ ((uint64_t) resource * UINT64_C(0x9e3779b97f4a7c15));

        for (const char *p = id; *p; p++) {
                h ^= (unsigned char) *p;
                h *= UINT64_C(0x100000001b3);
        }
        return h ^ (h >> 29);
}

/* The lookup index of the devices (twice their number, a power of two). */
static int table_index(NvidiaTable *t) {
        size_t size = 16;

        while (size < 2 * t->n_devices)
                size *= 2;
        t->index = malloc(size * sizeof(uint32_t));
        if (!t->index)
                return -ENOMEM;
        memset(t->index, 0xff, size * sizeof(uint32_t));
        t->index_mask = size - 1;
        for (size_t i = 0; i < t->n_devices; i++) {
                size_t pos = id_hash(t->devices[i].id, t->devices[i].resource) & t->index_mask;

                while (t->index[pos] != UINT32_MAX)
                        pos = (pos + 1) & t->index_mask;
                t->index[pos] = (uint32_t) i;
        }
        return 0;
}

static int table_build(const Resources *r, const NvidiaState *s, NvidiaTable *ret) {
        _cleanup_free_ size_t *gpus = NULL, *remap = NULL;
        _cleanup_strv_free_ char **names_by_old = NULL;
        Builder b = { .r = r, .s = s };
        size_t n = 0;
        int single = 0, k = 0;

        gpus = calloc(r->n_gpus ?: 1, sizeof(size_t));
        if (!gpus)
                return -ENOMEM;
        for (size_t i = 0; s->enabled && i < r->n_gpus; i++)
                if (is_nvidia_gpu(&r->gpus[i].info))
                        gpus[n++] = i;
        qsort_r(gpus, n, sizeof(size_t), gpu_order_cmp, (void *) r);
        if (n > NVIDIA_GPUS_MAX) {
                problem(&b, "more than %u NVIDIA GPUs, the rest is ignored", NVIDIA_GPUS_MAX);
                n = NVIDIA_GPUS_MAX;
        }
        b.t.plans = calloc(n ?: 1, sizeof(NvidiaGpuPlan));
        if (!b.t.plans) {
                k = -ENOMEM;
                goto fail;
        }
        if (s->mig_strategy == MIG_STRATEGY_SINGLE)
                single = single_layout(&b, gpus, n);
        for (size_t i = 0; i < n; i++) {
                k = gpu_units(&b, gpus[i], (uint32_t) i, single);
                if (k < 0)
                        goto fail;
        }

        /* Resources by name, devices by (resource, id). */
        names_by_old = calloc(b.t.n_resources + 1, sizeof(char *));
        remap = calloc(b.t.n_resources + 1, sizeof(size_t));
        if (!names_by_old || !remap) {
                k = -ENOMEM;
                goto fail;
        }
        for (size_t i = 0; i < b.t.n_resources; i++)
                names_by_old[i] = b.t.resources[i].name;
        if (b.t.n_resources > 0)
                qsort(b.t.resources, b.t.n_resources, sizeof(NvidiaResource), name_cmp);
        for (size_t i = 0; i < b.t.n_resources; i++)
                for (size_t j = 0; j < b.t.n_resources; j++)
                        if (names_by_old[i] == b.t.resources[j].name)
                                remap[i] = j;
        for (size_t i = 0; i < b.t.n_resources; i++)
                names_by_old[i] = NULL;
        for (size_t i = 0; i < b.t.n_devices; i++)
                b.t.devices[i].resource = remap[b.t.devices[i].resource];
        if (b.t.n_devices > 0)
                qsort(b.t.devices, b.t.n_devices, sizeof(NvidiaDevice), device_sort_cmp);
        /* Ids are unique per resource: a repeated UUID is served once. */
        size_t kept = 0;
        for (size_t i = 0; i < b.t.n_devices; i++) {
                NvidiaDevice *d = &b.t.devices[i];

                if (kept > 0 && b.t.devices[kept - 1].resource == d->resource &&
                    id_key_cmp(&b.t.devices[kept - 1].key, &d->key) == 0) {
                        problem(&b, "device id %s is claimed twice in %s: served once", d->id,
                                b.t.resources[d->resource].name);
                        free(d->id);
                        continue;
                }
                b.t.devices[kept++] = *d;
        }
        b.t.n_devices = kept;
        k = table_index(&b.t);
        if (k < 0)
                goto fail;
        for (size_t i = 0; i < b.t.n_devices; i++) {
                NvidiaResource *res = &b.t.resources[b.t.devices[i].resource];

                if (res->n == 0)
                        res->start = i;
                res->n++;
        }

        if (b.problems) {
                b.t.problem = strv_join(b.problems, "; ");
                if (!b.t.problem) {
                        k = -ENOMEM;
                        goto fail;
                }
        }
        strv_free(b.problems);
        *ret = b.t;
        return 0;

fail:
        strv_free(b.problems);
        table_done(&b.t);
        return k;
}

static const NvidiaResource *table_resource(const NvidiaTable *t, const char *name) {
        if (!name)
                return NULL;
        for (size_t i = 0; i < t->n_resources; i++)
                if (streq(t->resources[i].name, name))
                        return &t->resources[i];
        return NULL;
}

static bool same_devices(const NvidiaTable *a, const NvidiaTable *b, const char *name) {
        const NvidiaResource *x = table_resource(a, name), *y = table_resource(b, name);
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

        if (!is_nvidia_gpu(g))
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
        NvidiaState *s = state(r);
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
                        bool healthy = device_healthy(g, d->sharing);
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

        k = table_build(r, s, &t);
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

        table_done(&s->table);
        s->table = t;
        strv_free(s->shapes);
        s->shapes = TAKE_PTR(shapes);
        return 0;
fail:
        /* The old table may point at GPU indexes that moved (a removal): serve nothing
         * until a refresh succeeds rather than stale devices. */
        table_done(&t);
        table_done(&s->table);
        s->shapes = strv_free(s->shapes);
        return k;
}

/* Rebuilds the device table and advertises its names. */
static int nvidia_refresh_names(Resources *r, char ***changed) {
        _cleanup_strv_free_ char **advertised = NULL;
        int k;

        if (!state(r))
                return 0;
        k = nvidia_refresh(r, &advertised, changed);
        for (char **n = advertised; k >= 0 && n && *n; n++)
                k = resources_advertise(r, &nvidia_backend, *n, changed);
        return k;
}

const char *resources_nvidia_problem(const Resources *r) {
        return state(r) ? state(r)->table.problem : NULL;
}

bool resources_is_nvidia(const Resources *r, const char *resource) {
        return state(r) && resource && strv_contains(state(r)->ever, resource);
}

/* ---- lookups ---- */

static const NvidiaDevice *find_device(const NvidiaState *s, const NvidiaResource *res, const char *id) {
        size_t r, pos;

        if (!id || !res || res->n == 0 || !s->table.index)
                return NULL;
        r = (size_t) (res - s->table.resources);
        pos = id_hash(id, r) & s->table.index_mask;
        for (;; pos = (pos + 1) & s->table.index_mask) {
                uint32_t i = s->table.index[pos];

                if (i == UINT32_MAX)
                        return NULL;
                if (s->table.devices[i].resource == r && streq(s->table.devices[i].id, id))
                        return &s->table.devices[i];
        }
}

static const Gpu *unit_gpu(const Resources *r, const NvidiaUnit *u) {
        return &r->gpus[u->gpu];
}

static int nvidia_get_devices(const Resources *r, const char *resource, Device **ret, size_t *ret_n) {
        const NvidiaState *s = state(r);
        const NvidiaResource *res = s ? table_resource(&s->table, resource) : NULL;
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
                        .gpu = unit_gpu(r, &s->table.units[x->unit]),
                        .share = x->replica,
                };
        }
        *ret = TAKE_PTR(d);
        *ret_n = n;
        return 0;
}

/* The distinct units of a request, in request order. ret: room for n ids. */
static int request_units(const NvidiaState *s, const NvidiaResource *res, char * const *ids,
                         size_t *ret, size_t *ret_n, bool *ret_mps) {
        size_t n = 0;
        bool mps = false;

        for (char * const *i = ids; i && *i; i++) {
                const NvidiaDevice *d = find_device(s, res, *i);
                bool seen = false;

                if (!d)
                        return -ENODEV;
                mps = mps || d->sharing == SHARING_MPS;
                for (size_t j = 0; j < n && !seen; j++)
                        seen = ret[j] == d->unit;
                if (!seen)
                        ret[n++] = d->unit;
        }
        *ret_n = n;
        if (ret_mps)
                *ret_mps = mps;
        return 0;
}

/* ---- Allocate ---- */

static int nvidia_check_allocate(const Resources *r, const char *resource,
                                 char ** const *requests, size_t n_requests, ResourceError *e) {
        const NvidiaState *s = state(r);
        const NvidiaResource *res = s ? table_resource(&s->table, resource) : NULL;

        for (size_t q = 0; res && q < n_requests; q++) {
                size_t n = strv_length(requests[q]);
                const NvidiaDevice *first_mps = NULL;
                bool limit = false;

                for (char * const *i = requests[q]; *i; i++) {
                        const NvidiaDevice *d = find_device(s, res, *i);

                        if (!d)
                                return resource_error_set(e, KGPU_ERROR_UNKNOWN_DEVICE, -ENODEV,
                                                          "Unknown device '%s' for resource '%s'", *i, resource);
                        if ((d->sharing == SHARING_TIME_SLICING && s->ts_fail_greater_than_one) ||
                            (d->sharing == SHARING_MPS && s->mps_fail_greater_than_one))
                                limit = true;
                        if (d->sharing == SHARING_MPS) {
                                if (first_mps && s->table.units[first_mps->unit].gpu != s->table.units[d->unit].gpu)
                                        return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -EINVAL,
                                                                  "MPS slices '%s' and '%s' of resource '%s' are on two GPUs: "
                                                                  "one container gets slices of one GPU",
                                                                  first_mps->id, d->id, resource);
                                first_mps = first_mps ?: d;
                        }
                }
                if (limit && n > 1)
                        return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -EINVAL,
                                                  "request for '%s: %zu' too large: maximum request size for shared resources is 1",
                                                  resource, n);
        }
        return 0;
}

static bool all_cdi(const NvidiaState *s) {
        return !(s->list_strategy & (DEVICE_LIST_STRATEGY_ENVVAR | DEVICE_LIST_STRATEGY_VOLUME_MOUNTS));
}

static int nvidia_allocate_specs(const Resources *r, const char *resource, char * const *ids,
                                 DeviceSpec **ret, size_t *ret_n) {
        const NvidiaState *s = state(r);
        const NvidiaResource *res = s ? table_resource(&s->table, resource) : NULL;
        _cleanup_free_ DeviceSpec *specs = NULL;
        _cleanup_free_ size_t *units = NULL;
        size_t n_units = 0, room = 1, m = 0;
        int k;

        units = calloc(strv_length(ids) + 1, sizeof(size_t));
        if (!units)
                return -ENOMEM;
        k = request_units(s, res, ids, units, &n_units, NULL);
        if (k < 0)
                return k;
        if (!s->pass_device_specs || all_cdi(s))
                n_units = 0;
        for (size_t i = 0; i < n_units; i++) {
                const NvidiaUnit *u = &s->table.units[units[i]];
                const GpuInfo *g = &unit_gpu(r, u)->info;

                room += strv_length(g->device_nodes);
                if (u->mig >= 0)
                        room += strv_length(g->mig_devices[u->mig].device_nodes);
        }
        specs = calloc(room, sizeof(DeviceSpec));
        if (!specs)
                return -ENOMEM;
        for (size_t i = 0; i < n_units; i++) {
                const NvidiaUnit *u = &s->table.units[units[i]];
                const GpuInfo *g = &unit_gpu(r, u)->info;

                for (char **p = g->device_nodes; p && *p; p++)
                        device_specs_add(specs, &m, *p);
                if (u->mig >= 0)
                        for (char **p = g->mig_devices[u->mig].device_nodes; p && *p; p++)
                                device_specs_add(specs, &m, *p);
        }
        *ret = TAKE_PTR(specs);
        *ret_n = m;
        return 0;
}

static int nvidia_allocate_extras(const Resources *r, const char *resource, char * const *ids,
                                  MountSpec **ret_mounts, size_t *ret_n_mounts, char ***ret_cdi) {
        const NvidiaState *s = state(r);
        const NvidiaResource *res = s ? table_resource(&s->table, resource) : NULL;
        _cleanup_free_ MountSpec *mounts = NULL;
        _cleanup_strv_free_ char **cdi = NULL;
        _cleanup_free_ size_t *units = NULL;
        size_t n_units = 0, m = 0;
        bool mps = false;
        int k;

        units = calloc(strv_length(ids) + 1, sizeof(size_t));
        cdi = calloc(1, sizeof(char *));
        if (!units || !cdi)
                return -ENOMEM;
        k = request_units(s, res, ids, units, &n_units, &mps);
        if (k < 0)
                return k;
        mounts = calloc(n_units + 3, sizeof(MountSpec));
        if (!mounts)
                return -ENOMEM;

        for (size_t i = 0; i < n_units; i++) {
                const NvidiaUnit *u = &s->table.units[units[i]];

                if ((s->list_strategy & DEVICE_LIST_STRATEGY_VOLUME_MOUNTS))
                        mounts[m++] = (MountSpec) {
                                .container_path = u->mount_path,
                                .host_path = NVIDIA_VOLUME_MOUNTS_HOST,
                                .read_only = false,
                        };
                if ((s->list_strategy & DEVICE_LIST_STRATEGY_CDI_CRI)) {
                        k = strv_extend(&cdi, u->cdi_name);
                        if (k < 0)
                                return k;
                }
        }
        if (mps && n_units > 0) {
                const GpuInfo *g = &unit_gpu(r, &s->table.units[units[0]])->info;

                /* Read-only: clients only connect to the daemon's sockets and open its
                 * FIFO there, which a read-only mount allows; a pod must not be able to
                 * put anything in the daemon's directory (or in the host's /run). */
                mounts[m++] = (MountSpec) {
                        .container_path = res->mps_pipe,
                        .host_path = g->mps_pipe_directory,
                        .read_only = true,
                };
                mounts[m++] = (MountSpec) {
                        .container_path = NVIDIA_MPS_SHM,
                        .host_path = NVIDIA_MPS_SHM,
                        .read_only = false,
                };
        }
        *ret_mounts = TAKE_PTR(mounts);
        *ret_n_mounts = m;
        *ret_cdi = TAKE_PTR(cdi);
        return 0;
}

static int pair_add(char ***l, const char *key, const char *value) {
        int k;

        k = strv_extend(l, key);
        if (k < 0)
                return k;
        return strv_extend(l, value);
}

/* FNV-1a over the ids: a stable response id for the CDI annotation key. */
static uint64_t ids_hash(char * const *ids) {
        uint64_t h = UINT64_C(0xcbf29ce484222325);

        for (char * const *i = ids; i && *i; i++)
                for (const char *p = *i;; p++) {
                        h ^= (unsigned char) *p;
                        h *= UINT64_C(0x100000001b3);
                        if (!*p)
                                break;
                }
        return h;
}

static int nvidia_allocate_envs(const Resources *r, const char *resource, char * const *ids,
                                char ***ret_envs, char ***ret_annotations) {
        const NvidiaState *s = state(r);
        const NvidiaResource *res = s ? table_resource(&s->table, resource) : NULL;
        _cleanup_strv_free_ char **envs = NULL, **annotations = NULL, **l = NULL;
        _cleanup_free_ size_t *units = NULL;
        size_t n_units = 0;
        bool mps = false;
        int k;

        units = calloc(strv_length(ids) + 1, sizeof(size_t));
        envs = calloc(1, sizeof(char *));
        annotations = calloc(1, sizeof(char *));
        if (!units || !envs || !annotations)
                return -ENOMEM;
        k = request_units(s, res, ids, units, &n_units, &mps);
        if (k < 0)
                return k;

        if (n_units > 0 && (s->list_strategy & DEVICE_LIST_STRATEGY_CDI_ANNOTATIONS)) {
                _cleanup_free_ char *key = NULL, *value = NULL;

                for (size_t i = 0; i < n_units; i++) {
                        k = strv_extend(&l, s->table.units[units[i]].cdi_name);
                        if (k < 0)
                                return k;
                }
                value = strv_join(l, ",");
                if (!value || asprintf(&key, "%s%s_%016" PRIx64, s->cdi_prefix, NVIDIA_CDI_ANNOTATION_PLUGIN,
                                       ids_hash(ids)) < 0)
                        return -ENOMEM;
                k = pair_add(&annotations, key, value);
                if (k < 0)
                        return k;
        }

        if (mps && n_units > 0) {
                _cleanup_free_ char *mem = NULL, *pct = NULL;
                uint64_t bytes = 0, percentage = 0;

                for (char * const *i = ids; *i; i++) {
                        const NvidiaDevice *d = find_device(s, res, *i);

                        if (d && d->sharing == SHARING_MPS) {
                                bytes += d->mps_memory_bytes;
                                percentage += d->mps_percentage;
                        }
                }
                if (asprintf(&mem, "0=%" PRIu64 "M", bytes >> 20) < 0 ||
                    asprintf(&pct, "%" PRIu64, MIN(percentage, (uint64_t) 100)) < 0)
                        return -ENOMEM;
                if ((k = pair_add(&envs, "CUDA_MPS_PIPE_DIRECTORY", res->mps_pipe)) < 0 ||
                    (k = pair_add(&envs, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", mem)) < 0 ||
                    (k = pair_add(&envs, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", pct)) < 0)
                        return k;
        }

        if (n_units > 0 && !all_cdi(s)) {
                _cleanup_free_ char *value = NULL;

                if (s->list_strategy & DEVICE_LIST_STRATEGY_VOLUME_MOUNTS)
                        value = strdup(NVIDIA_VOLUME_MOUNTS_ROOT);
                else {
                        strv_free(l);
                        l = NULL;
                        for (size_t i = 0; i < n_units; i++) {
                                k = strv_extend(&l, s->table.units[units[i]].runtime_id);
                                if (k < 0)
                                        return k;
                        }
                        value = strv_join(l, ",");
                }
                if (!value)
                        return -ENOMEM;
                k = pair_add(&envs, NVIDIA_VISIBLE_DEVICES, value);
                if (k < 0)
                        return k;
        }

        *ret_envs = TAKE_PTR(envs);
        *ret_annotations = TAKE_PTR(annotations);
        return 0;
}

/* ---- MPS requests ---- */

NvidiaMpsRequest *nvidia_mps_requests_free(NvidiaMpsRequest *l, size_t n) {
        for (size_t i = 0; l && i < n; i++)
                free(l[i].gpu_id);
        return mfree(l);
}

int resources_nvidia_mps_requests(const Resources *r, NvidiaMpsRequest **ret, size_t *ret_n) {
        const NvidiaState *s = state(r);
        NvidiaMpsRequest *l;
        size_t n = 0;

        l = calloc(s ? s->table.n_plans + 1 : 1, sizeof(NvidiaMpsRequest));
        if (!l)
                return -ENOMEM;
        for (size_t i = 0; s && i < s->table.n_plans; i++) {
                const NvidiaGpuPlan *p = &s->table.plans[i];
                const GpuInfo *g = &r->gpus[p->gpu].info;

                if (!p->mps && isempty(g->mps_state))
                        continue;
                l[n] = (NvidiaMpsRequest) {
                        .enabled = p->mps,
                        .pinned_memory_bytes = p->mps ? p->max_memory_bytes : 0,
                        .active_thread_percentage = p->mps ? p->max_percentage : 0,
                };
                l[n].gpu_id = strdup(g->id);
                if (!l[n].gpu_id) {
                        nvidia_mps_requests_free(l, n);
                        return -ENOMEM;
                }
                n++;
        }
        /* GPUs past NVIDIA_GPUS_MAX or with MIG under "single" trouble have no plan; a
         * GPU the config does not reach at all (nvidia.enabled false) with MPS on is
         * stopped too. */
        for (size_t i = 0; s && !s->enabled && i < r->n_gpus; i++) {
                const GpuInfo *g = &r->gpus[i].info;

                if (!is_nvidia_gpu(g) || isempty(g->mps_state) || n >= NVIDIA_GPUS_MAX)
                        continue;
                NvidiaMpsRequest *t = reallocarray(l, n + 1, sizeof(NvidiaMpsRequest));
                if (!t) {
                        nvidia_mps_requests_free(l, n);
                        return -ENOMEM;
                }
                l = t;
                l[n] = (NvidiaMpsRequest) { .gpu_id = strdup(g->id) };
                if (!l[n].gpu_id) {
                        nvidia_mps_requests_free(l, n);
                        return -ENOMEM;
                }
                n++;
        }
        *ret = l;
        *ret_n = n;
        return 0;
}

/* ---- preferred allocation ---- */

typedef struct Cand {
        const NvidiaDevice *d;
        const NvidiaUnit *u;
} Cand;

static int cand_cmp(const void *a, const void *b) {
        const Cand *x = a, *y = b;

        if (x->u->order != y->u->order)
                return x->u->order < y->u->order ? -1 : 1;
        return x->d->replica < y->d->replica ? -1 : x->d->replica > y->d->replica;
}

/* The topology score of a set: summed over its pairs, compared in field order: NVLinks,
 * pairs under one PCIe switch (PIX/PXB), pairs on one NUMA node (PIX/PXB/PHB/NODE or
 * equal NumaNode), and last, within those, pairs behind one host bridge (PHB). */
typedef struct Score {
        int64_t v[4];
} Score;

static void score_add(Score *a, const Score *b) {
        for (size_t i = 0; i < ELEMENTSOF(a->v); i++)
                a->v[i] += b->v[i];
}

static void score_sub(Score *a, const Score *b) {
        for (size_t i = 0; i < ELEMENTSOF(a->v); i++)
                a->v[i] -= b->v[i];
}

static int score_cmp(const Score *a, const Score *b) {
        for (size_t i = 0; i < ELEMENTSOF(a->v); i++)
                if (a->v[i] != b->v[i])
                        return a->v[i] < b->v[i] ? -1 : 1;
        return 0;
}

/* Among two equally scored sets, the one holding the lowest candidate the other lacks. */
static bool mask_first(uint64_t a, uint64_t b) {
        uint64_t d = a ^ b;

        return d && (a & (d & -d));
}

/* Chooses need of m (<= 64) candidates maximising the summed pair scores (w: m x m,
 * wm: each candidate's score against must_include). Returns the chosen mask. */
static uint64_t topo_choose(const Score *w, const Score *wm, size_t m, size_t need) {
        uint64_t combos = 1, best_mask = 0;
        Score best = {}, total = {}, all_wm = {}, deg[64];
        size_t idx[64], k;
        bool have = false, exclude;

        for (size_t i = 0; i < need && combos <= EXHAUSTIVE_MAX; i++)
                combos = combos * (m - i) / (i + 1);

        if (combos > EXHAUSTIVE_MAX) {
                /* Greedy: add the candidate with the best gain against what is chosen. */
                Score gain[64];
                uint64_t mask = 0;

                for (size_t i = 0; i < m; i++)
                        gain[i] = wm[i];
                for (size_t n = 0; n < need; n++) {
                        size_t pick = m;

                        for (size_t i = 0; i < m; i++)
                                if (!(mask & (UINT64_C(1) << i)) &&
                                    (pick == m || score_cmp(&gain[i], &gain[pick]) > 0))
                                        pick = i;
                        mask |= UINT64_C(1) << pick;
                        for (size_t i = 0; i < m; i++)
                                score_add(&gain[i], &w[i * m + pick]);
                }
                return mask;
        }

        /* Enumerate the smaller side: the chosen set, or the set left out. score(C \ X) =
         * pairs(C) - sum deg(x) + pairs(X) + wm(C) - wm(X). */
        exclude = need > m - need;
        k = exclude ? m - need : need;
        for (size_t i = 0; i < m; i++) {
                deg[i] = (Score) {};
                for (size_t j = 0; j < m; j++)
                        if (j != i)
                                score_add(&deg[i], &w[i * m + j]);
                for (size_t j = i + 1; j < m; j++)
                        score_add(&total, &w[i * m + j]);
                score_add(&all_wm, &wm[i]);
        }

        for (size_t i = 0; i < k; i++)
                idx[i] = i;
        for (;;) {
                Score score = {};
                uint64_t mask = 0;

                for (size_t i = 0; i < k; i++) {
                        mask |= UINT64_C(1) << idx[i];
                        for (size_t j = i + 1; j < k; j++)
                                score_add(&score, &w[idx[i] * m + idx[j]]);
                }
                if (exclude) {
                        score_add(&score, &total);
                        score_add(&score, &all_wm);
                        for (size_t i = 0; i < k; i++) {
                                score_sub(&score, &deg[idx[i]]);
                                score_sub(&score, &wm[idx[i]]);
                        }
                        mask = (m == 64 ? UINT64_MAX : (UINT64_C(1) << m) - 1) & ~mask;
                } else
                        for (size_t i = 0; i < k; i++)
                                score_add(&score, &wm[idx[i]]);
                if (!have || score_cmp(&score, &best) > 0 ||
                    (score_cmp(&score, &best) == 0 && mask_first(mask, best_mask))) {
                        best = score;
                        best_mask = mask;
                        have = true;
                }

                /* Next combination in lexicographic order. */
                size_t i = k;
                while (i > 0 && idx[i - 1] == m - k + i - 1)
                        i--;
                if (i == 0)
                        break;
                idx[i - 1]++;
                for (size_t j = i; j < k; j++)
                        idx[j] = idx[j - 1] + 1;
        }
        return best_mask;
}

/* Pair scores of the GPUs nodes[0..n) into m (n x n): each GPU's links are walked once
 * and their peers found by binary search. */
typedef struct NodeRef {
        const char *id;
        size_t i;
} NodeRef;

static int node_ref_cmp(const void *a, const void *b) {
        return strcmp(((const NodeRef *) a)->id, ((const NodeRef *) b)->id);
}

static int pair_matrix(const GpuInfo * const *nodes, size_t n, Score *m) {
        _cleanup_free_ NodeRef *refs = NULL;

        refs = calloc(n + 1, sizeof(NodeRef));
        if (!refs)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                refs[i] = (NodeRef) { .id = nodes[i]->id, .i = i };
        qsort(refs, n, sizeof(NodeRef), node_ref_cmp);
        for (size_t i = 0; i < n; i++) {
                for (size_t l = 0; l < nodes[i]->n_links; l++) {
                        const GpuLinkInfo *link = &nodes[i]->links[l];
                        NodeRef key = { .id = link->peer }, *f;

                        if (!link->peer || !link->type)
                                continue;
                        f = bsearch(&key, refs, n, sizeof(NodeRef), node_ref_cmp);
                        if (!f || f->i == i)
                                continue;
                        Score *x = &m[i * n + f->i], *y = &m[f->i * n + i];
                        if (streq(link->type, "NV"))
                                x->v[0] = y->v[0] = link->nvlinks;
                        if (streq(link->type, "PIX") || streq(link->type, "PXB"))
                                x->v[1] = y->v[1] = x->v[2] = y->v[2] = x->v[3] = y->v[3] = 1;
                        if (streq(link->type, "PHB"))
                                x->v[2] = y->v[2] = x->v[3] = y->v[3] = 1;
                        if (streq(link->type, "NODE"))
                                x->v[2] = y->v[2] = 1;
                }
                for (size_t j = 0; j < n; j++)
                        if (j != i && nodes[i]->numa_node >= 0 && nodes[i]->numa_node == nodes[j]->numa_node)
                                m[i * n + j].v[2] = 1;
        }
        return 0;
}

#define MARK_RESULT     1U
#define MARK_CAND       2U
#define MARK_COUNTED    4U
#define MARK_HELD       8U

int resources_nvidia_preferred_allocation(const Resources *r, const char *resource,
                                          char * const *available, char * const *must_include,
                                          char * const *held, int32_t size, char ***ret,
                                          ResourceError *e) {
        const NvidiaState *s = state(r);
        const NvidiaResource *res;
        _cleanup_strv_free_ char **result = NULL;
        _cleanup_free_ Cand *cand = NULL;
        _cleanup_free_ uint32_t *in_use = NULL, *next = NULL, *end = NULL;
        _cleanup_free_ uint8_t *mark = NULL;
        _cleanup_free_ const NvidiaDevice **avail = NULL;
        size_t n_result = 0, n_cand = 0, n_ulist = 0, n_avail, need;
        bool replicas = false, mig = false;
        int k;

        k = resources_check_preferred(r, resource, (char * const *[]) { must_include, available, held }, 3,
                                      size, e);
        if (k < 0)
                return k;

        res = s ? table_resource(&s->table, resource) : NULL;
        result = calloc((size_t) size + 1, sizeof(char *));
        n_avail = strv_length(available);
        cand = calloc(n_avail + 1, sizeof(Cand));
        avail = calloc(n_avail + 1, sizeof(NvidiaDevice *));
        mark = calloc(res ? res->n + 1 : 1, sizeof(uint8_t));
        if (!result || !cand || !avail || !mark)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");
#define POS(d) ((size_t) ((d) - &s->table.devices[res->start]))
#define TAKE(d) do {                                                                                            if (!(result[n_result] = strdup((d)->id)))                                                              return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");                 n_result++;                                                                                     mark[POS(d)] |= MARK_RESULT;                                                            } while (0)

        /* must_include first: the kubelet's decision, even for an unhealthy device. */
        for (char * const *i = must_include; i && *i && n_result < (size_t) size; i++) {
                const NvidiaDevice *d = find_device(s, res, *i);

                if (d && !(mark[POS(d)] & MARK_RESULT))
                        TAKE(d);
        }
        for (size_t i = 0; i < n_avail; i++) {
                const NvidiaDevice *d = avail[i] = find_device(s, res, available[i]);

                if (!d || !d->healthy || (mark[POS(d)] & (MARK_RESULT | MARK_CAND)))
                        continue;
                mark[POS(d)] |= MARK_CAND;
                cand[n_cand++] = (Cand) { .d = d, .u = &s->table.units[d->unit] };
                replicas = replicas || d->sharing != SHARING_NONE;
                mig = mig || s->table.units[d->unit].mig >= 0;
        }
        if (n_cand > 0)
                qsort(cand, n_cand, sizeof(Cand), cand_cmp);
        need = MIN((size_t) size - n_result, n_cand);

        if (!replicas && mig) {
                /* MIG devices: the available order (upstream has no preference either). */
                for (size_t i = 0; i < n_avail && n_result < (size_t) size; i++) {
                        const NvidiaDevice *d = avail[i];

                        if (d && d->healthy && !(mark[POS(d)] & MARK_RESULT))
                                TAKE(d);
                }
        } else if (need == 0 || need == n_cand) {
                for (size_t i = 0; i < need; i++)
                        TAKE(cand[i].d);
        } else if (!replicas) {
                /* Whole GPUs: topology over the candidates (<= NVIDIA_GPUS_MAX) and the
                 * GPUs already taken. */
                _cleanup_free_ const GpuInfo **nodes = NULL;
                _cleanup_free_ Score *full = NULL, *w = NULL;
                Score wm[64] = {};
                size_t m = MIN(n_cand, (size_t) 64), t = m;
                uint64_t mask;

                nodes = calloc(m + n_result + 1, sizeof(GpuInfo *));
                if (!nodes)
                        return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");
                for (size_t i = 0; i < m; i++)
                        nodes[i] = &unit_gpu(r, cand[i].u)->info;
                for (size_t j = 0; j < n_result; j++) {
                        const NvidiaDevice *d = find_device(s, res, result[j]);

                        if (d)
                                nodes[t++] = &unit_gpu(r, &s->table.units[d->unit])->info;
                }
                full = calloc(t * t + 1, sizeof(Score));
                w = calloc(m * m + 1, sizeof(Score));
                if (!full || !w || pair_matrix(nodes, t, full) < 0)
                        return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");
                for (size_t i = 0; i < m; i++) {
                        for (size_t j = 0; j < m; j++)
                                w[i * m + j] = full[i * t + j];
                        for (size_t j = m; j < t; j++)
                                score_add(&wm[i], &full[i * t + j]);
                }
                mask = topo_choose(w, wm, m, MIN(need, m));
                for (size_t i = 0; i < m; i++)
                        if (mask & (UINT64_C(1) << i))
                                TAKE(cand[i].d);
        } else {
                /* Replicas: distributed or packed over their units. */
                in_use = calloc(s->table.n_units + 1, sizeof(uint32_t));
                next = calloc(n_cand + 1, sizeof(uint32_t));
                end = calloc(n_cand + 1, sizeof(uint32_t));
                if (!in_use || !next || !end)
                        return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");
                /* In use: every device of the resource, minus the available ones (not
                 * must_include: those count, as upstream), plus the held ones still
                 * listed as available. */
                for (size_t i = 0; i < res->n; i++)
                        in_use[s->table.devices[res->start + i].unit]++;
                for (size_t i = 0; i < n_cand; i++)
                        in_use[cand[i].d->unit]--;
                for (size_t i = 0; i < n_avail; i++) {
                        const NvidiaDevice *d = avail[i];

                        /* Unhealthy available ids are not in use either. */
                        if (!d || d->healthy || (mark[POS(d)] & (MARK_RESULT | MARK_COUNTED)))
                                continue;
                        mark[POS(d)] |= MARK_COUNTED;
                        in_use[d->unit]--;
                }
                for (char * const *i = held; i && *i; i++) {
                        const NvidiaDevice *d = find_device(s, res, *i);

                        if (!d || (mark[POS(d)] & MARK_HELD) || !(mark[POS(d)] & (MARK_CAND | MARK_COUNTED)))
                                continue;
                        mark[POS(d)] |= MARK_HELD;
                        in_use[d->unit]++;
                }
                /* The units in candidate order, each with its next unpicked candidate. */
                for (size_t i = 0; i < n_cand; i++) {
                        if (i == 0 || cand[i - 1].d->unit != cand[i].d->unit)
                                next[n_ulist++] = (uint32_t) i;
                        end[n_ulist - 1] = (uint32_t) i + 1;
                }
                for (size_t n = 0; n < need; n++) {
                        size_t best = SIZE_MAX, c;

                        for (size_t j = 0; j < n_ulist; j++) {
                                size_t u;

                                if (next[j] >= end[j])
                                        continue;
                                u = cand[next[j]].d->unit;
                                if (best == SIZE_MAX) {
                                        best = j;
                                        continue;
                                }
                                c = cand[next[best]].d->unit;
                                if (s->replica_policy == REPLICA_POLICY_PACKED ? in_use[u] > in_use[c] : in_use[u] < in_use[c])
                                        best = j;
                        }
                        if (best == SIZE_MAX)
                                break;
                        c = next[best]++;
                        TAKE(cand[c].d);
                        in_use[cand[c].d->unit]++;
                }
        }
#undef TAKE
#undef POS

        *ret = TAKE_PTR(result);
        return 0;
}

static int nvidia_preferred(const Resources *r, const char *resource, char * const *available,
                            char * const *must_include, int32_t size, char ***ret, ResourceError *e) {
        return resources_nvidia_preferred_allocation(r, resource, available, must_include, NULL, size, ret, e);
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
