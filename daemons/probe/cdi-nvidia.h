/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cdi-nvidia.h — the CDI spec of the NVIDIA GPUs: <cdi.specDirectory>/kgpu-nvidia.yaml.
 *
 * Contract (issue 4): kind "nvidia.com/gpu"; one device per GPU under its index ("0")
 * and one under its UUID, one per MIG device under "<gpu index>:<MIG device index>" and
 * one under its MIG UUID (names that are not valid CDI device names, like the old
 * "MIG-GPU-<uuid>/<gi>/<ci>" form, are left out); each device's containerEdits name its
 * own nodes (/dev/nvidiaN; for a MIG device also its capability nodes), the spec-wide
 * containerEdits the common ones (nvidiactl, nvidia-uvm, nvidia-uvm-tools). Every
 * NVIDIA GPU is listed whatever its health (a container that was given a GPU can still be
 * restarted; the broker does not hand out unhealthy ones). Written atomically
 * (outputs_write_atomic) whenever the inventory changes; removed when no NVIDIA GPU is
 * left. The builder is pure; the writer does not log.
 */
#pragma once

#include <stddef.h>

#include "daemons/probe/gpu.h"

#define CDI_NVIDIA_FILE "kgpu-nvidia.yaml"
#define CDI_NVIDIA_KIND "nvidia.com/gpu"

/* The YAML text; returns the number of devices (0: no NVIDIA GPU, *ret still set). */
int cdi_nvidia_spec(Gpu * const *gpus, size_t n, char **ret);

/* Writes <directory>/kgpu-nvidia.yaml, or removes it when there is no NVIDIA GPU. */
int cdi_nvidia_write(const char *directory, Gpu * const *gpus, size_t n);
