/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-table.c — the NVIDIA device table: built from the GPU records and the options, and
 * looked up.
 *
 * Contract: see nvidia-internal.h. Pure: no D-Bus, no I/O, no logging. Devices are sorted
 * by (resource, policy_id_cmp(id)); lookups go through a hash index.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/nvidia-sharing.h"
#include "common/util.h"
#include "daemons/broker/nvidia-internal.h"
#include "daemons/broker/policy.h"

#define PROBLEMS_MAX 16
#define REPLICA_SUFFIX_MAX 6            /* "::1023" */

void nvidia_table_done(NvidiaTable *t) {
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

bool nvidia_gpu_is_nvidia(const GpuInfo *i) {
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

bool nvidia_device_healthy(const GpuInfo *g, NvidiaSharing sharing) {
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
                .healthy = nvidia_device_healthy(g, sharing),
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

int nvidia_table_build(const Resources *r, const NvidiaState *s, NvidiaTable *ret) {
        _cleanup_free_ size_t *gpus = NULL, *remap = NULL;
        _cleanup_strv_free_ char **names_by_old = NULL;
        Builder b = { .r = r, .s = s };
        size_t n = 0;
        int single = 0, k = 0;

        gpus = calloc(r->n_gpus ?: 1, sizeof(size_t));
        if (!gpus)
                return -ENOMEM;
        for (size_t i = 0; s->enabled && i < r->n_gpus; i++)
                if (nvidia_gpu_is_nvidia(&r->gpus[i].info))
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
        if (single < 0) {
                /* An invalid single layout advertises its resource with no device, whatever
                 * the layout and whatever was advertised before (a name once registered
                 * stays), so the node says 0 rather than nothing. */
                size_t unused;

                k = resource_index(&b, NVIDIA_RESOURCE_GPU, &unused);
                for (size_t i = 0; k >= 0 && i < s->n_shares; i++)
                        if (streq(s->shares[i].name, NVIDIA_RESOURCE_GPU))
                                k = resource_index(&b, s->shares[i].resource, &unused);
                if (k < 0)
                        goto fail;
        }
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
        nvidia_table_done(&b.t);
        return k;
}

const NvidiaResource *nvidia_table_resource(const NvidiaTable *t, const char *name) {
        if (!name)
                return NULL;
        for (size_t i = 0; i < t->n_resources; i++)
                if (streq(t->resources[i].name, name))
                        return &t->resources[i];
        return NULL;
}

/* ---- lookups ---- */

const NvidiaDevice *nvidia_find_device(const NvidiaState *s, const NvidiaResource *res, const char *id) {
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

const Gpu *nvidia_unit_gpu(const Resources *r, const NvidiaUnit *u) {
        return &r->gpus[u->gpu];
}

/* The distinct units of a request, in request order. ret: room for n ids. */
int nvidia_request_units(const NvidiaState *s, const NvidiaResource *res, char * const *ids,
                         size_t *ret, size_t *ret_n, bool *ret_mps) {
        size_t n = 0;
        bool mps = false;

        for (char * const *i = ids; i && *i; i++) {
                const NvidiaDevice *d = nvidia_find_device(s, res, *i);
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

