/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gate.h — kgpu-grpcd as the last gate: an Allocate answer of the broker reaches the
 * kubelet only if everything in it belongs to the devices the kubelet asked for, as the
 * root probe exports them (probe-gpus.h). A process that owns io.kgpu.Broker1 can thus
 * hand a pod the GPUs it advertises, but not the node.
 *
 * Contract: pure, no I/O, no logging. gate_check_allocate() takes the kubelet's request
 * (container i of the answer for container request i) and the broker's answer and
 * returns 0 when every entry of every container answer is one of these, for the
 * devices of that container's request (its "grant"):
 *  - Grant. gpu.intel.com/<driver>: each id is an Intel GPU's Id, or "<Id>-<n>" (a
 *    share); gpu.intel.com/<driver>_monitoring with id "all": every Intel GPU of that
 *    driver; gpu.intel.com/monitoring with id "all": every Intel GPU. nvidia.com/...: each id is an NVIDIA GPU's Id/Uuid or a MIG device's UUID,
 *    or that with "::<n>" (a time-slicing or MPS replica). Other resources, and ids that
 *    name nothing the probe exports, grant nothing. A granted NVIDIA device is named to
 *    the runtime by its UUID or, with deviceIDStrategy index, "<Index>" /
 *    "<Index>:<MIG device index>": both forms are accepted.
 *  - Device specs: container path = host path, permissions of 'r' and 'w' only, host
 *    path one of the granted GPUs' DeviceNodes, CardNode, RenderNode (and MeiNodes for
 *    an Intel monitoring grant), a granted MIG
 *    device's capability nodes, or with an NVIDIA grant one of GATE_NVIDIA_CONTROL_NODES.
 *  - Mounts (container path = host path unless said): read-only ByPathNodes links of a
 *    granted Intel GPU, or the whole GATE_BY_PATH_DIR read-only with an Intel grant;
 *    with an NVIDIA grant, GATE_NVIDIA_VOLUME_MOUNTS_HOST at
 *    GATE_NVIDIA_VOLUME_MOUNTS_ROOT/<granted name>; when a granted GPU has a
 *    MpsPipeDirectory, that directory at GATE_MPS_CONTAINER_ROOT/<resource>/pipe and
 *    GATE_MPS_SHM.
 *  - Envs: NVIDIA_VISIBLE_DEVICES (NVIDIA grant) = GATE_NVIDIA_VOLUME_MOUNTS_ROOT or a
 *    ','-list of granted names; with a granted MPS GPU CUDA_MPS_PIPE_DIRECTORY = the
 *    pipe's container path, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT = "<n>=<n>M"[,...],
 *    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 1..100; with an Intel GPU grant (not monitoring)
 *    ZE_AFFINITY_MASK = a ','-list of "<i>" or "<i>.<t>" (1 to 4 digits each, i below the
 *    number of distinct GPUs granted; the Intel resource manager's tile mask). No other name.
 *  - Annotations: key = cdi_annotation_prefix + 1..63 of [A-Za-z0-9._-]; value a
 *    ','-list of CDI names as below.
 *  - CDI names: GATE_CDI_KIND_INTEL "=" a granted Intel GPU's Id, GATE_CDI_KIND_NVIDIA
 *    "=" a granted NVIDIA name (the kinds of kgpu's own CDI spec files).
 * Anything else: -EPERM and *ret_reason (new string) names the container and the first
 * entry refused, hostile text shortened and made printable. -ENODATA (reason set): the
 * probe's inventory was never read, nothing can be checked. -EINVAL: the answer's
 * container count is not the request's. -ENOMEM.
 */
#pragma once

#include <stdbool.h>

#include "daemons/grpc/probe-gpus.h"
#include "deviceplugin.pb-c.h"

/* What kgpu-brokerd puts in answers (daemons/broker/nvidia.h, resources.h) and the kinds
 * of the probe's CDI specs (daemons/probe/outputs.h, cdi-nvidia.h); test-grpcd-gate
 * checks that they agree. */
#define GATE_CDI_KIND_INTEL             "gpu.intel.com/gpu"
#define GATE_CDI_KIND_NVIDIA            "nvidia.com/gpu"
#define GATE_BY_PATH_DIR                "/dev/dri/by-path"
#define GATE_NVIDIA_VOLUME_MOUNTS_ROOT  "/var/run/nvidia-container-devices"
#define GATE_NVIDIA_VOLUME_MOUNTS_HOST  "/dev/null"
#define GATE_MPS_CONTAINER_ROOT         "/mps"
#define GATE_MPS_SHM                    "/dev/shm"
#define GATE_NVIDIA_CONTROL_NODES \
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"

int gate_check_allocate(const ProbeGpus *gpus, const char *cdi_annotation_prefix, const char *resource,
                        const V1beta1__AllocateRequest *request, const V1beta1__AllocateResponse *answer,
                        char **ret_reason);
