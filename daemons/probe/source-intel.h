/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * source-intel.h — the Intel GPU source (i915, xe): libudev and sysfs (udev-scan.c),
 * SR-IOV PFs and VFs, the GPU_MEMORY_* policy, Intel's labels (labels-intel.c) and CDI
 * spec (cdi-intel.c).
 *
 * Contract: Intel GPUs are found by enumerating the drm subsystem with the manager's
 * libudev context (m->udev) and followed through the manager's udev monitor: add,
 * change, bind and move events (re)read the GPU, remove events mark it Unhealthy
 * "removed" (it stays exported). A GPU that a rescan no longer finds is marked the same
 * way. A served SR-IOV PF whose VFs get enabled turns Unhealthy (GPU_REASON_SRIOV_PF);
 * once they are disabled it is read as a GPU again. Configuration:
 * intel.memoryOverride / intel.memoryReserved (checked, -EINVAL naming the key) and
 * intel.pciGroupingLevel (labels).
 */
#pragma once

#include "daemons/probe/source.h"

extern const GpuSource gpu_source_intel;

/* Re-reads the SR-IOV PF at pf_address after one of its VFs came or went: a served PF
 * that has VFs enabled now turns Unhealthy (reason GPU_REASON_SRIOV_PF), one whose VFs
 * are disabled is read as a GPU again. Returns 1 if anything changed. (Named after the
 * manager's table it updates, as the tests know it.) */
int manager_recheck_pf(Manager *m, const char *pf_address);
