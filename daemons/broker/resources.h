/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * resources.h — the registry: the probe's GPU objects and the resource names advertised
 * from them, each name resolved once to the vendor backend serving it (backend.h).
 *
 * Contract:
 *  - Pure data: no D-Bus, no I/O, no logging above debug. The probe client feeds GPU
 *    records in (keyed by the probe's object path), the D-Bus layer asks questions, and
 *    the registry hands each question to the backend of the resource asked about. It
 *    never asks which vendor a GPU or a resource is: what each vendor advertises is in
 *    its module (intel.h, nvidia.h).
 *  - A resource is advertised from the first time a backend advertises it until the
 *    Resources is freed, even with no device left; the first backend to advertise a
 *    name keeps it.
 *  - Device lists are sorted by policy_id_cmp() (GPU id, then share number). GPU ids are
 *    unique: a second object claiming an id already taken is refused (-EEXIST).
 *  - Functions return 0/positive or a negative errno and write ret_* only on success.
 *    Functions that answer a caller fill a ResourceError (a KGPU_ERROR_* name and a
 *    message naming the culprit) and return a negative errno when they refuse.
 *  - Pointers handed out (Device, DeviceSpec strings) stay valid until the next
 *    update or removal.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cleanup.h"
#include "common/config.h"
#include "daemons/broker/backend.h"
#include "daemons/broker/records.h"

typedef struct ResourceName {
        char *name;
        const Backend *backend;
} ResourceName;

struct Resources {
        Gpu *gpus;
        size_t n_gpus;
        char **seen;                    /* advertised resource names, sorted */
        ResourceName *names;            /* the same names, each with its backend */
        size_t n_names;
        void *states[RESOURCE_BACKENDS_MAX];    /* per resource_backends[] entry */
};

/* An empty registry, every backend unconfigured. */
int resources_new_empty(Resources **ret);
/*
 * The registry for configuration c, every backend configured from it: the one function
 * start-up and reload build the resource set with. On an error other than -ENOMEM a
 * backend refused c, and *ret_what names the invalid setting (a static string, see
 * backend.h).
 */
int resources_new_from_config(const Config *c, Resources **ret, const char **ret_what);
Resources *resources_free(Resources *r);
DEFINE_CLEANUP_FUNC(Resources, resources_free);

/* For the backends: their state (NULL until set) and setting it (the old one is not freed). */
void *resources_backend_state(const Resources *r, const Backend *b);
void resources_backend_set_state(Resources *r, const Backend *b, void *state);
/* For the backends: advertises name for b (no-op if it is advertised already); appends it
 * to *changed (sorted, no duplicates) when new. */
int resources_advertise(Resources *r, const Backend *b, const char *name, char ***changed);
/* Appends name to *changed (if changed and name are not NULL), keeping it sorted and unique. */
int resources_changed_add(char ***changed, const char *name);
/* For the backends: reruns every backend's refresh (after an option change). */
int resources_refresh(Resources *r, char ***changed);

/* The backend serving resource, NULL if it is not advertised. */
const Backend *resources_backend_of(const Resources *r, const char *resource);
/* What the backends say about their options, for the start-up log, in table order (free
 * with backend_notes_free()). */
int resources_describe(const Resources *r, const Config *c, BackendNote **ret, size_t *ret_n);
/* The first backend's problem (backend.h), NULL when all is well; *ret_label names its GPUs. */
const char *resources_problem(const Resources *r, const char **ret_label);

/* The resource all of a GPU's devices belong to, or NULL if no backend names one. */
const char *resources_name_for_gpu(const Resources *r, const GpuInfo *info);

/*
 * Inserts or replaces the record at path. If changed is not NULL, the names of the
 * resources whose ListAndWatch view changed (device added, removed, health or NUMA
 * changed, or resource newly advertised) are appended to *changed (no duplicates).
 * Returns 1 if the GPU is new, 0 if it replaced a record, -EINVAL for an empty id or
 * path, -EEXIST if another path has the same id, -E2BIG past RESOURCES_GPUS_MAX.
 */
int resources_update_gpu(Resources *r, const char *path, const GpuInfo *info, char ***changed);
/* Returns 1 if removed, 0 if path was unknown. */
int resources_remove_gpu(Resources *r, const char *path, char ***changed);
const Gpu *resources_get_gpu(const Resources *r, const char *path);

bool resources_known(const Resources *r, const char *resource);
/* Devices of a resource sorted by id (caller frees the array, not the devices). */
int resources_get_devices(const Resources *r, const char *resource, Device **ret, size_t *ret_n);
/* The same list, borrowed: valid until the Resources changes (any non-const function) or
 * is freed. Only for resources whose backend keeps such a view (-EOPNOTSUPP otherwise:
 * NVIDIA's table is its own). Built once per change instead of once per call: an Allocate
 * of 4096 shares looked the list up five times. */
int resources_devices_view(const Resources *r, const char *resource, const Device **ret, size_t *ret_n);
/* The view where there is one, else a copy in *owned (free it): for code serving both. */
int resources_devices(const Resources *r, const char *resource, Device **owned, const Device **ret, size_t *ret_n);

/* The sharing limit of a resource's GPUs (backend.h share_limit; 0 if unknown). */
uint32_t resources_share_limit(const Resources *r, const char *resource);

/* Checks a resource name: InvalidArgs if too long or empty, UnknownResource if not advertised. */
int resources_check_name(const Resources *r, const char *resource, ResourceError *e);

/*
 * Checks one id list: InvalidArgs if empty (when !allow_empty), longer than
 * RESOURCES_IDS_MAX, an id empty or longer than RESOURCES_ID_MAX, or a duplicate;
 * UnknownDevice naming the first unknown id; Unhealthy naming the first unhealthy one
 * when need_healthy.
 */
int resources_check_ids(const Resources *r, const char *resource, char * const *ids,
                        bool allow_empty, bool need_healthy, ResourceError *e);

/*
 * Validates a whole Allocate call (resource, 1..RESOURCES_REQUESTS_MAX container
 * requests, each non-empty, no id twice in the call, every id known and healthy), then
 * asks the resource's backend for its own checks.
 */
int resources_check_allocate(const Resources *r, const char *resource,
                             char ** const *requests, size_t n_requests, ResourceError *e);

/* Device specs for one container request (the backend's rules: intel.h, nvidia.h). Call
 * after resources_check_allocate(). */
int resources_allocate_container(const Resources *r, const char *resource, char * const *ids,
                                 DeviceSpec **ret, size_t *ret_n);
/* Mounts and CDI device names for one container request (the backend's rules). *ret_cdi
 * is a new strv. */
int resources_allocate_extras(const Resources *r, const char *resource, char * const *ids,
                              MountSpec **ret_mounts, size_t *ret_n_mounts, char ***ret_cdi);
/* The envs and annotations of one container's Allocate answer, as flat strv of key,
 * value pairs (new strvs; empty where the backend adds none: nvidia.h has the rules).
 * Call after resources_check_allocate(). */
int resources_allocate_envs(const Resources *r, const char *resource, char * const *ids,
                            char ***ret_envs, char ***ret_annotations);
/* The GPU (its id) a device id of resource belongs to, NULL if unknown or monitoring. */
const Gpu *resources_gpu_of_device(const Resources *r, const char *resource, const char *id);

/*
 * Preferred allocation: must_include ids first, then available ids chosen by the
 * backend's policy (intel.h, nvidia.h), up to size; ids not in the resource, unhealthy
 * available ids and repeats are skipped. size must be 1..RESOURCES_IDS_MAX, lists are
 * bounded like resources_check_ids() (empty allowed). *ret is a new strv.
 */
int resources_preferred_allocation(const Resources *r, const char *resource,
                                   char * const *available, char * const *must_include,
                                   int32_t size, char ***ret, ResourceError *e);
/* The bounds every backend's preferred allocation checks first: the name, size in
 * 1..RESOURCES_IDS_MAX, each of the n lists at most RESOURCES_IDS_MAX ids of at most
 * RESOURCES_ID_MAX bytes (repeats tolerated). */
int resources_check_preferred(const Resources *r, const char *resource, char * const *const *lists,
                              size_t n_lists, int32_t size, ResourceError *e);
