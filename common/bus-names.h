/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bus-names.h — D-Bus names, paths and interfaces of kgpu (the contract: the XML files in dbus/). */
#pragma once

#define KGPU_PROBE_BUS_NAME        "io.kgpu.Probe1"
#define KGPU_PROBE_PATH            "/io/kgpu/Probe1"
#define KGPU_PROBE_INTERFACE       "io.kgpu.Probe1"
#define KGPU_GPU_PATH_PREFIX       "/io/kgpu/Probe1/gpu"
#define KGPU_GPU_INTERFACE         "io.kgpu.Gpu1"
#define KGPU_KUBELET_INTERFACE     "io.kgpu.Kubelet1"   /* on KGPU_PROBE_PATH */

#define KGPU_BROKER_BUS_NAME       "io.kgpu.Broker1"
#define KGPU_BROKER_PATH           "/io/kgpu/Broker1"
#define KGPU_BROKER_INTERFACE      "io.kgpu.Broker1"

#define KGPU_CLUSTER_BUS_NAME      "io.kgpu.Cluster1"
#define KGPU_CLUSTER_PATH          "/io/kgpu/Cluster1"
#define KGPU_CLUSTER_INTERFACE     "io.kgpu.Cluster1"

/* D-Bus error names kgpu returns. */
#define KGPU_ERROR_UNKNOWN_RESOURCE "io.kgpu.Error.UnknownResource"
#define KGPU_ERROR_UNKNOWN_DEVICE   "io.kgpu.Error.UnknownDevice"
#define KGPU_ERROR_UNHEALTHY        "io.kgpu.Error.Unhealthy"
#define KGPU_ERROR_EXHAUSTED        "io.kgpu.Error.Exhausted"
#define KGPU_ERROR_TOO_MANY_ALLOCATIONS "io.kgpu.Error.TooManyAllocations"
#define KGPU_ERROR_INVALID_ARGS     "io.kgpu.Error.InvalidArgs"
#define KGPU_ERROR_STATE            "io.kgpu.Error.StateUnavailable"
#define KGPU_ERROR_ACCESS_DENIED    "io.kgpu.Error.AccessDenied"
#define KGPU_ERROR_MPS_FAILED       "io.kgpu.Error.MpsFailed"
#define KGPU_ERROR_KUBELET_UNAVAILABLE "io.kgpu.Error.KubeletUnavailable"
#define KGPU_ERROR_NO_GAS_POD      "io.kgpu.Error.NoGasPod"
#define KGPU_ERROR_REFUSED          "io.kgpu.Error.Refused"
