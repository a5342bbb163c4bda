/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-allocate.c — NVIDIA Allocate answers: checks, device specs, mounts, CDI names, envs,
 * annotations, and the MPS limits the probe must set.
 *
 * Contract: see nvidia.h (Allocate, MPS) and nvidia-internal.h. Pure: no D-Bus, no I/O.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/util.h"
#include "daemons/broker/nvidia-internal.h"

/* ---- Allocate ---- */

int nvidia_check_allocate(const Resources *r, const char *resource,
                                 char ** const *requests, size_t n_requests, ResourceError *e) {
        const NvidiaState *s = nvidia_state(r);
        const NvidiaResource *res = s ? nvidia_table_resource(&s->table, resource) : NULL;

        for (size_t q = 0; res && q < n_requests; q++) {
                size_t n = strv_length(requests[q]);
                const NvidiaDevice *first_mps = NULL;
                bool limit = false;

                for (char * const *i = requests[q]; *i; i++) {
                        const NvidiaDevice *d = nvidia_find_device(s, res, *i);

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

int nvidia_allocate_specs(const Resources *r, const char *resource, char * const *ids,
                                 DeviceSpec **ret, size_t *ret_n) {
        const NvidiaState *s = nvidia_state(r);
        const NvidiaResource *res = s ? nvidia_table_resource(&s->table, resource) : NULL;
        _cleanup_free_ DeviceSpec *specs = NULL;
        _cleanup_free_ size_t *units = NULL;
        size_t n_units = 0, room = 1, m = 0;
        int k;

        units = calloc(strv_length(ids) + 1, sizeof(size_t));
        if (!units)
                return -ENOMEM;
        k = nvidia_request_units(s, res, ids, units, &n_units, NULL);
        if (k < 0)
                return k;
        if (!s->pass_device_specs || all_cdi(s))
                n_units = 0;
        for (size_t i = 0; i < n_units; i++) {
                const NvidiaUnit *u = &s->table.units[units[i]];
                const GpuInfo *g = &nvidia_unit_gpu(r, u)->info;

                room += strv_length(g->device_nodes);
                if (u->mig >= 0)
                        room += strv_length(g->mig_devices[u->mig].device_nodes);
        }
        specs = calloc(room, sizeof(DeviceSpec));
        if (!specs)
                return -ENOMEM;
        for (size_t i = 0; i < n_units; i++) {
                const NvidiaUnit *u = &s->table.units[units[i]];
                const GpuInfo *g = &nvidia_unit_gpu(r, u)->info;

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

int nvidia_allocate_extras(const Resources *r, const char *resource, char * const *ids,
                                  MountSpec **ret_mounts, size_t *ret_n_mounts, char ***ret_cdi) {
        const NvidiaState *s = nvidia_state(r);
        const NvidiaResource *res = s ? nvidia_table_resource(&s->table, resource) : NULL;
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
        k = nvidia_request_units(s, res, ids, units, &n_units, &mps);
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
                const GpuInfo *g = &nvidia_unit_gpu(r, &s->table.units[units[0]])->info;

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

int nvidia_allocate_envs(const Resources *r, const char *resource, char * const *ids,
                                char ***ret_envs, char ***ret_annotations) {
        const NvidiaState *s = nvidia_state(r);
        const NvidiaResource *res = s ? nvidia_table_resource(&s->table, resource) : NULL;
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
        k = nvidia_request_units(s, res, ids, units, &n_units, &mps);
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
                        const NvidiaDevice *d = nvidia_find_device(s, res, *i);

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
        const NvidiaState *s = nvidia_state(r);
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

                if (!nvidia_gpu_is_nvidia(g) || isempty(g->mps_state) || n >= NVIDIA_GPUS_MAX)
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

