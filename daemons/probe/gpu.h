/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gpu.h — one GPU as the probe exports it (io.kgpu.Gpu1), and the sysfs value parsers.
 *
 * A Gpu owns all its strings; none of them is ever NULL once gpu_new() returned (empty
 * strings stand for "unknown"), so sd-bus can read them by offset. The parsers take one
 * attribute value as read from sysfs (hostile: any bytes, any length) and return 0 and
 * the value, or a negative errno (-EINVAL garbage, -ERANGE out of range) without
 * writing ret; callers substitute the documented safe default and log at debug.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cleanup.h"

#define GPU_HEALTHY   "Healthy"
#define GPU_UNHEALTHY "Unhealthy"
/* HealthReason of a served PF on which SR-IOV VFs were enabled while it was served. */
#define GPU_REASON_SRIOV_PF "sriov-vfs-enabled"

/* Longest sysfs attribute value the probe reads; anything longer is garbage. */
#define GPU_SYSFS_VALUE_MAX 64
/* Larger lmem_total_bytes values (1 PiB) are treated as garbage. */
#define GPU_MEMORY_PER_TILE_MAX (UINT64_C(1) << 50)
/* Most gt/tile entries counted per GPU. */
#define GPU_TILES_MAX 64

/* Most MIG devices / links one Gpu carries (bounded like the nvidia-smi parsers). */
#define GPU_MIG_DEVICES_MAX 64U
#define GPU_LINKS_MAX 64U

/* One element of Gpu1.MigDevices, a(ussuuast). */
typedef struct GpuMigDevice {
        uint32_t device_index;  /* "MIG ... Device N" of nvidia-smi -L */
        char *uuid;             /* "MIG-..." */
        char *profile;          /* "1g.10gb" */
        uint32_t gi_id;
        uint32_t ci_id;
        char **device_nodes;    /* /dev/nvidia-caps/nvidia-cap<minor> (gi access, ci access) */
        uint64_t memory_bytes;
} GpuMigDevice;

/* One element of Gpu1.Links, a(ssy). */
typedef struct GpuLink {
        char *peer_id;          /* the other GPU's Id */
        char *type;             /* "NV", "PIX", "PXB", "PHB", "NODE", "SYS" */
        uint8_t nvlinks;        /* bonded NVLinks for "NV", else 0 */
} GpuLink;

typedef struct Gpu {
        char *id;               /* PCI address for Intel, GPU UUID for NVIDIA */
        char *vendor;           /* "intel" */
        char *driver;           /* "i915", "xe" */
        char *pci_address;
        uint16_t vendor_id;
        uint16_t device_id;
        char *product;
        uint64_t memory_bytes;
        uint32_t tiles;
        int32_t numa_node;
        char *card_node;        /* "/dev/dri/card0" or "" */
        char *render_node;      /* "/dev/dri/renderD128" or "" */
        char **device_nodes;    /* card and render node, those that exist */
        char *uuid;
        char *health;           /* GPU_HEALTHY or GPU_UNHEALTHY */
        char *health_reason;
        uint32_t pci_class;     /* 0x030000 display VGA, 0x038000 display other */
        char **by_path_nodes;   /* udev's /dev/dri/by-path links of card and render node */
        char *physical_function; /* PCI address of the SR-IOV PF for a VF, else "" */
        char **mei_nodes;       /* /dev/mei<N> of the GPU's MEI (GSC) devices, for Intel monitoring */

        /* NVIDIA (issue 4 contract); Intel GPUs keep the "unknown" values of gpu_new(). */
        int32_t index;                  /* nvidia-smi index, -1 */
        char *compute_mode;             /* "Default", "Exclusive_Process", ... or "" */
        char *mig_mode;                 /* "", "Disabled", "Enabled" */
        GpuMigDevice *mig_devices;
        size_t n_mig_devices;
        char *compute_capability;       /* "9.0" or "" */
        char *driver_version;           /* "550.54.15" or "" */
        char *cuda_version;             /* "12.4" or "" */
        GpuLink *links;
        size_t n_links;
        char *mps_state;                /* "", "starting", "running", "failed" */
        char *mps_pipe_directory;       /* "/run/kgpu/mps/<uuid>/pipe" or "" */

        /* Not exported: good health polls in a row since the GPU turned unhealthy. */
        uint32_t nvidia_good_polls;

        /* Not exported: whether memory_bytes was read from sysfs (GPU_MEMORY_OVERRIDE
         * applies only when it was not). */
        bool memory_known;

        /* Not exported: udev syspaths of the DRM nodes, to match remove events whose
         * sysfs entries are already gone. */
        char *card_syspath;
        char *render_syspath;
} Gpu;

/* A Healthy GPU with the given id and every string set to "". */
int gpu_new(const char *id, Gpu **ret);
Gpu *gpu_free(Gpu *g);
DEFINE_CLEANUP_FUNC(Gpu, gpu_free);

/* Replace the MIG device / link lists with deep copies of src (n at most the _MAX). */
int gpu_set_mig_devices(Gpu *g, const GpuMigDevice *src, size_t n);
int gpu_set_links(Gpu *g, const GpuLink *src, size_t n);
void gpu_mig_devices_free(GpuMigDevice *l, size_t n);
void gpu_links_free(GpuLink *l, size_t n);
bool gpu_mig_devices_equal(const GpuMigDevice *a, size_t n_a, const GpuMigDevice *b, size_t n_b);
bool gpu_links_equal(const GpuLink *a, size_t n_a, const GpuLink *b, size_t n_b);

/* Recomputes device_nodes from card_node and render_node. */
int gpu_update_device_nodes(Gpu *g);

/* Names (D-Bus property names) of the properties that differ between a and b, into
 * *ret (a strv, possibly empty). Only non-const properties are compared. */
int gpu_diff_properties(const Gpu *a, const Gpu *b, char ***ret);

/* Copies every exported value (not id) from src into dst. */
int gpu_copy_properties(Gpu *dst, const Gpu *src);

/* Sets health and reason; returns 1 if anything changed, 0 if not, <0 on OOM. */
int gpu_set_health(Gpu *g, const char *health, const char *reason);

/* "0x8086" or "8086" (1-4 hex digits, optional 0x) -> 0x8086. */
int gpu_parse_pci_id(const char *s, uint16_t *ret);
/* "-1" or "0".."4095". */
int gpu_parse_numa_node(const char *s, int32_t *ret);
/* Unsigned decimal (or 0x hex) byte count, at most GPU_MEMORY_PER_TILE_MAX. */
int gpu_parse_memory_bytes(const char *s, uint64_t *ret);
/* "DDDD:BB:DD.F", hex, the form sysfs uses for PCI device names. */
bool gpu_pci_address_is_valid(const char *s);

typedef enum GpuNodeKind {
        GPU_NODE_NONE,
        GPU_NODE_CARD,          /* cardN */
        GPU_NODE_RENDER,        /* renderDN */
} GpuNodeKind;

/* Classifies a drm sysname; connectors ("card0-DP-1") and anything else are NONE. */
GpuNodeKind gpu_node_kind_from_sysname(const char *sysname);

/* lmem per tile x tiles; 0 if per_tile is 0 or the product overflows. */
uint64_t gpu_memory_total(uint64_t per_tile, uint32_t tiles);

/* GPU_MEMORY_OVERRIDE / GPU_MEMORY_RESERVED as the Intel labeler applies them: a GPU whose
 * memory was read gets it minus reserved (saturating at 0), one whose memory could not
 * be read gets override (reserved not subtracted). */
void gpu_apply_memory_policy(Gpu *g, uint64_t override, uint64_t reserved);

/* Parses a GPU_MEMORY_* value: unsigned decimal bytes, at most 2^60. */
int gpu_parse_memory_env(const char *s, uint64_t *ret);

/* "0x038000" -> 0x038000 (at most 6 hex digits). */
int gpu_parse_pci_class(const char *s, uint32_t *ret);
