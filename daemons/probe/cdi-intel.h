/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cdi-intel.h — the CDI spec of the Intel GPUs: <cdi.specDirectory>/kgpu-intel-gpu.json.
 *
 * Contract: JSON, cdiVersion 0.5.0, kind gpu.intel.com/gpu, one device per Healthy Intel
 * GPU named by its id (the PCI address, a valid CDI device name), whose
 * containerEdits.deviceNodes are the GPU's DRM nodes (path and type "c"), in id order.
 * CDI refuses a spec without devices: with no such GPU the file is removed instead.
 * Written atomically (outputs_write_atomic). The builder is pure; the writer does not log.
 */
#pragma once

#include <stddef.h>

#include "daemons/probe/gpu.h"

#define CDI_INTEL_KIND "gpu.intel.com/gpu"
#define CDI_INTEL_FILE "kgpu-intel-gpu.json"

/* The names this file had when it lived in outputs.h. */
#define OUTPUTS_CDI_KIND CDI_INTEL_KIND
#define OUTPUTS_CDI_FILE CDI_INTEL_FILE

/* The JSON text; returns the number of devices (0: no device, *ret still set). */
int cdi_intel_spec(Gpu * const *gpus, size_t n, char **ret);

/* Writes <directory>/kgpu-intel-gpu.json, or removes it when it has no device. */
int cdi_intel_write(const char *directory, Gpu * const *gpus, size_t n);
