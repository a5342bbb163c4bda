/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * records.h — the records every part of the broker shares: the probe's GPU objects
 * (GpuInfo, Gpu), the devices a resource advertises (Device), what an Allocate answer
 * holds (DeviceSpec, MountSpec) and the error a refused call carries (ResourceError).
 *
 * Contract:
 *  - Pure data and helpers over it: no D-Bus, no I/O, no logging.
 *  - GpuInfo owns its strings and arrays (gpu_info_done() frees them, gpu_info_copy()
 *    makes a deep copy whose strings are never NULL). Device, DeviceSpec and MountSpec
 *    only borrow: their pointers stay valid until the Resources they came from changes.
 *  - Functions return 0/positive or a negative errno and write ret_* only on success.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds on anything a caller sends (enforced by the registry and by the D-Bus parser). */
#define RESOURCES_NAME_MAX      256     /* bytes in a resource name */
#define RESOURCES_ID_MAX        256     /* bytes in a device id */
#define RESOURCES_IDS_MAX       4096    /* ids in one list: 64 GPUs x 64 shares */
#define RESOURCES_REQUESTS_MAX  128     /* container requests in one call */
#define RESOURCES_GPUS_MAX      1024    /* GPU objects followed */
#define RESOURCES_PATH_MAX      256     /* bytes in a device node path */
#define RESOURCES_NODES_MAX     16      /* DeviceNodes / ByPathNodes / MeiNodes entries per GPU */

/* One io.kgpu.Gpu1.MigDevices entry. */
typedef struct MigDeviceInfo {
        uint32_t index;         /* "Device N" of nvidia-smi -L, per GPU */
        char *uuid;             /* "MIG-..." */
        char *profile;          /* "1g.10gb" */
        uint32_t gi, ci;
        char **device_nodes;    /* the MIG device's capability nodes (may be empty, never NULL after copy) */
        uint64_t memory_bytes;
} MigDeviceInfo;

/* One io.kgpu.Gpu1.Links entry. */
typedef struct GpuLinkInfo {
        char *peer;             /* the other GPU's Gpu1.Id */
        char *type;             /* "NV", "PIX", "PXB", "PHB", "NODE", "SYS" */
        uint8_t nvlinks;
} GpuLinkInfo;

/* One io.kgpu.Gpu1 object, whatever its vendor. */
typedef struct GpuInfo {
        char *id;
        char *vendor;
        char *driver;
        char *card_node;        /* "" if none */
        char *render_node;      /* "" if none */
        char *health_reason;
        char **device_nodes;    /* Gpu1.DeviceNodes: every node a container needs; NULL: card + render */
        char **by_path_nodes;   /* Gpu1.ByPathNodes: /dev/dri/by-path links of this GPU */
        char **mei_nodes;       /* Gpu1.MeiNodes: /dev/mei<N> of the GPU's MEI devices (Intel monitoring) */
        int32_t numa_node;      /* -1 if unknown */
        uint16_t device_id;     /* PCI device id, 0 if unknown */
        bool healthy;
        /* NVIDIA (Intel GPUs: "", -1, 0, none). Strings are
         * never NULL after gpu_info_copy(). */
        char *uuid;
        int32_t index;          /* Gpu1.Index, -1 unknown */
        char *product;
        uint64_t memory_bytes;
        char *compute_mode;     /* Gpu1.ComputeMode */
        char *mig_mode;         /* "", "Disabled", "Enabled" */
        char *compute_capability;
        char *mps_state;        /* "", "starting", "running", "failed" */
        char *mps_pipe_directory;
        MigDeviceInfo *mig_devices;
        size_t n_mig_devices;
        GpuLinkInfo *links;
        size_t n_links;
} GpuInfo;

void gpu_info_done(GpuInfo *info);
int gpu_info_copy(const GpuInfo *from, GpuInfo *to);

/* A GPU as the registry keeps it. */
typedef struct Gpu {
        char *path;             /* the probe's object path, the key */
        GpuInfo info;
        char **share_ids;       /* the ids of the GPU's shares, built by the backend serving it
                                 * (backend.h gpu_stored); NULL: one device named by the GPU id */
} Gpu;

/* A device as ListAndWatch shows it; points into a Gpu. */
typedef struct Device {
        const char *id;
        bool healthy;
        int32_t numa_node;
        const Gpu *gpu;         /* NULL for a device that is no single GPU (Intel monitoring) */
        uint32_t share;         /* share number (0 unshared) */
} Device;

typedef struct DeviceSpec {
        const char *container_path;
        const char *host_path;
        const char *permissions;
} DeviceSpec;

typedef struct MountSpec {
        const char *container_path;
        const char *host_path;
        bool read_only;
} MountSpec;

typedef struct ResourceError {
        const char *name;       /* KGPU_ERROR_*; NULL if none */
        char message[640];
} ResourceError;

/* Error helper: fills e (when not NULL; message printable ASCII only) and returns the
 * negative errno of error. */
int resource_error_set(ResourceError *e, const char *name, int error, const char *format, ...)
        __attribute__((format(printf, 4, 5)));

/* The device of id in d (n devices sorted by policy_id_cmp()), NULL if none. */
const Device *resources_find_device(const Device *d, size_t n, const char *id);

/* Appends a "rw" spec for path (container path = host path) to specs, which has room, unless
 * path is empty or already there. */
void device_specs_add(DeviceSpec *specs, size_t *n, const char *path);
