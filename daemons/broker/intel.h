/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * intel.h — Intel GPUs (Vendor "intel") as the Intel device plugin's resources: one
 * device per GPU or per share, the monitoring resource, and their Allocate answers.
 * The backend (intel_backend, backend.h) behind the registry (resources.h).
 *
 * Contract:
 *  - Pure: no D-Bus, no I/O, no logging. The state lives in the registry; until
 *    resources_new() or the configure operation created it, no Intel GPU is advertised.
 *  - An Intel GPU (Vendor "intel", Driver "i915" or "xe") is one device of resource
 *    "gpu.intel.com/<driver>" with device id = Gpu1.Id, unless intel.allowIDs is set
 *    and lacks its PCI device id, or intel.denyIDs has it. Other GPUs are left to the
 *    other backends.
 *  - Sharing (intel.sharedDevNum N): with N > 1 each GPU is N devices "<gpu id>-0" ..
 *    "<gpu id>-<N-1>", as the Intel plugin names its shares "<card>-<i>"; with N == 1
 *    the device id stays the plain GPU id (PCI address), so allocations recorded
 *    before sharing was configured, and the kubelet's checkpoint, stay valid. Every
 *    share of a GPU has the GPU's health and NUMA node. The share limit of a resource
 *    is N (0 for the monitoring resource: not counted).
 *  - Monitoring (intel.enableMonitoring): one device "all" (the Intel plugin's id),
 *    healthy while one GPU it covers is. intel.monitoringMode single: resource
 *    "gpu.intel.com/monitoring" covering every Intel GPU; split: "<resource>_monitoring"
 *    covering the GPUs of that driver. resources_new() starts in split.
 *  - Allocate: device specs are every DRM node of each GPU (Gpu1.DeviceNodes, or
 *    CardNode and RenderNode when the probe sends none), container path = host path,
 *    "rw", each node once even when two shares of one GPU are requested; for the
 *    monitoring device the nodes and Gpu1.MeiNodes of every healthy GPU it covers. Mounts: by-path
 *    links read-only per intel.byPath (single: each GPU's ByPathNodes; all: the whole
 *    by-path directory when a GPU has links; none); CDI names
 *    "<RESOURCES_CDI_KIND_INTEL>=<gpu id>" per GPU when intel.cdiDevices is on; nothing
 *    for the monitoring device. No envs or annotations.
 *  - Preferred allocation: must_include first, then the configured policy (policy.h;
 *    "none" keeps the order given) among the healthy available ids.
 *  - Functions return 0/positive or a negative errno and write ret_* only on success.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "common/config.h"
#include "daemons/broker/resources.h"

#define RESOURCE_INTEL_I915     "gpu.intel.com/i915"
#define RESOURCE_INTEL_XE       "gpu.intel.com/xe"
#define RESOURCE_MONITORING_SUFFIX "_monitoring"
#define RESOURCE_INTEL_MONITORING "gpu.intel.com/monitoring"
#define RESOURCE_MONITORING_ID  "all"
#define RESOURCES_BY_PATH_DIR   "/dev/dri/by-path"
/* Kind of the probe's CDI spec for Intel GPUs; one CDI device per GPU, named by its id. */
#define RESOURCES_CDI_KIND_INTEL "gpu.intel.com/gpu"

/* An empty registry whose Intel backend is on (or off), with the Intel defaults
 * (sharedDevNum 1, byPath single) and the other backends unconfigured: for tests and
 * fuzzers; the daemon uses resources_new_from_config(). */
int resources_new(bool intel_enabled, Resources **ret);

/* Sets the Intel PCI device id filters (strings like "0x56a0" or "56a0"; NULL or empty:
 * no filter). -EINVAL naming nothing: the caller names the bad value from its config. Call
 * before the first update. */
int resources_set_id_filters(Resources *r, char * const *allow, char * const *deny);
/* Intel options (call before the first update, or again: share ids are rebuilt). N is
 * clamped to 1..1024. */
int resources_set_intel_options(Resources *r, uint32_t shared_dev_num, ConfigAllocationPolicy policy,
                                bool monitoring, ConfigByPath by_path, bool cdi_devices);
/* intel.monitoringMode (call before the first update, or again). */
int resources_set_intel_monitoring_mode(Resources *r, ConfigIntelMonitoringMode mode);
/* True if the resource is the monitoring resource of the current mode. */
bool resources_is_monitoring(const Resources *r, const char *resource);
/* Parses one PCI device id ("0x56a0", "56a0"). */
int resources_parse_pci_id(const char *s, uint16_t *ret);
