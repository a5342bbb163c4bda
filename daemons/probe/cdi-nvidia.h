/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cdi-nvidia.h — the CDI spec of the NVIDIA GPUs: <cdi.specDirectory>/kgpu-nvidia.yaml.
 *
 * Contract (issue 4): kind "nvidia.com/gpu"; one device per GPU under its index ("0")
 * and one under its UUID, one per MIG device under "<gpu index>:<MIG device index>" and
 * one under its MIG UUID (names that are not valid CDI device names, like the old
 * "MIG-GPU-<uuid>/<gi>/<ci>" form, are left out); each device's containerEdits name its
 * own nodes (/dev/nvidiaN; for a MIG device also its capability nodes), the spec-wide
 * containerEdits the common ones (nvidiactl, nvidia-uvm, nvidia-uvm-tools) and the env
 * NVIDIA_VISIBLE_DEVICES=void (as NVIDIA's generator: a legacy NVIDIA hook on the node
 * injects nothing more). Under a device root (flags.nvidiaDevRoot other than "/") every
 * node gets hostPath <dev root><path>, path staying the container's "/dev/...".
 * With the driver's files (nvidia-driver-files.h; issue 13) the spec-wide edits also
 * mount them read-only (ro, nosuid, nodev, bind; noexec for the IPC sockets) and run
 * kgpu's own hook binary (o->hook, kgpu-cdi-hook) at createContainer: `create-symlinks
 * --link TARGET::LINK ...` (the sonames, libcuda.so) and `update-ldcache --folder DIR
 * ...` (the libraries' directories), so a runtime that only applies the CDI spec
 * (containerd, CRI-O, podman) gives a working driver without any NVIDIA toolkit. Every
 * NVIDIA GPU is listed whatever its health (a container that was given a GPU can still be
 * restarted; the broker does not hand out unhealthy ones). Written atomically
 * (outputs_write_atomic) whenever the inventory changes; removed when no NVIDIA GPU is
 * left. The builder is pure; the writer does not log.
 */
#pragma once

#include <stddef.h>

#include "daemons/probe/gpu.h"
#include "daemons/probe/nvidia-driver-files.h"

#define CDI_NVIDIA_FILE "kgpu-nvidia.yaml"
#define CDI_NVIDIA_KIND "nvidia.com/gpu"
/* The hook's argv[0] in the spec; its path is CdiNvidiaOptions.hook. */
#define CDI_NVIDIA_HOOK_NAME "kgpu-cdi-hook"

typedef struct CdiNvidiaOptions {
        const char *dev_root;                   /* NULL, "" or "/": the nodes are the host's */
        const char *hook;                       /* the hook binary (absolute); NULL: no hooks */
        const NvidiaDriverFiles *files;         /* NULL: device nodes only */
} CdiNvidiaOptions;

/* The YAML text; returns the number of devices (0: no NVIDIA GPU, *ret still set).
 * o may be NULL (device nodes only). */
int cdi_nvidia_spec(Gpu * const *gpus, size_t n, char **ret);
int cdi_nvidia_spec_with(Gpu * const *gpus, size_t n, const CdiNvidiaOptions *o, char **ret);

/* Writes <directory>/kgpu-nvidia.yaml, or removes it when there is no NVIDIA GPU. */
int cdi_nvidia_write(const char *directory, Gpu * const *gpus, size_t n);
int cdi_nvidia_write_with(const char *directory, Gpu * const *gpus, size_t n, const CdiNvidiaOptions *o);

/* The driver version of the first NVIDIA GPU that reports a valid one, or NULL. */
const char *cdi_nvidia_driver_version(Gpu * const *gpus, size_t n);
