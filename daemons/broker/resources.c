/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * resources.c — the registry: GPU records, advertised names bound to their backends,
 * and the checks every Allocate goes through whatever the vendor.
 *
 * Contract: see resources.h. Pure: no D-Bus, no I/O. Every list a caller hands in is
 * bounded before it is walked; the error messages name the offending id (printable
 * ASCII only, anything else becomes '?').
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/util.h"
#include "daemons/broker/resources.h"

#define FOREACH_BACKEND(i, b) \
        for (size_t i = 0; resource_backends[i]; i++) \
                for (const Backend *b = resource_backends[i]; b; b = NULL)

static size_t backend_index(const Backend *b) {
        size_t i = 0;

        while (resource_backends[i] && resource_backends[i] != b)
                i++;
        return i;
}

void *resources_backend_state(const Resources *r, const Backend *b) {
        size_t i = backend_index(b);

        return r && resource_backends[i] ? r->states[i] : NULL;
}

void resources_backend_set_state(Resources *r, const Backend *b, void *state) {
        size_t i = backend_index(b);

        if (resource_backends[i])
                r->states[i] = state;
}

int resources_new_empty(Resources **ret) {
        Resources *r;

        r = calloc(1, sizeof(Resources));
        if (!r)
                return -ENOMEM;
        *ret = r;
        return 0;
}

int resources_new_from_config(const Config *c, Resources **ret, const char **ret_what) {
        _cleanup_(resources_freep) Resources *r = NULL;
        const char *what = NULL;
        int k;

        k = resources_new_empty(&r);
        if (k < 0)
                return k;
        FOREACH_BACKEND(i, b) {
                k = b->configure(r, c, &what);
                if (k < 0) {
                        if (k != -ENOMEM && ret_what)
                                *ret_what = what;
                        return k;
                }
        }
        *ret = TAKE_PTR(r);
        return 0;
}

Resources *resources_free(Resources *r) {
        if (!r)
                return NULL;
        FOREACH_BACKEND(i, b)
                if (r->states[i])
                        r->states[i] = b->state_free(r->states[i]);
        for (size_t i = 0; i < r->n_gpus; i++) {
                free(r->gpus[i].path);
                gpu_info_done(&r->gpus[i].info);
                strv_free(r->gpus[i].share_ids);
        }
        free(r->gpus);
        strv_free(r->seen);
        for (size_t i = 0; i < r->n_names; i++)
                free(r->names[i].name);
        free(r->names);
        return mfree(r);
}

int resources_changed_add(char ***changed, const char *name) {
        int r;

        if (!changed || !name || strv_contains(*changed, name))
                return 0;
        r = strv_extend(changed, name);
        if (r < 0)
                return r;
        strv_sort(*changed);
        return 0;
}

int resources_advertise(Resources *r, const Backend *b, const char *name, char ***changed) {
        ResourceName *n;
        char *copy;
        int k;

        if (!name || strv_contains(r->seen, name))
                return 0;
        copy = strdup(name);
        n = reallocarray(r->names, r->n_names + 1, sizeof(ResourceName));
        if (!copy || !n) {
                free(copy);
                return -ENOMEM;
        }
        r->names = n;
        k = strv_extend(&r->seen, name);
        if (k < 0) {
                free(copy);
                return k;
        }
        r->names[r->n_names++] = (ResourceName) { .name = copy, .backend = b };
        strv_sort(r->seen);
        return resources_changed_add(changed, name);
}

const Backend *resources_backend_of(const Resources *r, const char *resource) {
        for (size_t i = 0; resource && i < r->n_names; i++)
                if (streq(r->names[i].name, resource))
                        return r->names[i].backend;
        return NULL;
}

bool resources_known(const Resources *r, const char *resource) {
        return resources_backend_of(r, resource);
}

int resources_refresh(Resources *r, char ***changed) {
        int k;

        FOREACH_BACKEND(i, b)
                if (b->refresh) {
                        k = b->refresh(r, changed);
                        if (k < 0)
                                return k;
                }
        return 0;
}

int backend_note_add(BackendNote **notes, size_t *n_notes, int level, const char *format, ...) {
        BackendNote *l;
        va_list ap;
        char *text;
        int k;

        va_start(ap, format);
        k = vasprintf(&text, format, ap);
        va_end(ap);
        if (k < 0)
                return -ENOMEM;
        l = reallocarray(*notes, *n_notes + 1, sizeof(BackendNote));
        if (!l) {
                free(text);
                return -ENOMEM;
        }
        *notes = l;
        l[(*n_notes)++] = (BackendNote) { .level = level, .text = text };
        return 0;
}

BackendNote *backend_notes_free(BackendNote *notes, size_t n_notes) {
        for (size_t i = 0; notes && i < n_notes; i++)
                free(notes[i].text);
        return mfree(notes);
}

int resources_describe(const Resources *r, const Config *c, BackendNote **ret, size_t *ret_n) {
        BackendNote *notes = NULL;
        size_t n = 0;
        int k;

        FOREACH_BACKEND(i, b)
                if (b->describe) {
                        k = b->describe(r, c, &notes, &n);
                        if (k < 0) {
                                backend_notes_free(notes, n);
                                return k;
                        }
                }
        *ret = notes;
        *ret_n = n;
        return 0;
}

const char *resources_problem(const Resources *r, const char **ret_label) {
        FOREACH_BACKEND(i, b) {
                const char *p = b->problem ? b->problem(r) : NULL;

                if (p) {
                        if (ret_label)
                                *ret_label = b->label;
                        return p;
                }
        }
        return NULL;
}

const char *resources_name_for_gpu(const Resources *r, const GpuInfo *info) {
        FOREACH_BACKEND(i, b) {
                const char *n = b->name_for_gpu ? b->name_for_gpu(r, info) : NULL;

                if (n)
                        return n;
        }
        return NULL;
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

/* Stores copy (taken) at path: replaces g, or appends a new record. */
static int store_record(Resources *r, Gpu *g, const char *path, GpuInfo *copy) {
        bool same_id;
        Gpu *n;
        int k;

        if (g) {
                same_id = streq(g->info.id, copy->id);
                gpu_info_done(&g->info);
                g->info = *copy;
                *copy = (GpuInfo) {};
                FOREACH_BACKEND(i, b)
                        if (b->gpu_stored && (k = b->gpu_stored(r, g, same_id)) < 0)
                                return k;
                return 0;
        }

        n = reallocarray(r->gpus, r->n_gpus + 1, sizeof(Gpu));
        if (!n)
                return -ENOMEM;
        r->gpus = n;
        n[r->n_gpus].path = strdup(path);
        if (!n[r->n_gpus].path)
                return -ENOMEM;
        n[r->n_gpus].info = *copy;
        *copy = (GpuInfo) {};
        n[r->n_gpus].share_ids = NULL;
        r->n_gpus++;
        FOREACH_BACKEND(i, b)
                if (b->gpu_stored && (k = b->gpu_stored(r, &n[r->n_gpus - 1], false)) < 0)
                        return k;
        return 1;
}

static int update_gpu_record(Resources *r, const char *path, const GpuInfo *info, char ***changed) {
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

        /* The backends collect the changed names before the record is touched. */
        FOREACH_BACKEND(i, b)
                if (b->gpu_update && (k = b->gpu_update(r, g, &copy, changed)) < 0) {
                        gpu_info_done(&copy);
                        return k;
                }

        k = store_record(r, g, path, &copy);
        gpu_info_done(&copy);
        return k;
}

int resources_update_gpu(Resources *r, const char *path, const GpuInfo *info, char ***changed) {
        int k, q;

        k = update_gpu_record(r, path, info, changed);
        if (k < 0)
                return k;
        q = resources_refresh(r, changed);
        return q < 0 ? q : k;
}

static int remove_gpu_record(Resources *r, const char *path, char ***changed) {
        Gpu *g;
        size_t i;
        int k;

        g = resources_find_gpu(r, path);
        if (!g)
                return 0;
        FOREACH_BACKEND(j, b)
                if (b->gpu_remove && (k = b->gpu_remove(r, g, changed)) < 0)
                        return k;

        i = (size_t) (g - r->gpus);
        free(g->path);
        gpu_info_done(&g->info);
        strv_free(g->share_ids);
        memmove(r->gpus + i, r->gpus + i + 1, (r->n_gpus - i - 1) * sizeof(Gpu));
        r->n_gpus--;
        return 1;
}

int resources_remove_gpu(Resources *r, const char *path, char ***changed) {
        int k, q;

        k = remove_gpu_record(r, path, changed);
        if (k <= 0)
                return k;
        q = resources_refresh(r, changed);
        return q < 0 ? q : k;
}

int resources_get_devices(const Resources *r, const char *resource, Device **ret, size_t *ret_n) {
        const Backend *b = resources_backend_of(r, resource);

        if (!b)
                return -ENOENT;
        return b->devices(r, resource, ret, ret_n);
}

int resources_devices_view(const Resources *r, const char *resource, const Device **ret, size_t *ret_n) {
        const Backend *b = resources_backend_of(r, resource);

        if (!b)
                return -ENOENT;
        if (!b->devices_view)
                return -EOPNOTSUPP;
        return b->devices_view(r, resource, ret, ret_n);
}

int resources_devices(const Resources *r, const char *resource, Device **owned, const Device **ret, size_t *ret_n) {
        const Backend *b = resources_backend_of(r, resource);
        int k;

        *owned = NULL;
        if (!b)
                return -ENOENT;
        if (b->devices_view)
                return b->devices_view(r, resource, ret, ret_n);
        k = b->devices(r, resource, owned, ret_n);
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

uint32_t resources_share_limit(const Resources *r, const char *resource) {
        const Backend *b = resources_backend_of(r, resource);

        return b ? b->share_limit(r, resource) : 0;
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
        const Backend *b;
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
        b = resources_backend_of(r, resource);
        return b && b->check_allocate ? b->check_allocate(r, resource, requests, n_requests, e) : 0;
}

int resources_allocate_container(const Resources *r, const char *resource, char * const *ids,
                                 DeviceSpec **ret, size_t *ret_n) {
        const Backend *b = resources_backend_of(r, resource);

        if (!b)
                return -ENOENT;
        return b->allocate_specs(r, resource, ids, ret, ret_n);
}

int resources_allocate_extras(const Resources *r, const char *resource, char * const *ids,
                              MountSpec **ret_mounts, size_t *ret_n_mounts, char ***ret_cdi) {
        const Backend *b = resources_backend_of(r, resource);

        if (!b)
                return -ENOENT;
        return b->allocate_extras(r, resource, ids, ret_mounts, ret_n_mounts, ret_cdi);
}

int resources_allocate_envs(const Resources *r, const char *resource, char * const *ids,
                            char ***ret_envs, char ***ret_annotations) {
        _cleanup_strv_free_ char **envs = NULL, **annotations = NULL;
        const Backend *b = resources_backend_of(r, resource);

        if (b && b->allocate_envs)
                return b->allocate_envs(r, resource, ids, ret_envs, ret_annotations);
        envs = calloc(1, sizeof(char *));
        annotations = calloc(1, sizeof(char *));
        if (!envs || !annotations)
                return -ENOMEM;
        *ret_envs = TAKE_PTR(envs);
        *ret_annotations = TAKE_PTR(annotations);
        return 0;
}

int resources_check_preferred(const Resources *r, const char *resource, char * const *const *lists,
                              size_t n_lists, int32_t size, ResourceError *e) {
        int k;

        k = resources_check_name(r, resource, e);
        if (k < 0)
                return k;
        if (size <= 0 || size > RESOURCES_IDS_MAX)
                return resource_error_set(e, KGPU_ERROR_INVALID_ARGS, -EINVAL,
                                          "Allocation size %d out of range 1..%u",
                                          (int) size, RESOURCES_IDS_MAX);

        /* Bounds only: repeats in these lists are tolerated (and never repeated back). */
        for (size_t l = 0; l < n_lists; l++) {
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
        return 0;
}

int resources_preferred_allocation(const Resources *r, const char *resource,
                                   char * const *available, char * const *must_include,
                                   int32_t size, char ***ret, ResourceError *e) {
        const Backend *b = resources_backend_of(r, resource);
        int k;

        if (!b) {
                /* Not advertised: the name check says why. */
                k = resources_check_name(r, resource, e);
                return k < 0 ? k : -ENOENT;
        }
        return b->preferred_allocation(r, resource, available, must_include, size, ret, e);
}
