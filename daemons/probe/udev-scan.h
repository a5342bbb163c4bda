/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * udev-scan.h — Intel GPU discovery with libudev: DRM minors grouped by PCI parent.
 *
 * Only libudev and plain file reads below the syspaths libudev reports are used, so the
 * same code runs against the real /sys and an umockdev testbed. Every sysfs value is
 * parsed by the gpu.h parsers; garbage gives the safe default and a debug message.
 * Functions return a negative errno on failure and never write ret_* then; they log at
 * debug level only.
 */
#pragma once

#include <stddef.h>

#include <libudev.h>

#include "daemons/probe/gpu.h"
#include "daemons/probe/labels-intel.h"

/* udev's by-path links of DRM nodes, and the most kept per GPU. */
#define UDEV_SCAN_BY_PATH_DIR "/dev/dri/by-path/"
#define UDEV_SCAN_BY_PATH_MAX 8

/* Most MEI nodes kept per GPU. */
#define UDEV_SCAN_MEI_MAX 8

/* Most GPUs the probe tracks; further ones are ignored. */
#define UDEV_SCAN_GPUS_MAX 256

/* Whether the driver name is one the Intel source handles ("i915", "xe"). */
bool gpu_driver_is_intel(const char *driver);

/* Reads the GPU behind PCI device pci. Returns 1 and *ret for an Intel GPU (vendor
 * 0x8086, driver i915 or xe) with at least one DRM card or render node, 0 (ret untouched)
 * for anything else, including an SR-IOV PF with sriov_numvfs > 0 (its VFs are GPUs,
 * with PhysicalFunction set from their physfn link). MeiNodes: the devnodes of the mei<N>
 * devices below a "<driver>.mei-*" child of the PCI device. Memory: i915 lmem_total_bytes x
 * tiles; xe the sum of tile<N>/physical_vram_size_bytes (else as i915); memory_known
 * says whether it was read (GPU_MEMORY_* are applied by the caller). */
int udev_scan_read_gpu(struct udev *udev, struct udev_device *pci, Gpu **ret);

/* Enumerates every Intel GPU. *ret is a NULL-terminated array sorted by id; free it with
 * udev_scan_gpus_free(). Returns the number of GPUs. */
int udev_scan_enumerate(struct udev *udev, Gpu ***ret);
Gpu **udev_scan_gpus_free(Gpu **l);

/* Every Intel (vendor 0x8086) PCI function of class 0x0300xx or 0x0380xx, whatever its
 * driver and whether it has DRM nodes (SR-IOV PFs and VFs included): what NFD's pci.device
 * feature matches for Intel's GPU labeling rules. *ret sorted by PCI address (NFD reads
 * /sys/bus/pci/devices in name order); free() it. Returns the number found (at most
 * UDEV_SCAN_GPUS_MAX). */
int udev_scan_pci_display_functions(struct udev *udev, LabelsIntelPci **ret);

/* For a DRM card node (sysname cardN) whose PCI device is no GPU the Intel source serves
 * because of its vendor or driver: returns 1 and *ret, a line for the operator ("card0
 * (0000:00:02.0, vendor 0x1234, driver bochs-drm) ..."); 0 for an Intel GPU (i915, xe)
 * and for anything that is not a card node. */
int udev_scan_describe_skipped(struct udev_device *drm, char **ret);

/* udev_scan_enumerate(), and with ret_skipped (may be NULL) the udev_scan_describe_skipped()
 * lines of the card nodes it skipped (a strv, NULL when none). */
int udev_scan_enumerate_full(struct udev *udev, Gpu ***ret, char ***ret_skipped);

/* The PCI device above a DRM device (new reference), or NULL if there is none. */
struct udev_device *udev_scan_pci_parent(struct udev_device *drm);

/* Counts gt/gt<N> entries below the card's sysfs directory plus device/tile<N> ones,
 * at least 1, at most GPU_TILES_MAX. card_dir_fd: an O_PATH or O_RDONLY directory fd. */
uint32_t udev_scan_count_tiles(int card_dir_fd);
