/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * resources.c — GPU records to resources, devices and allocation answers.
 *
 * Contract: see resources.h. Pure: no D-Bus, no I/O. Every list a caller hands in is
 * bounded before it is walked; the error messages name the offending id (printable
 * ASCII only, anything else becomes '?').
 */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/util.h"
#include "daemons/broker/nvidia.h"
#include "daemons/broker/policy.h"
#include "daemons/broker/resources.h"

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

int resources_new(bool intel_enabled, Resources **ret) {
        Resources *r;

        r = calloc(1, sizeof(Resources));
        if (!r)
                return -ENOMEM;
        r->intel_enabled = intel_enabled;
        r->shared_dev_num = 1;
        r->by_path = BY_PATH_SINGLE;
        *ret = r;
        return 0;
}

typedef struct DevicesMemo {
        char *resource;
        Device *devices;
        size_t n;
} DevicesMemo;

void resources_memo_clear(Resources *r) {
        for (size_t i = 0; i < r->n_memo; i++) {
                free(r->memo[i].resource);
                free(r->memo[i].devices);
        }
        r->memo = mfree(r->memo);
        r->n_memo = 0;
}

Resources *resources_free(Resources *r) {
        if (!r)
                return NULL;
        resources_memo_clear(r);
        for (size_t i = 0; i < r->n_gpus; i++) {
                free(r->gpus[i].path);
                gpu_info_done(&r->gpus[i].info);
                strv_free(r->gpus[i].share_ids);
        }
        free(r->gpus);
        strv_free(r->seen);
        free(r->allow_ids);
        free(r->deny_ids);
        nvidia_state_free(r->nvidia);
        return mfree(r);
}

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
        size_t na, nd;
        int k;

        resources_memo_clear(r);

        k = parse_id_list(allow, &a, &na);
        if (k < 0)
                return k;
        k = parse_id_list(deny, &d, &nd);
        if (k < 0)
                return k;
        free(r->allow_ids);
        free(r->deny_ids);
        r->allow_ids = TAKE_PTR(a);
        r->n_allow_ids = na;
        r->deny_ids = TAKE_PTR(d);
        r->n_deny_ids = nd;
        return 0;
}

static bool id_in(const uint16_t *ids, size_t n, uint16_t id) {
        for (size_t i = 0; i < n; i++)
                if (ids[i] == id)
                        return true;
        return false;
}

const char *resources_name_for_gpu(const Resources *r, const GpuInfo *info) {
        if (!r->intel_enabled || !info || isempty(info->id) || !streq(info->vendor, "intel"))
                return NULL;
        if ((r->n_allow_ids > 0 && !id_in(r->allow_ids, r->n_allow_ids, info->device_id)) ||
            id_in(r->deny_ids, r->n_deny_ids, info->device_id))
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
        int k;

        resources_memo_clear(r);

        for (size_t i = 0; i < r->n_gpus; i++) {
                k = gpu_build_shares(&r->gpus[i], n);
                if (k < 0)
                        return k;
        }
        r->shared_dev_num = n;
        r->policy = policy;
        r->monitoring = monitoring;
        r->by_path = by_path;
        r->cdi_devices = cdi_devices;
        return 0;
}

/* The monitoring resource of an Intel resource name (static strings), or NULL. */
static const char *monitoring_name(const Resources *r, const char *name) {
        if (!r->monitoring || !name)
                return NULL;
        if (streq(name, RESOURCE_INTEL_I915))
                return RESOURCE_INTEL_I915 RESOURCE_MONITORING_SUFFIX;
        if (streq(name, RESOURCE_INTEL_XE))
                return RESOURCE_INTEL_XE RESOURCE_MONITORING_SUFFIX;
        return NULL;
}

/* The Intel resource a monitoring resource covers, or NULL. */
static const char *monitored_name(const Resources *r, const char *resource) {
        if (!r->monitoring || !resource)
                return NULL;
        if (streq(resource, RESOURCE_INTEL_I915 RESOURCE_MONITORING_SUFFIX))
                return RESOURCE_INTEL_I915;
        if (streq(resource, RESOURCE_INTEL_XE RESOURCE_MONITORING_SUFFIX))
                return RESOURCE_INTEL_XE;
        return NULL;
}

bool resources_is_monitoring(const Resources *r, const char *resource) {
        return monitored_name(r, resource);
}

uint32_t resources_share_limit(const Resources *r, const char *resource) {
        /* NVIDIA replicas are ids of their own: no per-GPU container limit. */
        if (resources_is_nvidia(r, resource))
                return 0;
        return resources_is_monitoring(r, resource) ? 0 : r->shared_dev_num;
}

static Gpu *resources_find_gpu(const Resources *r, const char *path) {
        for (size_t i = 0; i < r->n_gpus; i++)
                if (streq(r->gpus[i].path, path))
                        return &r->gpus[i];
        return NULL;
}

const Gpu *resources_get_gpu(const Resources *r, const char *path) {
        return resources_find_gpu(r, path);
}

static int changed_add(char ***changed, const char *name) {
        int r;

        if (!changed || !name || strv_contains(*changed, name))
                return 0;
        r = strv_extend(changed, name);
        if (r < 0)
                return r;
        strv_sort(*changed);
        return 0;
}

static int seen_add(Resources *r, const char *name, char ***changed) {
        int k;

        if (!name || strv_contains(r->seen, name))
                return 0;
        k = strv_extend(&r->seen, name);
        if (k < 0)
                return k;
        strv_sort(r->seen);
        return changed_add(changed, name);
}

static int update_gpu_record(Resources *r, const char *path, const GpuInfo *info, char ***changed) {
        const char *old_name = NULL, *new_name;
        GpuInfo copy = {};
        Gpu *g;
        int k;

        if (isempty(path) || !info || isempty(info->id))
                return -EINVAL;

        for (size_t i = 0; i < r->n_gpus; i++)
                if (streq(r->gpus[i].info.id, info->id) && !streq(r->gpus[i].path, path))
                        return -EEXIST;

        g = resources_find_gpu(r, path);
        if (!g && r->n_gpus >= RESOURCES_GPUS_MAX)
                return -E2BIG;

        k = gpu_info_copy(info, &copy);
        if (k < 0)
                return k;

        new_name = resources_name_for_gpu(r, &copy);
        if (g)
                old_name = resources_name_for_gpu(r, &g->info);

        /* Collect the changed names before touching the record: old_name points to a
         * static string, so it survives the replacement. */
        k = seen_add(r, new_name, changed);
        if (k >= 0)
                k = seen_add(r, monitoring_name(r, new_name), changed);
        if (k < 0)
                goto fail;
        if (!streq_ptr(old_name, new_name)) {
                if ((k = changed_add(changed, old_name)) < 0 ||
                    (k = changed_add(changed, new_name)) < 0 ||
                    (k = changed_add(changed, monitoring_name(r, old_name))) < 0 ||
                    (k = changed_add(changed, monitoring_name(r, new_name))) < 0)
                        goto fail;
        } else if (new_name && g &&
                   (!streq(g->info.id, copy.id) ||
                    g->info.healthy != copy.healthy ||
                    g->info.numa_node != copy.numa_node)) {
                k = changed_add(changed, new_name);
                if (k >= 0)
                        k = changed_add(changed, monitoring_name(r, new_name));
                if (k < 0)
                        goto fail;
        }

        if (g) {
                bool same_id = streq(g->info.id, copy.id);

                gpu_info_done(&g->info);
                g->info = copy;
                return same_id && (r->shared_dev_num <= 1 || g->share_ids) ? 0 :
                        gpu_build_shares(g, r->shared_dev_num);
        }

        Gpu *n = reallocarray(r->gpus, r->n_gpus + 1, sizeof(Gpu));
        if (!n) {
                k = -ENOMEM;
                goto fail;
        }
        r->gpus = n;
        n[r->n_gpus].path = strdup(path);
        if (!n[r->n_gpus].path) {
                k = -ENOMEM;
                goto fail;
        }
        n[r->n_gpus].info = copy;
        n[r->n_gpus].share_ids = NULL;
        r->n_gpus++;
        k = gpu_build_shares(&n[r->n_gpus - 1], r->shared_dev_num);
        if (k < 0)
                return k;
        return 1;

fail:
        gpu_info_done(&copy);
        return k;
}

int resources_refresh_nvidia(Resources *r, char ***changed) {
        _cleanup_strv_free_ char **advertised = NULL;
        int k;

        resources_memo_clear(r);

        if (!r->nvidia)
                return 0;
        k = nvidia_refresh(r, &advertised, changed);
        for (char **n = advertised; k >= 0 && n && *n; n++)
                k = seen_add(r, *n, changed);
        return k;
}

int resources_update_gpu(Resources *r, const char *path, const GpuInfo *info, char ***changed) {
        int k, q;

        resources_memo_clear(r);

        k = update_gpu_record(r, path, info, changed);
        if (k < 0)
                return k;
        q = resources_refresh_nvidia(r, changed);
        return q < 0 ? q : k;
}

static int remove_gpu_record(Resources *r, const char *path, char ***changed);

int resources_remove_gpu(Resources *r, const char *path, char ***changed) {
        int k, q;

        resources_memo_clear(r);

        k = remove_gpu_record(r, path, changed);
        if (k <= 0)
                return k;
        q = resources_refresh_nvidia(r, changed);
        return q < 0 ? q : k;
}

static int remove_gpu_record(Resources *r, const char *path, char ***changed) {
        Gpu *g;
        size_t i;
        int k;

        g = resources_find_gpu(r, path);
        if (!g)
                return 0;
        k = changed_add(changed, resources_name_for_gpu(r, &g->info));
        if (k >= 0)
                k = changed_add(changed, monitoring_name(r, resources_name_for_gpu(r, &g->info)));
        if (k < 0)
                return k;

        i = (size_t) (g - r->gpus);
        free(g->path);
        gpu_info_done(&g->info);
        strv_free(g->share_ids);
        memmove(r->gpus + i, r->gpus + i + 1, (r->n_gpus - i - 1) * sizeof(Gpu));
        r->n_gpus--;
        return 1;
}

bool resources_known(const Resources *r, const char *resource) {
        return strv_contains(r->seen, resource);
}

static int device_cmp(const void *a, const void *b) {
        return policy_id_cmp(((const Device *) a)->id, ((const Device *) b)->id);
}

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

int resources_get_devices(const Resources *r, const char *resource, Device **ret, size_t *ret_n) {
        _cleanup_free_ Device *d = NULL;
        _cleanup_free_ DeviceRun *runs = NULL;
        const char *monitored;
        size_t n = 0, n_runs = 0, shares;
        int k;

        if (!resources_known(r, resource))
                return -ENOENT;
        if (resources_is_nvidia(r, resource))
                return nvidia_get_devices(r, resource, ret, ret_n);

        monitored = monitored_name(r, resource);
        if (monitored) {
                bool any = false, healthy = false;

                for (size_t i = 0; i < r->n_gpus; i++)
                        if (streq_ptr(resources_name_for_gpu(r, &r->gpus[i].info), monitored)) {
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

        shares = r->shared_dev_num > 1 ? r->shared_dev_num : 1;
        d = calloc((r->n_gpus ?: 1) * shares, sizeof(Device));
        runs = calloc(r->n_gpus ?: 1, sizeof(DeviceRun));
        if (!d || !runs)
                return -ENOMEM;
        for (size_t i = 0; i < r->n_gpus; i++) {
                const Gpu *g = &r->gpus[i];

                if (!streq_ptr(resources_name_for_gpu(r, &g->info), resource))
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

const Device *resources_find_device(const Device *d, size_t n, const char *id) {
        Device key = { .id = id };
        const Device *f;

        if (!id || n == 0)
                return NULL;
        f = bsearch(&key, d, n, sizeof(Device), device_cmp);
        return f && streq(f->id, id) ? f : NULL;
}

int resources_devices_view(const Resources *r, const char *resource, const Device **ret, size_t *ret_n) {
        Resources *w = (Resources *) r;         /* the memo is a cache: logically const */
        _cleanup_free_ Device *d = NULL;
        _cleanup_free_ char *name = NULL;
        DevicesMemo *m;
        size_t n;
        int k;

        if (resources_is_nvidia(r, resource))
                return -EOPNOTSUPP;
        for (size_t i = 0; i < r->n_memo; i++)
                if (streq(r->memo[i].resource, resource)) {
                        *ret = r->memo[i].devices;
                        *ret_n = r->memo[i].n;
                        return 0;
                }
        k = resources_get_devices(r, resource, &d, &n);
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

int resources_devices(const Resources *r, const char *resource, Device **owned, const Device **ret, size_t *ret_n) {
        int k;

        *owned = NULL;
        if (!resources_is_nvidia(r, resource))
                return resources_devices_view(r, resource, ret, ret_n);
        k = resources_get_devices(r, resource, owned, ret_n);
        if (k >= 0)
                *ret = *owned;
        return k;
}

const Gpu *resources_gpu_of_device(const Resources *r, const char *resource, const char *id) {
        _cleanup_free_ Device *owned = NULL;
        const Device *d, *f;
        size_t n;

        if (resources_devices(r, resource, &owned, &d, &n) < 0)
                return NULL;
        f = resources_find_device(d, n, id);
        return f ? f->gpu : NULL;
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

int resources_check_name(const Resources *r, const char *resource, ResourceError *e) {
        if (isempty(resource) || strnlen(resource, RESOURCES_NAME_MAX + 1) > RESOURCES_NAME_MAX)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -EINVAL,
                                          "Resource name is empty or longer than %u bytes",
                                          RESOURCES_NAME_MAX);
        if (!resources_known(r, resource))
                return resource_error_set(e, KGPU_ERROR_UNKNOWN_RESOURCE, -ENOENT,
                                          "Unknown resource '%s'", resource);
        return 0;
}

static int id_ptr_cmp(const void *a, const void *b) {
        return strcmp(*(char * const *) a, *(char * const *) b);
}

/* Shape checks shared by all id lists: count, id length, duplicates (within the list,
 * and against extra when given, for checks across a whole call). */
static int check_id_shape(char * const *ids, bool allow_empty, char * const *extra, ResourceError *e) {
        _cleanup_free_ char **sorted = NULL;
        size_t n = 0, n_extra;

        for (char * const *i = ids; i && *i; i++) {
                if (++n > RESOURCES_IDS_MAX)
                        return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -E2BIG,
                                                  "More than %u device ids in one request",
                                                  RESOURCES_IDS_MAX);
                if (isempty(*i) || strnlen(*i, RESOURCES_ID_MAX + 1) > RESOURCES_ID_MAX)
                        return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -EINVAL,
                                                  "Device id is empty or longer than %u bytes",
                                                  RESOURCES_ID_MAX);
        }
        if (n == 0 && !allow_empty)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -EINVAL,
                                          "Empty device id list");

        /* Duplicates on a sorted copy of both lists (extra has none of its own): O(n log n),
         * where a pairwise scan of RESOURCES_IDS_MAX ids would be 8 million comparisons. */
        n_extra = strv_length(extra);
        if (n + n_extra < 2)
                return 0;
        sorted = calloc(n + n_extra, sizeof(char *));
        if (!sorted)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -ENOMEM, "Out of memory");
        if (n > 0)
                memcpy(sorted, ids, n * sizeof(char *));
        if (n_extra > 0)
                memcpy(sorted + n, extra, n_extra * sizeof(char *));
        qsort(sorted, n + n_extra, sizeof(char *), id_ptr_cmp);
        for (size_t i = 1; i < n + n_extra; i++)
                if (streq(sorted[i - 1], sorted[i]))
                        return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -EINVAL,
                                                  "Device id '%s' requested more than once",
                                                  sorted[i]);
        return 0;
}

static int check_ids_known(const Device *d, size_t n, const char *resource, char * const *ids,
                           bool need_healthy, ResourceError *e) {
        for (char * const *i = ids; i && *i; i++) {
                const Device *dev = resources_find_device(d, n, *i);

                if (!dev)
                        return resource_error_set(e, KGPU_ERROR_UNKNOWN_DEVICE, -ENODEV,
                                                  "Unknown device '%s' for resource '%s'",
                                                  *i, resource);
                if (need_healthy && !dev->healthy)
                        return resource_error_set(e, KGPU_ERROR_UNHEALTHY, -EIO,
                                                  "Device '%s' of resource '%s' is unhealthy",
                                                  *i, resource);
        }
        return 0;
}

int resources_check_ids(const Resources *r, const char *resource, char * const *ids,
                        bool allow_empty, bool need_healthy, ResourceError *e) {
        _cleanup_free_ Device *owned = NULL;
        const Device *d;
        size_t n;
        int k;

        k = resources_check_name(r, resource, e);
        if (k < 0)
                return k;
        k = check_id_shape(ids, allow_empty, NULL, e);
        if (k < 0)
                return k;
        k = resources_devices(r, resource, &owned, &d, &n);
        if (k < 0)
                return resource_error_set(e, KGPU_ERROR_UNKNOWN_RESOURCE, k,
                                          "Cannot list devices of '%s'", resource);
        return check_ids_known(d, n, resource, ids, need_healthy, e);
}

int resources_check_allocate(const Resources *r, const char *resource,
                             char ** const *requests, size_t n_requests, ResourceError *e) {
        _cleanup_strv_free_ char **all = NULL;
        _cleanup_free_ Device *owned = NULL;
        const Device *d;
        size_t n;
        int k;

        k = resources_check_name(r, resource, e);
        if (k < 0)
                return k;
        if (n_requests == 0)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -EINVAL,
                                          "No container request");
        if (n_requests > RESOURCES_REQUESTS_MAX)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -E2BIG,
                                          "More than %u container requests in one call",
                                          RESOURCES_REQUESTS_MAX);

        for (size_t i = 0; i < n_requests; i++) {
                k = check_id_shape(requests[i], false, all, e);
                if (k < 0)
                        return k;
                if (strv_length(all) + strv_length(requests[i]) > RESOURCES_IDS_MAX)
                        return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -E2BIG,
                                                  "More than %u device ids in one call",
                                                  RESOURCES_IDS_MAX);
                for (char * const *j = requests[i]; *j; j++) {
                        k = strv_extend(&all, *j);
                        if (k < 0)
                                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, k,
                                                          "Out of memory");
                }
        }

        k = resources_devices(r, resource, &owned, &d, &n);
        if (k < 0)
                return resource_error_set(e, KGPU_ERROR_UNKNOWN_RESOURCE, k,
                                          "Cannot list devices of '%s'", resource);
        for (size_t i = 0; i < n_requests; i++) {
                k = check_ids_known(d, n, resource, requests[i], true, e);
                if (k < 0)
                        return k;
        }
        if (resources_is_nvidia(r, resource))
                return nvidia_check_allocate(r, resource, requests, n_requests, e);
        return 0;
}

/* Appends path once. */
static void spec_add(DeviceSpec *specs, size_t *m, const char *path) {
        if (isempty(path))
                return;
        for (size_t i = 0; i < *m; i++)
                if (streq(specs[i].host_path, path))
                        return;
        specs[(*m)++] = (DeviceSpec) {
                .container_path = path,
                .host_path = path,
                .permissions = "rw",
        };
}

static size_t gpu_node_count(const Gpu *g) {
        size_t n = strv_length(g->info.device_nodes);

        return n > 0 ? n : 2;
}

static void gpu_add_specs(const Gpu *g, DeviceSpec *specs, size_t *m) {
        if (strv_length(g->info.device_nodes) > 0) {
                for (char **p = g->info.device_nodes; *p; p++)
                        spec_add(specs, m, *p);
                return;
        }
        spec_add(specs, m, g->info.card_node);
        spec_add(specs, m, g->info.render_node);
}

int resources_allocate_container(const Resources *r, const char *resource, char * const *ids,
                                 DeviceSpec **ret, size_t *ret_n) {
        _cleanup_free_ DeviceSpec *specs = NULL;
        const Device *d;
        size_t n, m = 0, room = 1, n_ids = strv_length(ids);
        const char *monitored;
        int k;

        if (resources_is_nvidia(r, resource))
                return nvidia_allocate_specs(r, resource, ids, ret, ret_n);
        k = resources_devices_view(r, resource, &d, &n);
        if (k < 0)
                return k;

        monitored = monitored_name(r, resource);
        if (monitored) {
                for (size_t i = 0; i < n_ids; i++)
                        if (!resources_find_device(d, n, ids[i]))
                                return -ENODEV;
                for (size_t i = 0; i < r->n_gpus; i++)
                        room += gpu_node_count(&r->gpus[i]);
                specs = calloc(room, sizeof(DeviceSpec));
                if (!specs)
                        return -ENOMEM;
                for (size_t i = 0; i < r->n_gpus && n_ids > 0; i++)
                        if (r->gpus[i].info.healthy &&
                            streq_ptr(resources_name_for_gpu(r, &r->gpus[i].info), monitored))
                                gpu_add_specs(&r->gpus[i], specs, &m);
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

int resources_allocate_extras(const Resources *r, const char *resource, char * const *ids,
                              MountSpec **ret_mounts, size_t *ret_n_mounts, char ***ret_cdi) {
        _cleanup_strv_free_ char **cdi = NULL;
        _cleanup_free_ MountSpec *mounts = NULL;
        _cleanup_free_ const Gpu **gpus = NULL;
        const Device *d;
        size_t n, n_gpus = 0, m = 0, room = 1, n_ids = strv_length(ids);
        int k;

        if (resources_is_nvidia(r, resource))
                return nvidia_allocate_extras(r, resource, ids, ret_mounts, ret_n_mounts, ret_cdi);
        k = resources_devices_view(r, resource, &d, &n);
        if (k < 0)
                return k;
        cdi = calloc(1, sizeof(char *));
        gpus = calloc(n_ids ?: 1, sizeof(Gpu *));
        if (!cdi || !gpus)
                return -ENOMEM;

        /* The distinct GPUs of the request, in request order. */
        for (size_t i = 0; i < n_ids && !monitored_name(r, resource); i++) {
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

                if (r->by_path == BY_PATH_SINGLE)
                        for (char * const *p = links; p && *p; p++)
                                mounts[m++] = (MountSpec) {
                                        .container_path = *p,
                                        .host_path = *p,
                                        .read_only = true,
                                };
                else if (r->by_path == BY_PATH_ALL && strv_length(links) > 0 && m == 0)
                        mounts[m++] = (MountSpec) {
                                .container_path = RESOURCES_BY_PATH_DIR,
                                .host_path = RESOURCES_BY_PATH_DIR,
                                .read_only = true,
                        };

                if (r->cdi_devices) {
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

static bool result_has(char * const *result, size_t n, const char *id) {
        for (size_t i = 0; i < n; i++)
                if (streq(result[i], id))
                        return true;
        return false;
}

int resources_preferred_allocation(const Resources *r, const char *resource,
                                   char * const *available, char * const *must_include,
                                   int32_t size, char ***ret, ResourceError *e) {
        _cleanup_strv_free_ char **result = NULL;
        _cleanup_free_ PolicyCandidate *cand = NULL;
        _cleanup_free_ size_t *picked = NULL;
        _cleanup_free_ Device *d = NULL;
        _cleanup_free_ bool *taken = NULL;
        size_t n, n_result = 0, n_cand = 0;
        int k;

        if (resources_is_nvidia(r, resource))
                return resources_nvidia_preferred_allocation(r, resource, available, must_include, NULL,
                                                             size, ret, e);
        k = resources_check_name(r, resource, e);
        if (k < 0)
                return k;
        if (size <= 0 || size > RESOURCES_IDS_MAX)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -EINVAL,
                                          "Allocation size %d out of range 1..%u",
                                          (int) size, RESOURCES_IDS_MAX);

        /* Bounds only: repeats in these lists are tolerated (and never repeated back). */
        char * const *lists[2] = { must_include, available };
        for (size_t l = 0; l < ELEMENTSOF(lists); l++) {
                size_t c = 0;

                for (char * const *i = lists[l]; i && *i; i++) {
                        if (++c > RESOURCES_IDS_MAX)
                                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -E2BIG,
                                                          "More than %u device ids in one request",
                                                          RESOURCES_IDS_MAX);
                        if (strnlen(*i, RESOURCES_ID_MAX + 1) > RESOURCES_ID_MAX)
                                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -EINVAL,
                                                          "Device id longer than %u bytes",
                                                          RESOURCES_ID_MAX);
                }
        }

        k = resources_get_devices(r, resource, &d, &n);
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
        k = policy_select(r->policy, cand, n_cand, (size_t) size - n_result, picked);
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
