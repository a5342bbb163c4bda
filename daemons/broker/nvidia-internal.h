/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-internal.h — what the NVIDIA backend's modules share (nvidia.c, nvidia-table.c,
 * nvidia-allocate.c, nvidia-preferred.c); nothing outside them includes it.
 *
 * Contract:
 *  - NvidiaState lives in the registry (resources_backend_state()); NULL until
 *    resources_set_nvidia_options(). Units (GPUs or MIG devices) and devices refer to
 *    GPUs by their index in Resources.gpus: every update or removal refreshes the table
 *    (nvidia.c), so the indexes are always current.
 *  - nvidia_table_build() builds a fresh table from the GPU records and the options;
 *    lookups never allocate. Functions return 0/positive or a negative errno and write
 *    ret_* only on success.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "daemons/broker/nvidia.h"
#include "daemons/broker/resources.h"

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

/* nvidia.c */
NvidiaState *nvidia_state(const Resources *r);

/* nvidia-table.c: building */
void nvidia_table_done(NvidiaTable *t);
int nvidia_table_build(const Resources *r, const NvidiaState *s, NvidiaTable *ret);
bool nvidia_gpu_is_nvidia(const GpuInfo *i);
bool nvidia_device_healthy(const GpuInfo *g, NvidiaSharing sharing);
/* nvidia-table.c: lookups */
const NvidiaResource *nvidia_table_resource(const NvidiaTable *t, const char *name);
const NvidiaDevice *nvidia_find_device(const NvidiaState *s, const NvidiaResource *res, const char *id);
const Gpu *nvidia_unit_gpu(const Resources *r, const NvidiaUnit *u);
/* The distinct units of a request, in request order. ret: room for n ids. */
int nvidia_request_units(const NvidiaState *s, const NvidiaResource *res, char * const *ids,
                         size_t *ret, size_t *ret_n, bool *ret_mps);

/* nvidia-allocate.c: backend operations (backend.h) */
int nvidia_check_allocate(const Resources *r, const char *resource,
                          char ** const *requests, size_t n_requests, ResourceError *e);
int nvidia_allocate_specs(const Resources *r, const char *resource, char * const *ids,
                          DeviceSpec **ret, size_t *ret_n);
int nvidia_allocate_extras(const Resources *r, const char *resource, char * const *ids,
                           MountSpec **ret_mounts, size_t *ret_n_mounts, char ***ret_cdi);
int nvidia_allocate_envs(const Resources *r, const char *resource, char * const *ids,
                         char ***ret_envs, char ***ret_annotations);
/* nvidia-preferred.c */
int nvidia_preferred(const Resources *r, const char *resource, char * const *available,
                     char * const *must_include, int32_t size, char ***ret, ResourceError *e);
