/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mps-client.h — the broker asks the probe to run MPS for the GPUs its config puts under
 * MPS (io.kgpu.Probe1.SetMps), and to stop it where the config no longer does.
 *
 * Contract:
 *  - mps_plan_for_gpu() is pure: from Config.nvidia_mps (sharing.mps.resources[]) and a
 *    GPU record it says whether the GPU is under MPS and which default limits the probe
 *    must set: those of the smallest slice on that GPU (entries may give different
 *    sizes; a client without the slice env cannot exceed any slice). A slice's memory is
 *    memoryGB, or GPU memory / replicas; its percentage max(1, floor(100 * slice memory /
 *    GPU memory)) (at most 100), or, without memoryGB, max(1, floor(100 / replicas)). An
 *    entry applies to an NVIDIA GPU with MIG not enabled when its name is nvidia.com/gpu
 *    and its devices list is absent or names the GPU's index or UUID. MPS on MIG devices
 *    is not supported (the probe refuses it): such GPUs get a reason, not a plan.
 *  - mps_client_sync() compares the plan of every known GPU with what it last asked the
 *    probe for and sends SetMps (asynchronously, never blocking the broker) where they
 *    differ: SetMps(true, limits) for a GPU under MPS, SetMps(false) for a GPU whose
 *    MpsState is not "" while the config puts it under no MPS. force (the probe (re)appeared
 *    on the bus, a reload) forgets what was sent and asks again for every GPU under MPS:
 *    a restarted probe runs no MPS daemon until told. Failures are logged with the
 *    probe's error; nothing is retried until the next forced sync, a new GPU or a change
 *    of plan. Without a probe on the bus nothing is sent.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/config.h"
#include "daemons/broker/resources.h"

#define RESOURCE_NVIDIA_GPU "nvidia.com/gpu"

typedef struct Manager Manager;
typedef struct MpsClient MpsClient;

typedef struct MpsPlan {
        bool enabled;
        uint64_t pinned_memory_bytes;   /* the smallest slice's memory */
        uint32_t active_thread_percentage;
        uint32_t n_slices;              /* replicas summed over the entries that apply */
        const char *skipped;            /* why an NVIDIA GPU named by the config gets no MPS, else NULL */
} MpsPlan;

void mps_plan_for_gpu(const Config *c, const GpuInfo *g, MpsPlan *ret);

MpsClient *mps_client_free(MpsClient *c);
int mps_client_sync(Manager *m, bool force);
