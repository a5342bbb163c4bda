/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia.h — NVIDIA GPUs (Vendor "nvidia") as the NVIDIA device plugin's resources:
 * whole GPUs, MIG devices, time-slicing replicas and MPS slices; their Allocate answers,
 * preferred allocations and the MPS limits the probe must set. The backend
 * (nvidia_backend, backend.h) behind the registry (resources.h).
 *
 * Contract:
 *  - Pure: no D-Bus, no I/O, no logging. The state lives in the registry and is rebuilt
 *    from the GPU records by its refresh operation (every resources_update_gpu() and
 *    resources_remove_gpu()) and by resources_set_nvidia_options(); callers use the
 *    registry's resources_* entry points, which reach this backend for every NVIDIA
 *    resource. Until resources_set_nvidia_options() (or the backend's configure) has
 *    been called, NVIDIA GPUs are not advertised. The share limit is 0: replicas are
 *    ids of their own.
 *  - Resources (NVIDIA device plugin semantics, issue 4 contract "Broker"):
 *      migStrategy none:   every GPU is one "nvidia.com/gpu" device;
 *      single:             all GPUs MIG off -> as none; all MIG on with MIG devices of
 *                          one profile -> the MIG devices are "nvidia.com/gpu"; any
 *                          other layout advertises no nvidia.com/gpu device and
 *                          resources_nvidia_problem() says why;
 *      mixed:              MIG-off GPUs are "nvidia.com/gpu", each MIG device is
 *                          "nvidia.com/mig-<profile>".
 *  - Device ids advertised to the kubelet are GPU / MIG UUIDs as upstream does (its
 *    ListAndWatch ids are UUIDs whatever deviceIDStrategy says); replicas and MPS slices
 *    are "<uuid>::<n>". deviceIDStrategy decides the form of the ids handed to the
 *    runtime (NVIDIA_VISIBLE_DEVICES, volume-mount names, CDI names): uuid -> the UUID,
 *    index -> "<gpu index>" / "<gpu index>:<mig device index>".
 *  - Sharing: an MPS entry (sharing.mps.resources[]) or else the first time-slicing
 *    entry (sharing.timeSlicing.resources[]) whose name is the device's resource and
 *    whose `devices` list matches it (absent: all; a GPU index "0" or GPU UUID matches
 *    the GPU and its MIG devices; "0:1", a MIG UUID or "MIG-GPU-<uuid>/<gi>/<ci>"
 *    matches that MIG device; indexes compare as numbers) turns
 *    the device into `replicas` devices "<uuid>::<n>" of config_shared_resource_name().
 *    Several MPS entries on one GPU continue the numbering (2 + 1 replicas: ::0 ::1,
 *    then ::2). MPS applies to whole GPUs not in MIG mode only (MIG devices, or a GPU
 *    in MIG mode served whole under migStrategy none, stay unshared; problem noted). Devices no entry matches stay unshared under their
 *    resource name.
 *  - MPS slices: memory = memoryGB (bytes) or GPU memory / replicas; percentage =
 *    max(1, floor(100 * memory / GPU memory)) with memoryGB, else max(1, floor(100 /
 *    replicas)). A GPU whose slices together exceed its memory, or with an unknown memory
 *    and a slice without memoryGB, gets no MPS (problem noted). Slices are Unhealthy
 *    unless the GPU is healthy and its MpsState is "running".
 *  - Health and NUMA node of every device are its GPU's.
 *  - The table is rebuilt when a GPU's layout (id, UUID, index, memory, MIG mode and
 *    devices) changes or the options do; a change of health, NUMA node or MPS state
 *    only updates the devices in place.
 *  - A device id claimed twice in one resource (two GPUs reporting one UUID) is served
 *    once, for the GPU first in GPU order (problem noted).
 *  - Bounds: NVIDIA_GPUS_MAX GPUs (more are ignored, problem noted), NVIDIA_MIG_MAX MIG
 *    devices per GPU, NVIDIA_REPLICAS_MAX devices per GPU (replicas beyond are cut,
 *    problem noted); ids and names bounded by RESOURCES_ID_MAX / RESOURCES_NAME_MAX
 *    (a GPU or MIG device with a longer or empty UUID, or a MIG profile outside
 *    [A-Za-z0-9._+-], is ignored, problem noted).
 *  - Functions return 0/positive or a negative errno and write ret_* only on success.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "daemons/broker/resources.h"

#define NVIDIA_GPUS_MAX         64
#define NVIDIA_MIG_MAX          8
#define NVIDIA_REPLICAS_MAX     1024

#define NVIDIA_RESOURCE_GPU     "nvidia.com/gpu"
#define NVIDIA_RESOURCE_MIG_PREFIX "nvidia.com/mig-"
#define NVIDIA_CDI_KIND         "nvidia.com/gpu"
#define NVIDIA_VISIBLE_DEVICES  "NVIDIA_VISIBLE_DEVICES"
#define NVIDIA_VOLUME_MOUNTS_ROOT "/var/run/nvidia-container-devices"
#define NVIDIA_VOLUME_MOUNTS_HOST "/dev/null"
#define NVIDIA_CDI_ANNOTATION_PLUGIN "nvidia-device-plugin"
#define NVIDIA_MPS_CONTAINER_ROOT "/mps"         /* CUDA_MPS_PIPE_DIRECTORY = /mps/<resource>/pipe */
#define NVIDIA_MPS_SHM          "/dev/shm"

/*
 * Copies what the broker needs from c (nvidia.enabled, MIG strategy, id strategy,
 * device list strategies, passDeviceSpecs, cdiAnnotationPrefix, replica policy, the
 * timeSlicing and mps sharing lists) and rebuilds the NVIDIA devices. Call at start and
 * on reload (reload.c builds a fresh Resources and diffs it). -EINVAL if a sharing entry is unusable (empty name, name or rename too
 * long, replicas 0 or > NVIDIA_REPLICAS_MAX); then nothing is changed.
 */
int resources_set_nvidia_options(Resources *r, const Config *c);

/*
 * Why some NVIDIA GPU or device is not advertised as configured ("migStrategy single:
 * GPU-... has MIG devices of profiles 1g.10gb and 3g.40gb"), "; "-joined; NULL when all
 * is well. Valid until the next update. For the caller to log when it changes.
 */
const char *resources_nvidia_problem(const Resources *r);

/* True if resource is (or was) an advertised NVIDIA resource. */
bool resources_is_nvidia(const Resources *r, const char *resource);

/* The envs and annotations of one container's Allocate answer (resources_allocate_envs()),
 * per deviceListStrategy:
 *   envvar:          NVIDIA_VISIBLE_DEVICES=<runtime ids, comma-separated, each once>
 *   volume-mounts:   NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices (the
 *                    mounts come from resources_allocate_extras())
 *   cdi-annotations: <cdiAnnotationPrefix>nvidia-device-plugin_<16 hex digits, a hash
 *                    of the request's ids> = "nvidia.com/gpu=<id>,nvidia.com/gpu=<id2>"
 *   cdi-cri:         nothing here (cdi names from resources_allocate_extras())
 *   MPS slices:      CUDA_MPS_PIPE_DIRECTORY=/mps/<resource>/pipe,
 *                    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=<MiB>M" and
 *                    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=<pct> of this container's slices
 *                    (several slices of one GPU in one container: summed, percentage
 *                    capped at 100); the mounts (resources_allocate_extras()): the
 *                    GPU's Gpu1.MpsPipeDirectory exactly as the probe exports it, at
 *                    /mps/<resource>/pipe, read-only, and /dev/shm.
 * As upstream, envvar/volume-mounts/passDeviceSpecs apply only when at least one
 * non-CDI strategy is set. */

/* What the broker asks of the probe: one entry per NVIDIA GPU that is under MPS
 * (enabled: SetMps(gpu_id, true, pinned_memory_bytes, active_thread_percentage) with the
 * LARGEST slice's limits on that GPU, memory and percentage each the maximum over its
 * slices) or whose MpsState is not "" while the config puts no MPS on it (enabled
 * false: SetMps(gpu_id, false, 0, 0)). In GPU order (index). The control daemon's
 * defaults are an upper bound: a client's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE only
 * constrains it further (a lower daemon setting is obeyed, NVIDIA's MPS documentation),
 * so every slice's own limits, which each Allocate answer carries, are <= these. */
typedef struct NvidiaMpsRequest {
        char *gpu_id;                   /* Gpu1.Id */
        bool enabled;
        uint64_t pinned_memory_bytes;
        uint32_t active_thread_percentage;
} NvidiaMpsRequest;

int resources_nvidia_mps_requests(const Resources *r, NvidiaMpsRequest **ret, size_t *ret_n);
NvidiaMpsRequest *nvidia_mps_requests_free(NvidiaMpsRequest *l, size_t n);

/*
 * GetPreferredAllocation for an NVIDIA resource (resources_preferred_allocation() calls
 * this with held = NULL). must_include first, then among the healthy available ids:
 *   whole GPUs: the set maximising, in order, the NVLinks summed over its pairs, the
 *     pairs under one PCIe switch (PIX/PXB), the pairs on one NUMA node (NODE/PHB or
 *     equal NumaNode), then the pairs behind one host bridge (PHB); exhaustive when C(candidates, needed) <= 10000, else greedy;
 *     ties: lowest GPU index first;
 *   replicas / MPS slices: per Config.nvidia_replica_policy, one id at a time:
 *     distributed: from the GPU (MIG device) with the fewest replicas in use,
 *     packed: from the one with the most in use (fill it first);
 *     ties: lowest GPU index, then lowest replica number. In use = ids of that GPU not
 *     in available (minus must_include: those count too, as upstream) or listed in held
 *     (the broker's recorded allocations of this resource; may be NULL);
 *   MIG devices (unshared): the available order.
 * Bounds and errors as resources_preferred_allocation(). *ret is a new strv.
 */
int resources_nvidia_preferred_allocation(const Resources *r, const char *resource,
                                          char * const *available, char * const *must_include,
                                          char * const *held, int32_t size, char ***ret,
                                          ResourceError *e);
