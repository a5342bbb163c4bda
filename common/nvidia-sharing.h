/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-sharing.h — which GPU or MIG device an NVIDIA sharing entry names, and which
 * GPUs the configuration puts under MPS: one rule for kgpu-brokerd (which builds the
 * replicas and MPS slices from it) and kgpu-probed (which runs Probe1.SetMps only for
 * the GPUs it names), so the two never disagree.
 *
 * Contract: pure functions, no I/O, no allocation. A `devices` list (ConfigSharedResource)
 * is NULL for "all"; each entry is one of
 *   "<n>"                      GPU index n (decimal, leading zeros allowed, at most 9
 *                              digits): the GPU and its MIG devices;
 *   "<n>:<m>"                  MIG device m of GPU n;
 *   "GPU-<uuid>" (or the Id)   the GPU and its MIG devices;
 *   "MIG-<uuid>"               that MIG device;
 *   "MIG-GPU-<uuid>/<gi>/<ci>" the MIG device with that GPU and compute instance
 *                              (drivers before R470).
 * Indexes compare as numbers; a GPU whose index is unknown (-1) is named only by its
 * UUID or Id.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/config.h"

#define NVIDIA_SHARING_RESOURCE_GPU "nvidia.com/gpu"

/* A GPU, or one MIG device of it, as a `devices` entry is compared with it. */
typedef struct NvidiaDeviceRef {
        int32_t gpu_index;      /* -1: unknown */
        const char *gpu_uuid;   /* "GPU-..." or NULL */
        const char *gpu_id;     /* the Gpu1 Id (NULL, or the UUID again) */
        bool mig;               /* a MIG device of that GPU: the fields below */
        uint32_t mig_index;     /* "Device N" of nvidia-smi -L */
        const char *mig_uuid;
        uint32_t mig_gi, mig_ci;
} NvidiaDeviceRef;

/* Does one entry of a `devices` list name d? */
bool nvidia_device_ref_matches(const char *ref, const NvidiaDeviceRef *d);
/* Does the list (NULL: "all") name d? */
bool nvidia_devices_match(char * const *devices, const NvidiaDeviceRef *d);

/* Does the configuration put this whole GPU under MPS: is there an entry of
 * sharing.mps.resources for nvidia.com/gpu whose `devices` name it? (The broker makes MPS
 * slices only there, and only where they also fit: a GPU in MIG mode, of unknown memory
 * or too small for its slices gets none. What this says is the most it could ever ask.) */
bool config_nvidia_mps_names_gpu(const Config *c, int32_t gpu_index, const char *gpu_uuid, const char *gpu_id);
