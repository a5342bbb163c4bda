/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * labels-nvidia.h — NVIDIA node labels with the names and value formats of NVIDIA's GPU
 * feature discovery (GFD), from the probe's NVIDIA GPUs and the configuration (pure: no
 * I/O, no logging).
 *
 * Input: the NVIDIA GPUs the node has (the caller leaves out lost and removed ones, as
 * NVML would not list them), each with the values of its io.kgpu.Gpu1 properties, and
 * the Config (migStrategy, sharing.timeSlicing / sharing.mps). Output: a sorted strv of
 * "name=value" lines for the NFD local feature file; no GPU, no line.
 *
 *   nvidia.com/cuda.driver-version.{major,minor,revision,full}  from DriverVersion "X.Y[.Z]"
 *   nvidia.com/cuda.driver.{major,minor,rev}                      the same (GFD's deprecated names)
 *   nvidia.com/cuda.runtime-version.{major,minor,full}           from CudaVersion "X.Y"
 *   nvidia.com/cuda.runtime.{major,minor}                         the same (deprecated names)
 *   nvidia.com/mig.capable      "true" when any GPU is MIG capable (MigMode not "")
 *   nvidia.com/mps.capable      "true" when sharing.mps has resources and no GPU has MIG on
 *   nvidia.com/mig.strategy     "single" | "mixed" (not written for "none", as GFD)
 *   nvidia.com/gpu.mode         "compute" (PCI class 0x0302), "graphics" (0x0300), "unknown"
 *   nvidia.com/gpu.{product,count,replicas,sharing-strategy,memory,family,compute.major,
 *                   compute.minor}
 *     per product name (the last name wins when a node mixes models, as in GFD); count is
 *     the GPUs of that name; product is the name with runs of blanks turned into one '-'
 *     and characters outside [A-Za-z0-9._-] dropped, plus "-SHARED" when the resource has
 *     replicas > 1 and no rename; replicas and sharing-strategy ("none", "time-slicing",
 *     "mps") from the first sharing entry named "nvidia.com/gpu" (1 / "none" without one);
 *     a MIG-enabled GPU is labelled without sharing (replicas 0); memory in MiB; family
 *     from the compute capability (kepler ... hopper, blackwell for 10.x and 12.x).
 *   MIG, strategy single (every GPU MIG-enabled with devices of one profile): the
 *     nvidia.com/gpu.* labels describe the MIG devices: product "<model>-MIG-<profile>",
 *     count, replicas, sharing-strategy, memory (MiB of one device), slices.gi, slices.ci;
 *     an invalid layout gives product "<model>-MIG-INVALID" with count, replicas and
 *     memory 0. Strategy mixed: the same labels under nvidia.com/mig-<profile>.* per
 *     profile. slices.* are read from the profile name ("1g.10gb": 1/1, "1c.3g.40gb": 1/3);
 *     GFD's multiprocessors and engines.* come from NVML attributes the probe does not
 *     have and are not written.
 * The sharing strategy of a config is "mps" when sharing.mps has resources, else
 * "time-slicing" when sharing.timeSlicing has, else "none" (as the NVIDIA plugin decides).
 * Returns 0 or -ENOMEM.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "daemons/probe/gpu.h"

#define LABELS_NVIDIA_PREFIX "nvidia.com/"

typedef struct LabelsNvidiaMig {
        const char *profile;            /* "1g.10gb" */
        uint64_t memory_bytes;
} LabelsNvidiaMig;

typedef struct LabelsNvidiaGpu {
        const char *product;            /* "NVIDIA H100 80GB HBM3" */
        uint64_t memory_bytes;
        const char *compute_capability; /* "9.0", "" unknown */
        const char *driver_version;     /* "550.54.15" */
        const char *cuda_version;       /* "12.4" */
        const char *mig_mode;           /* "", "Disabled", "Enabled" */
        uint32_t pci_class;             /* 0x030200 */
        const LabelsNvidiaMig *migs;
        size_t n_migs;
} LabelsNvidiaGpu;

/* "hopper" for 9.x, ... "undefined" when unknown; "" compute capability: NULL. */
const char *labels_nvidia_family(unsigned major, unsigned minor);

int labels_nvidia_build(const LabelsNvidiaGpu *gpus, size_t n, const Config *c, char ***ret);

/* The probe's side: the labels of the NVIDIA GPUs among gpus (vendor "nvidia", except
 * those Unhealthy as "gpu-lost" or "removed"), in the order given. */
int labels_nvidia_from_gpus(Gpu * const *gpus, size_t n, const Config *c, char ***ret);

/* A Config holding copies of just what the probe reads of the NVIDIA configuration
 * after loading it: what the labels read (migStrategy, the sharing lists' name, rename
 * and replicas) and the sharing lists' devices (SetMps is allowed only for the GPUs
 * sharing.mps names, config_nvidia_mps_names_gpu()); kept across reloads; config_free(). */
int labels_nvidia_config_copy(const Config *src, Config **ret);
