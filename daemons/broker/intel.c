/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * intel.c — the Intel backend: GPU records to the Intel device plugin's resources,
 * devices, Allocate answers and preferred allocations.
 *
 * Contract: see intel.h. Pure: no D-Bus, no I/O. The last device list built per
 * resource is kept (devices_view) and dropped by every change of a GPU or an option:
 * Devices point into the registry's GPU records, which any change may move.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "common/bus-names.h"
#include "common/util.h"
#include "daemons/broker/intel.h"
#include "daemons/broker/policy.h"

typedef struct DevicesMemo {
        char *resource;
        Device *devices;
        size_t n;
} DevicesMemo;

typedef struct IntelState {
        bool enabled;
        uint16_t *allow_ids;    /* intel.allowIDs: serve only these PCI device ids */
        size_t n_allow_ids;
        uint16_t *deny_ids;     /* intel.denyIDs: never serve these */
        size_t n_deny_ids;
        uint32_t shared_dev_num;        /* >= 1 */
        ConfigAllocationPolicy policy;
        bool monitoring;
        ConfigIntelMonitoringMode monitoring_mode;
        ConfigByPath by_path;
        bool cdi_devices;
        /* The last device list built per resource (devices_view). */
        DevicesMemo *memo;
        size_t n_memo;
} IntelState;

static IntelState *state(const Resources *r) {
        return resources_backend_state(r, &intel_backend);
}

static void memo_clear(IntelState *s) {
        if (!s)
                return;
        for (size_t i = 0; i < s->n_memo; i++) {
                free(s->memo[i].resource);
                free(s->memo[i].devices);
        }
        s->memo = mfree(s->memo);
        s->n_memo = 0;
}

static void *intel_state_free(void *p) {
        IntelState *s = p;

        if (!s)
                return NULL;
        memo_clear(s);
        free(s->allow_ids);
        free(s->deny_ids);
        return mfree(s);
}

static int state_new(Resources *r, bool enabled) {
        IntelState *s;

        s = calloc(1, sizeof(IntelState));
        if (!s)
                return -ENOMEM;
        s->enabled = enabled;
        s->shared_dev_num = 1;
        s->monitoring_mode = INTEL_MONITORING_MODE_SPLIT;
        s->by_path = BY_PATH_SINGLE;
        intel_state_free(state(r));
        resources_backend_set_state(r, &intel_backend, s);
        return 0;
}

int resources_new(bool intel_enabled, Resources **ret) {
        _cleanup_(resources_freep) Resources *r = NULL;
        int k;

        k = resources_new_empty(&r);
        if (k < 0)
                return k;
        k = state_new(r, intel_enabled);
        if (k < 0)
                return k;
        *ret = TAKE_PTR(r);
        return 0;
}

/* ---- options ---- */

int resources_parse_pci_id(const char *s, uint16_t *ret) {
        _cleanup_free_ char *t = NULL;
        uint64_t v;
        int k;

        if (isempty(s))
                return -EINVAL;
        /* "0x56a0" or bare hex "56a0", as the Intel plugin accepts. */
        if (!startswith(s, "0x") && !startswith(s, "0X")) {
                if (asprintf(&t, "0x%s", s) < 0)
                        return -ENOMEM;
                s = t;
        }
        k = safe_atou64(s, &v);
        if (k < 0)
                return k;
        if (v > UINT16_MAX)
                return -ERANGE;
        *ret = (uint16_t) v;
        return 0;
}

static int parse_id_list(char * const *l, uint16_t **ret, size_t *ret_n) {
        _cleanup_free_ uint16_t *ids = NULL;
        size_t n = strv_length(l);
        int k;

        if (n == 0) {
                *ret = NULL;
                *ret_n = 0;
                return 0;
        }
        if (n > RESOURCES_IDS_MAX)
                return -E2BIG;
        ids = calloc(n, sizeof(uint16_t));
        if (!ids)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                k = resources_parse_pci_id(l[i], &ids[i]);
                if (k < 0)
                        return k;
        }
        *ret = TAKE_PTR(ids);
        *ret_n = n;
        return 0;
}

int resources_set_id_filters(Resources *r, char * const *allow, char * const *deny) {
        _cleanup_free_ uint16_t *a = NULL, *d = NULL;
        IntelState *s = state(r);
        size_t na, nd;
        int k;

        if (!s)
                return -ENXIO;
        memo_clear(s);

        k = parse_id_list(allow, &a, &na);
        if (k < 0)
                return k;
        k = parse_id_list(deny, &d, &nd);
        if (k < 0)
                return k;
        free(s->allow_ids);
        free(s->deny_ids);
        s->allow_ids = TAKE_PTR(a);
        s->n_allow_ids = na;
        s->deny_ids = TAKE_PTR(d);
        s->n_deny_ids = nd;
        return 0;
}

static bool id_in(const uint16_t *ids, size_t n, uint16_t id) {
        for (size_t i = 0; i < n; i++)
                if (ids[i] == id)
                        return true;
        return false;
}

static const char *intel_name_for_gpu(const Resources *r, const GpuInfo *info) {
        const IntelState *s = state(r);

        if (!s || !s->enabled || !info || isempty(info->id) || !streq(info->vendor, "intel"))
                return NULL;
        if ((s->n_allow_ids > 0 && !id_in(s->allow_ids, s->n_allow_ids, info->device_id)) ||
            id_in(s->deny_ids, s->n_deny_ids, info->device_id))
                return NULL;
        if (streq(info->driver, "i915"))
                return RESOURCE_INTEL_I915;
        if (streq(info->driver, "xe"))
                return RESOURCE_INTEL_XE;
        return NULL;
}

/* "<id>-0" .. "<id>-<N-1>" for N > 1, NULL otherwise. */
static int gpu_build_shares(Gpu *g, uint32_t n) {
        _cleanup_strv_free_ char **l = NULL;

        if (n > 1) {
                l = calloc((size_t) n + 1, sizeof(char *));
                if (!l)
                        return -ENOMEM;
                for (uint32_t i = 0; i < n; i++)
                        if (asprintf(&l[i], "%s-%" PRIu32, g->info.id, i) < 0) {
                                l[i] = NULL;
                                return -ENOMEM;
                        }
        }
        strv_free(g->share_ids);
        g->share_ids = TAKE_PTR(l);
        return 0;
}

int resources_set_intel_options(Resources *r, uint32_t shared_dev_num, ConfigAllocationPolicy policy,
                                bool monitoring, ConfigByPath by_path, bool cdi_devices) {
        uint32_t n = MIN(MAX(shared_dev_num, 1U), 1024U);
        IntelState *s = state(r);
        int k;

        if (!s)
                return -ENXIO;
        memo_clear(s);

        for (size_t i = 0; i < r->n_gpus; i++) {
                k = gpu_build_shares(&r->gpus[i], n);
                if (k < 0)
                        return k;
        }
        s->shared_dev_num = n;
        s->policy = policy;
        s->monitoring = monitoring;
        s->by_path = by_path;
        s->cdi_devices = cdi_devices;
        return 0;
}

int resources_set_intel_monitoring_mode(Resources *r, ConfigIntelMonitoringMode mode) {
        IntelState *s = state(r);

        if (!s)
                return -ENXIO;
        if (mode != INTEL_MONITORING_MODE_SINGLE && mode != INTEL_MONITORING_MODE_SPLIT)
                return -EINVAL;
        memo_clear(s);
        s->monitoring_mode = mode;
        return 0;
}

/* The monitoring resource of an Intel resource name (static strings), or NULL: the
 * combined one in mode single, the driver's in mode split. */
static const char *monitoring_name(const Resources *r, const char *name) {
        const IntelState *s = state(r);

        if (!s || !s->monitoring || !name)
                return NULL;
        if (!streq(name, RESOURCE_INTEL_I915) && !streq(name, RESOURCE_INTEL_XE))
                return NULL;
        if (s->monitoring_mode == INTEL_MONITORING_MODE_SINGLE)
                return RESOURCE_INTEL_MONITORING;
        return streq(name, RESOURCE_INTEL_I915) ? RESOURCE_INTEL_I915 RESOURCE_MONITORING_SUFFIX
                                                : RESOURCE_INTEL_XE RESOURCE_MONITORING_SUFFIX;
}

bool resources_is_monitoring(const Resources *r, const char *resource) {
        const IntelState *s = state(r);

        if (!s || !s->monitoring || !resource)
                return false;
        if (s->monitoring_mode == INTEL_MONITORING_MODE_SINGLE)
                return streq(resource, RESOURCE_INTEL_MONITORING);
        return streq(resource, RESOURCE_INTEL_I915 RESOURCE_MONITORING_SUFFIX) ||
               streq(resource, RESOURCE_INTEL_XE RESOURCE_MONITORING_SUFFIX);
}

/* Whether the monitoring resource grants this GPU. */
static bool monitoring_covers(const Resources *r, const char *resource, const GpuInfo *info) {
        return streq_ptr(monitoring_name(r, intel_name_for_gpu(r, info)), resource);
}

static uint32_t intel_share_limit(const Resources *r, const char *resource) {
        const IntelState *s = state(r);

        return !s || resources_is_monitoring(r, resource) ? 0 : s->shared_dev_num;
}

/* ---- GPU records ---- */

static int intel_gpu_update(Resources *r, const Gpu *g, const GpuInfo *copy, char ***changed) {
        const char *old_name = NULL, *new_name;
        int k;

        memo_clear(state(r));
        new_name = intel_name_for_gpu(r, copy);
        if (g)
                old_name = intel_name_for_gpu(r, &g->info);

        /* old_name points to a static string, so it survives the replacement. */
        k = resources_advertise(r, &intel_backend, new_name, changed);
        if (k >= 0)
                k = resources_advertise(r, &intel_backend, monitoring_name(r, new_name), changed);
        if (k < 0)
                return k;
        if (!streq_ptr(old_name, new_name)) {
                if ((k = resources_changed_add(changed, old_name)) < 0 ||
                    (k = resources_changed_add(changed, new_name)) < 0 ||
                    (k = resources_changed_add(changed, monitoring_name(r, old_name))) < 0 ||
                    (k = resources_changed_add(changed, monitoring_name(r, new_name))) < 0)
                        return k;
        } else if (new_name && g &&
                   (!streq(g->info.id, copy->id) ||
                    g->info.healthy != copy->healthy ||
                    g->info.numa_node != copy->numa_node)) {
                k = resources_changed_add(changed, new_name);
                if (k >= 0)
                        k = resources_changed_add(changed, monitoring_name(r, new_name));
                if (k < 0)
                        return k;
        }
        return 0;
}

static int intel_gpu_stored(Resources *r, Gpu *g, bool same_id) {
        const IntelState *s = state(r);
        uint32_t n = s ? s->shared_dev_num : 1;

        return same_id && (n <= 1 || g->share_ids) ? 0 : gpu_build_shares(g, n);
}

static int intel_gpu_remove(Resources *r, const Gpu *g, char ***changed) {
        const char *name = intel_name_for_gpu(r, &g->info);
        int k;

        memo_clear(state(r));
        k = resources_changed_add(changed, name);
        if (k >= 0)
                k = resources_changed_add(changed, monitoring_name(r, name));
        return k;
}

static int intel_refresh(Resources *r, char ***changed) {
        memo_clear(state(r));
        return 0;
}

/* ---- devices ---- */

/* The devices of one GPU: contiguous, in share order. */
typedef struct DeviceRun {
        size_t start, n;
} DeviceRun;

static int device_run_cmp(const void *a, const void *b, void *userdata) {
        const Device *d = userdata;

        return policy_id_cmp(d[((const DeviceRun *) a)->start].id, d[((const DeviceRun *) b)->start].id);
}

/* Sorts d (n devices in runs) as qsort(device_cmp) would. policy_id_cmp orders ids by
 * GPU part, then share number, and a run holds one GPU's devices in share order, so
 * sorting the runs by their first id is enough: O(GPUs log GPUs) comparisons instead of
 * O(ids log ids) (64 GPUs x 64 shares: 64 runs instead of 4096 devices, per call). */
static int device_runs_sort(Device **d, size_t n, DeviceRun *runs, size_t n_runs) {
        _cleanup_free_ Device *sorted = NULL;
        size_t k = 0;

        if (n_runs < 2)
                return 0;
        qsort_r(runs, n_runs, sizeof(DeviceRun), device_run_cmp, *d);
        sorted = calloc(n, sizeof(Device));
        if (!sorted)
                return -ENOMEM;
        for (size_t i = 0; i < n_runs; i++) {
                memcpy(sorted + k, *d + runs[i].start, runs[i].n * sizeof(Device));
                k += runs[i].n;
        }
        free(*d);
        *d = TAKE_PTR(sorted);
        return 0;
}

static int intel_devices(const Resources *r, const char *resource, Device **ret, size_t *ret_n) {
        _cleanup_free_ Device *d = NULL;
        _cleanup_free_ DeviceRun *runs = NULL;
        const IntelState *st = state(r);
        size_t n = 0, n_runs = 0, shares;
        int k;

        if (resources_is_monitoring(r, resource)) {
                bool any = false, healthy = false;

                for (size_t i = 0; i < r->n_gpus; i++)
                        if (monitoring_covers(r, resource, &r->gpus[i].info)) {
                                any = true;
                                healthy = healthy || r->gpus[i].info.healthy;
                        }
                d = calloc(1, sizeof(Device));
                if (!d)
                        return -ENOMEM;
                if (any)
                        d[n++] = (Device) {
                                .id = RESOURCE_MONITORING_ID,
                                .healthy = healthy,
                                .numa_node = -1,
                        };
                *ret = TAKE_PTR(d);
                *ret_n = n;
                return 0;
        }

        shares = st && st->shared_dev_num > 1 ? st->shared_dev_num : 1;
        d = calloc((r->n_gpus ?: 1) * shares, sizeof(Device));
        runs = calloc(r->n_gpus ?: 1, sizeof(DeviceRun));
        if (!d || !runs)
                return -ENOMEM;
        for (size_t i = 0; i < r->n_gpus; i++) {
                const Gpu *g = &r->gpus[i];

                if (!streq_ptr(intel_name_for_gpu(r, &g->info), resource))
                        continue;
                runs[n_runs++] = (DeviceRun) { .start = n, .n = g->share_ids ? shares : 1 };
                for (size_t s = 0; s < (g->share_ids ? shares : 1); s++)
                        d[n++] = (Device) {
                                .id = g->share_ids ? g->share_ids[s] : g->info.id,
                                .healthy = g->info.healthy,
                                .numa_node = g->info.numa_node,
                                .gpu = g,
                                .share = (uint32_t) s,
                        };
        }
        k = device_runs_sort(&d, n, runs, n_runs);
        if (k < 0)
                return k;

        *ret = TAKE_PTR(d);
        *ret_n = n;
        return 0;
}

static int intel_devices_view(const Resources *r, const char *resource, const Device **ret, size_t *ret_n) {
        IntelState *w = state(r);       /* the memo is a cache: logically const */
        _cleanup_free_ Device *d = NULL;
        _cleanup_free_ char *name = NULL;
        DevicesMemo *m;
        size_t n;
        int k;

        if (!w)
                return -ENOENT;
        for (size_t i = 0; i < w->n_memo; i++)
                if (streq(w->memo[i].resource, resource)) {
                        *ret = w->memo[i].devices;
                        *ret_n = w->memo[i].n;
                        return 0;
                }
        k = intel_devices(r, resource, &d, &n);
        if (k < 0)
                return k;
        name = strdup(resource);
        m = reallocarray(w->memo, w->n_memo + 1, sizeof(DevicesMemo));
        if (!name || !m)
                return -ENOMEM;
        w->memo = m;
        w->memo[w->n_memo++] = (DevicesMemo) { .resource = TAKE_PTR(name), .devices = TAKE_PTR(d), .n = n };
        *ret = w->memo[w->n_memo - 1].devices;
        *ret_n = n;
        return 0;
}

/* ---- Allocate ---- */

static size_t gpu_node_count(const Gpu *g) {
        size_t n = strv_length(g->info.device_nodes);

        return n > 0 ? n : 2;
}

static void gpu_add_specs(const Gpu *g, DeviceSpec *specs, size_t *m) {
        if (strv_length(g->info.device_nodes) > 0) {
                for (char **p = g->info.device_nodes; *p; p++)
                        device_specs_add(specs, m, *p);
                return;
        }
        device_specs_add(specs, m, g->info.card_node);
        device_specs_add(specs, m, g->info.render_node);
}

static int intel_allocate_specs(const Resources *r, const char *resource, char * const *ids,
                                DeviceSpec **ret, size_t *ret_n) {
        _cleanup_free_ DeviceSpec *specs = NULL;
        const Device *d;
        size_t n, m = 0, room = 1, n_ids = strv_length(ids);
        int k;

        k = intel_devices_view(r, resource, &d, &n);
        if (k < 0)
                return k;

        if (resources_is_monitoring(r, resource)) {
                for (size_t i = 0; i < n_ids; i++)
                        if (!resources_find_device(d, n, ids[i]))
                                return -ENODEV;
                for (size_t i = 0; i < r->n_gpus; i++)
                        room += gpu_node_count(&r->gpus[i]) + strv_length(r->gpus[i].info.mei_nodes);
                specs = calloc(room, sizeof(DeviceSpec));
                if (!specs)
                        return -ENOMEM;
                /* The DRM nodes of every covered GPU, then its MEI nodes (the Intel
                 * plugin's monitoring device spec). */
                for (size_t i = 0; i < r->n_gpus && n_ids > 0; i++)
                        if (r->gpus[i].info.healthy && monitoring_covers(r, resource, &r->gpus[i].info)) {
                                gpu_add_specs(&r->gpus[i], specs, &m);
                                for (char **p = r->gpus[i].info.mei_nodes; p && *p; p++)
                                        device_specs_add(specs, &m, *p);
                        }
                *ret = TAKE_PTR(specs);
                *ret_n = m;
                return 0;
        }

        for (size_t i = 0; i < n_ids; i++) {
                const Device *dev = resources_find_device(d, n, ids[i]);

                if (!dev || !dev->gpu)
                        return -ENODEV;
                room += gpu_node_count(dev->gpu);
        }
        specs = calloc(room, sizeof(DeviceSpec));
        if (!specs)
                return -ENOMEM;
        for (size_t i = 0; i < n_ids; i++)
                gpu_add_specs(resources_find_device(d, n, ids[i])->gpu, specs, &m);

        *ret = TAKE_PTR(specs);
        *ret_n = m;
        return 0;
}

static int intel_allocate_extras(const Resources *r, const char *resource, char * const *ids,
                                 MountSpec **ret_mounts, size_t *ret_n_mounts, char ***ret_cdi) {
        _cleanup_strv_free_ char **cdi = NULL;
        _cleanup_free_ MountSpec *mounts = NULL;
        _cleanup_free_ const Gpu **gpus = NULL;
        const IntelState *s = state(r);
        const Device *d;
        size_t n, n_gpus = 0, m = 0, room = 1, n_ids = strv_length(ids);
        int k;

        k = intel_devices_view(r, resource, &d, &n);
        if (k < 0)
                return k;
        cdi = calloc(1, sizeof(char *));
        gpus = calloc(n_ids ?: 1, sizeof(Gpu *));
        if (!cdi || !gpus)
                return -ENOMEM;

        /* The distinct GPUs of the request, in request order. */
        for (size_t i = 0; i < n_ids && !resources_is_monitoring(r, resource); i++) {
                const Device *dev = resources_find_device(d, n, ids[i]);
                bool seen = false;

                if (!dev || !dev->gpu)
                        return -ENODEV;
                for (size_t j = 0; j < n_gpus && !seen; j++)
                        seen = gpus[j] == dev->gpu;
                if (!seen) {
                        gpus[n_gpus++] = dev->gpu;
                        room += strv_length(dev->gpu->info.by_path_nodes);
                }
        }

        mounts = calloc(room, sizeof(MountSpec));
        if (!mounts)
                return -ENOMEM;
        for (size_t j = 0; j < n_gpus; j++) {
                char * const *links = gpus[j]->info.by_path_nodes;

                if (s->by_path == BY_PATH_SINGLE)
                        for (char * const *p = links; p && *p; p++)
                                mounts[m++] = (MountSpec) {
                                        .container_path = *p,
                                        .host_path = *p,
                                        .read_only = true,
                                };
                else if (s->by_path == BY_PATH_ALL && strv_length(links) > 0 && m == 0)
                        mounts[m++] = (MountSpec) {
                                .container_path = RESOURCES_BY_PATH_DIR,
                                .host_path = RESOURCES_BY_PATH_DIR,
                                .read_only = true,
                        };

                if (s->cdi_devices) {
                        char *name;

                        if (asprintf(&name, "%s=%s", RESOURCES_CDI_KIND_INTEL, gpus[j]->info.id) < 0)
                                return -ENOMEM;
                        k = strv_consume(&cdi, name);
                        if (k < 0)
                                return k;
                }
        }

        *ret_mounts = TAKE_PTR(mounts);
        *ret_n_mounts = m;
        *ret_cdi = TAKE_PTR(cdi);
        return 0;
}

/* ---- preferred allocation ---- */

static bool result_has(char * const *result, size_t n, const char *id) {
        for (size_t i = 0; i < n; i++)
                if (streq(result[i], id))
                        return true;
        return false;
}

static int intel_preferred_allocation(const Resources *r, const char *resource,
                                      char * const *available, char * const *must_include,
                                      int32_t size, char ***ret, ResourceError *e) {
        _cleanup_strv_free_ char **result = NULL;
        _cleanup_free_ PolicyCandidate *cand = NULL;
        _cleanup_free_ size_t *picked = NULL;
        _cleanup_free_ Device *d = NULL;
        _cleanup_free_ bool *taken = NULL;
        const IntelState *s = state(r);
        size_t n, n_result = 0, n_cand = 0;
        int k;

        k = resources_check_preferred(r, resource, (char * const *[]) { must_include, available }, 2, size, e);
        if (k < 0)
                return k;

        k = intel_devices(r, resource, &d, &n);
        if (k < 0)
                return resource_error_set(e, KGPU_ERROR_UNKNOWN_RESOURCE, k,
                                          "Cannot list devices of '%s'", resource);

        result = calloc((size_t) size + 1, sizeof(char *));
        cand = calloc(strv_length(available) + 1, sizeof(PolicyCandidate));
        picked = calloc(strv_length(available) + 1, sizeof(size_t));
        taken = calloc(n + 1, sizeof(bool));  /* by index in d: candidates so far */
        if (!result || !cand || !picked || !taken)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");

        /* must_include first: the kubelet's decision, even for an unhealthy device. */
        for (char * const *i = must_include; i && *i && n_result < (size_t) size; i++) {
                const Device *dev = resources_find_device(d, n, *i);

                if (!dev || result_has(result, n_result, dev->id))
                        continue;
                result[n_result] = strdup(dev->id);
                if (!result[n_result])
                        return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");
                n_result++;
        }

        /* Then the policy's choice among the healthy available devices not taken yet. */
        for (char * const *i = available; i && *i; i++) {
                const Device *dev = resources_find_device(d, n, *i);

                /* A flag per device, not a scan of the candidates: 1024 available ids
                 * made that scan half a million comparisons per call. */
                if (!dev || !dev->healthy || taken[dev - d] || result_has(result, n_result, dev->id))
                        continue;
                taken[dev - d] = true;
                cand[n_cand++] = (PolicyCandidate) {
                        .id = dev->id,
                        .gpu = dev->gpu ? dev->gpu->info.id : dev->id,
                        .share = dev->share,
                };
        }
        k = policy_select(s ? s->policy : ALLOCATION_POLICY_NONE, cand, n_cand, (size_t) size - n_result, picked);
        if (k < 0)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, k, "Allocation policy failed");
        for (size_t j = 0; j < (size_t) k; j++) {
                result[n_result] = strdup(cand[picked[j]].id);
                if (!result[n_result])
                        return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");
                n_result++;
        }

        *ret = TAKE_PTR(result);
        return 0;
}

/* ---- configuration ---- */

static int intel_configure(Resources *r, const Config *c, const char **ret_what) {
        int k;

        k = state_new(r, c->intel_enabled);
        if (k < 0)
                return k;
        k = resources_set_intel_options(r, c->intel_shared_dev_num, c->intel_allocation_policy,
                                        c->intel_enable_monitoring, c->intel_by_path, c->intel_cdi_devices);
        if (k >= 0)
                k = resources_set_intel_monitoring_mode(r, c->intel_monitoring_mode);
        if (k < 0)
                return k;
        k = resources_set_id_filters(r, c->intel_allow_ids, c->intel_deny_ids);
        if (k < 0 && k != -ENOMEM)
                *ret_what = "intel.allowIDs or intel.denyIDs (PCI device ids like 0x56a0 expected)";
        return k;
}

static int intel_describe(const Resources *r, const Config *c, BackendNote **notes, size_t *n_notes) {
        const IntelState *s = state(r);
        int k;

        if (c->intel_resource_manager) {
                k = backend_note_add(notes, n_notes, LOG_INFO,
                                     "intel.resourceManager (-resource-manager): Allocate of gpu.intel.com/i915 and "
                                     "xe serves the cards GPU Aware Scheduling chose (pod annotations from "
                                     "kgpu-clusterd).");
                if (k < 0)
                        return k;
        }
        if (c->intel_health_management) {
                k = backend_note_add(notes, n_notes, LOG_NOTICE,
                                     "intel.healthManagement (-health-management): GPU health comes from udev "
                                     "(kgpu-probed), ignoring.");
                if (k < 0)
                        return k;
        }
        if (!s)
                return 0;
        return backend_note_add(notes, n_notes, LOG_INFO,
                                "Intel: sharedDevNum %" PRIu32 ", allocationPolicy %s, enableMonitoring %s, "
                                "monitoringMode %s, byPath %s.",
                                s->shared_dev_num, config_allocation_policy_to_string(c->intel_allocation_policy),
                                c->intel_enable_monitoring ? "true" : "false",
                                config_intel_monitoring_mode_to_string(c->intel_monitoring_mode),
                                config_by_path_to_string(c->intel_by_path));
}

const Backend intel_backend = {
        .name = "intel",
        .state_free = intel_state_free,
        .configure = intel_configure,
        .describe = intel_describe,
        .gpu_update = intel_gpu_update,
        .gpu_stored = intel_gpu_stored,
        .gpu_remove = intel_gpu_remove,
        .refresh = intel_refresh,
        .name_for_gpu = intel_name_for_gpu,
        .devices = intel_devices,
        .devices_view = intel_devices_view,
        .allocate_specs = intel_allocate_specs,
        .allocate_extras = intel_allocate_extras,
        .preferred_allocation = intel_preferred_allocation,
        .share_limit = intel_share_limit,
        .label = "Intel GPUs",
};
