/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * resources.h — the probe's GPU objects turned into advertised resources and devices.
 *
 * Contract:
 *  - Pure data: no D-Bus, no I/O, no logging above debug. The probe client feeds GPU
 *    records in (keyed by the probe's object path), the D-Bus layer asks questions.
 *  - An Intel GPU (Vendor "intel", Driver "i915" or "xe") is one device of resource
 *    "gpu.intel.com/<driver>" with device id = Gpu1.Id, unless intel.allowIDs is set
 *    and lacks its PCI device id, or intel.denyIDs has it. Other GPUs are kept but not
 *    advertised. A resource is advertised from the first time one of its GPUs is seen
 *    until the broker exits, even with no device left.
 *  - Sharing (intel.sharedDevNum N): with N > 1 each GPU is N devices "<gpu id>-0" ..
 *    "<gpu id>-<N-1>", as the Intel plugin names its shares "<card>-<i>"; with N == 1
 *    the device id stays the plain GPU id (PCI address), so allocations recorded
 *    before sharing was configured, and the kubelet's checkpoint, stay valid. Every
 *    share of a GPU has the GPU's health and NUMA node.
 *  - Monitoring (intel.enableMonitoring): "<resource>_monitoring" with one device
 *    "all" (the Intel plugin's id) granting every GPU of that driver; healthy while
 *    one of them is.
 *  - Device lists are sorted by policy_id_cmp() (GPU id, then share number). Ids are
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

/* Bounds on anything a caller sends (enforced here and by the D-Bus parser). */
#define RESOURCES_NAME_MAX      256     /* bytes in a resource name */
#define RESOURCES_ID_MAX        256     /* bytes in a device id */
#define RESOURCES_IDS_MAX       4096    /* ids in one list: 64 GPUs x 64 shares */
#define RESOURCES_REQUESTS_MAX  128     /* container requests in one call */
#define RESOURCES_GPUS_MAX      1024    /* GPU objects followed */
#define RESOURCES_PATH_MAX      256     /* bytes in a device node path */

#define RESOURCE_INTEL_I915     "gpu.intel.com/i915"
#define RESOURCE_INTEL_XE       "gpu.intel.com/xe"
#define RESOURCE_MONITORING_SUFFIX "_monitoring"
#define RESOURCE_MONITORING_ID  "all"
#define RESOURCES_NODES_MAX     16      /* DeviceNodes / ByPathNodes entries per GPU */
#define RESOURCES_BY_PATH_DIR   "/dev/dri/by-path"
/* Kind of the probe's CDI spec for Intel GPUs; one CDI device per GPU, named by its id. */
#define RESOURCES_CDI_KIND_INTEL "gpu.intel.com/gpu"

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

typedef struct GpuInfo {
        char *id;
        char *vendor;
        char *driver;
        char *card_node;        /* "" if none */
        char *render_node;      /* "" if none */
        char *health_reason;
        char **device_nodes;    /* Gpu1.DeviceNodes: every node a container needs; NULL: card + render */
        char **by_path_nodes;   /* Gpu1.ByPathNodes: /dev/dri/by-path links of this GPU */
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

typedef struct Gpu {
        char *path;             /* the probe's object path, the key */
        GpuInfo info;
        char **share_ids;       /* "<id>-<i>" for sharedDevNum > 1, else NULL */
} Gpu;

/* A device as ListAndWatch shows it; points into a Gpu. */
typedef struct Device {
        const char *id;
        bool healthy;
        int32_t numa_node;
        const Gpu *gpu;         /* NULL for the monitoring device */
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

typedef struct Resources {
        Gpu *gpus;
        size_t n_gpus;
        char **seen;            /* advertised resource names, sorted */
        bool intel_enabled;
        uint16_t *allow_ids;    /* intel.allowIDs: serve only these PCI device ids */
        size_t n_allow_ids;
        uint16_t *deny_ids;     /* intel.denyIDs: never serve these */
        size_t n_deny_ids;
        uint32_t shared_dev_num;        /* >= 1 */
        ConfigAllocationPolicy policy;
        bool monitoring;
        ConfigByPath by_path;
        bool cdi_devices;
        struct NvidiaState *nvidia;     /* NVIDIA options and devices (nvidia.h); NULL: none */
        /* The last device list built per Intel resource (resources_devices_view()); every
         * function that changes a Resources drops it. */
        struct DevicesMemo *memo;
        size_t n_memo;
} Resources;

int resources_new(bool intel_enabled, Resources **ret);
Resources *resources_free(Resources *r);
DEFINE_CLEANUP_FUNC(Resources, resources_free);

/* Sets the Intel PCI device id filters (strings like "0x56a0" or "56a0"; NULL or empty:
 * no filter). -EINVAL naming nothing: the caller names the bad value from its config. Call
 * before the first update. */
int resources_set_id_filters(Resources *r, char * const *allow, char * const *deny);
/* Intel options (call before the first update, or again: share ids are rebuilt). N is
 * clamped to 1..1024. */
int resources_set_intel_options(Resources *r, uint32_t shared_dev_num, ConfigAllocationPolicy policy,
                                bool monitoring, ConfigByPath by_path, bool cdi_devices);
/* The sharing limit of a resource's GPUs (shared_dev_num for Intel resources, 0 for a
 * monitoring resource: not counted). */
uint32_t resources_share_limit(const Resources *r, const char *resource);
/* True if the resource is "<intel resource>_monitoring". */
bool resources_is_monitoring(const Resources *r, const char *resource);
/* Parses one PCI device id ("0x56a0", "56a0"). */
int resources_parse_pci_id(const char *s, uint16_t *ret);

/* The resource a GPU belongs to, or NULL if it is not advertised (not Intel i915/xe,
 * Intel disabled, or filtered out by the device id filters). */
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
 * is freed. Intel and monitoring resources only (-EOPNOTSUPP for NVIDIA ones, whose table
 * nvidia.c keeps itself). Built once per change instead of once per call: an Allocate of
 * 4096 shares looked the list up five times. */
int resources_devices_view(const Resources *r, const char *resource, const Device **ret, size_t *ret_n);
/* The view where there is one, else a copy in *owned (free it): for code serving both. */
int resources_devices(const Resources *r, const char *resource, Device **owned, const Device **ret, size_t *ret_n);
/* Drops the memo (nvidia.c calls it when it changes options). */
void resources_memo_clear(Resources *r);
const Device *resources_find_device(const Device *d, size_t n, const char *id);

/* Error helpers (message is formatted with printable ASCII only). */
int resource_error_set(ResourceError *e, const char *name, int error, const char *format, ...)
        __attribute__((format(printf, 4, 5)));

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
 * requests, each non-empty, no id twice in the call, every id known and healthy).
 */
int resources_check_allocate(const Resources *r, const char *resource,
                             char ** const *requests, size_t n_requests, ResourceError *e);

/* Device specs for one container request: every DRM node of each GPU (Gpu1.DeviceNodes,
 * or CardNode and RenderNode when the probe sends none), container path = host path,
 * "rw", each node once even when two shares of one GPU are requested. For the
 * monitoring device: the nodes of every healthy GPU of that driver. Call after
 * resources_check_allocate(). */
int resources_allocate_container(const Resources *r, const char *resource, char * const *ids,
                                 DeviceSpec **ret, size_t *ret_n);
/* Mounts and CDI device names for one container request: by-path links read-only per
 * intel.byPath (single: each GPU's ByPathNodes; all: the whole by-path directory when a
 * GPU has links; none), and "<RESOURCES_CDI_KIND_INTEL>=<gpu id>" per GPU when
 * intel.cdiDevices is on. Nothing for the monitoring device. *ret_cdi is a new strv. */
int resources_allocate_extras(const Resources *r, const char *resource, char * const *ids,
                              MountSpec **ret_mounts, size_t *ret_n_mounts, char ***ret_cdi);
/* The GPU (its id) a device id of resource belongs to, NULL if unknown or monitoring. */
const Gpu *resources_gpu_of_device(const Resources *r, const char *resource, const char *id);

/*
 * Preferred allocation: must_include ids first, then available ids chosen by the
 * configured policy (policy.h; "none" keeps the order given), up to size; ids not in the
 * resource, unhealthy available ids and repeats are skipped. size must be 1..RESOURCES_IDS_MAX, lists are bounded like
 * resources_check_ids() (empty allowed). *ret is a new strv.
 */
int resources_preferred_allocation(const Resources *r, const char *resource,
                                   char * const *available, char * const *must_include,
                                   int32_t size, char ***ret, ResourceError *e);
