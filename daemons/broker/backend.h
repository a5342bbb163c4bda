/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * backend.h — the seam between the resource registry (resources.c) and each GPU vendor:
 * one table of operations per vendor, in its own module (intel.c, nvidia*.c).
 *
 * Contract:
 *  - The registry keeps the GPU records and the advertised names, each name bound to the
 *    backend that advertised it first (resources_advertise()); every question about a
 *    resource goes to that backend's table without asking which vendor it is. Adding a
 *    vendor is a new module with a Backend and an entry in resource_backends[]
 *    (backends.c), nothing else.
 *  - A backend keeps its own state in the registry (resources_backend_state(), set by
 *    its configure operation or its own option setters); NULL means "not configured",
 *    and every operation must accept it (nothing of that vendor is advertised then).
 *  - Operations are pure like the registry: no D-Bus, no I/O, no logging. They return
 *    0/positive or a negative errno and write ret_* only on success; those answering a
 *    caller fill a ResourceError when they refuse.
 *  - The GPU hooks are called for every GPU change on every backend, in table order:
 *    gpu_update before the registry stores a record (old: the record it replaces, NULL
 *    for a new GPU; info: the copy that will be stored), gpu_stored after, gpu_remove
 *    before a record goes, refresh after any of them. A backend ignores GPUs that are not
 *    its own. changed collects the names whose device lists changed (may be NULL).
 *  - Optional operations may be NULL; the registry says what it does then.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "daemons/broker/records.h"

typedef struct Resources Resources;

/* A line for the start-up log about a backend's options. */
typedef struct BackendNote {
        int level;              /* LOG_INFO, LOG_NOTICE, LOG_WARNING (syslog.h) */
        char *text;
} BackendNote;

typedef struct Backend {
        const char *name;       /* "intel", "nvidia": for debugging only */

        void *(*state_free)(void *state);
        /* Reads this vendor's options from c into a fresh registry (start-up and reload).
         * On an error other than -ENOMEM, *ret_what names what is invalid as the operator
         * writes it ("intel.allowIDs or intel.denyIDs (...)"), a static string. */
        int (*configure)(Resources *r, const Config *c, const char **ret_what);
        /* Appends what the operator should know about the options in force (those
         * ignored, the values used) to *notes with backend_note_add() (optional). */
        int (*describe)(const Resources *r, const Config *c, BackendNote **notes, size_t *n_notes);

        /* GPU records (optional, see the contract). */
        int (*gpu_update)(Resources *r, const Gpu *old, const GpuInfo *info, char ***changed);
        int (*gpu_stored)(Resources *r, Gpu *g, bool same_id);
        int (*gpu_remove)(Resources *r, const Gpu *g, char ***changed);
        int (*refresh)(Resources *r, char ***changed);
        /* The one resource a GPU's devices all belong to, or NULL (optional). */
        const char *(*name_for_gpu)(const Resources *r, const GpuInfo *info);

        /* The devices of one of its resources, sorted by policy_id_cmp(): a new array
         * (devices), or borrowed until the Resources changes (devices_view, optional). */
        int (*devices)(const Resources *r, const char *resource, Device **ret, size_t *ret_n);
        int (*devices_view)(const Resources *r, const char *resource, const Device **ret, size_t *ret_n);

        /* Allocate: the vendor's own checks after the registry's (optional), then one
         * container's device specs, mounts and CDI names, envs and annotations (optional:
         * none). Ids are known and healthy (checked). */
        int (*check_allocate)(const Resources *r, const char *resource, char ** const *requests,
                              size_t n_requests, ResourceError *e);
        int (*allocate_specs)(const Resources *r, const char *resource, char * const *ids,
                              DeviceSpec **ret, size_t *ret_n);
        int (*allocate_extras)(const Resources *r, const char *resource, char * const *ids,
                               MountSpec **ret_mounts, size_t *ret_n_mounts, char ***ret_cdi);
        int (*allocate_envs)(const Resources *r, const char *resource, char * const *ids,
                             char ***ret_envs, char ***ret_annotations);
        /* GetPreferredAllocation (bounds checked with resources_check_preferred()). */
        int (*preferred_allocation)(const Resources *r, const char *resource, char * const *available,
                                    char * const *must_include, int32_t size, char ***ret, ResourceError *e);

        /* How many containers may hold one GPU of the resource (0: not counted). */
        uint32_t (*share_limit)(const Resources *r, const char *resource);
        /* Why some GPU is not advertised as configured, NULL when all is well (optional);
         * label names the vendor's GPUs in the operator's log ("NVIDIA GPUs"). */
        const char *(*problem)(const Resources *r);
        const char *label;
} Backend;

/* Appends a note (backends' describe); frees a list of them. */
int backend_note_add(BackendNote **notes, size_t *n_notes, int level, const char *format, ...)
        __attribute__((format(printf, 4, 5)));
BackendNote *backend_notes_free(BackendNote *notes, size_t n_notes);

extern const Backend intel_backend;
extern const Backend nvidia_backend;

/* Every backend, in the order the registry calls them; NULL-terminated (backends.c). */
extern const Backend *const resource_backends[];
#define RESOURCE_BACKENDS_MAX 8
