/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * labels-intel.h — Intel GPU node labels, as the Intel GPU plugin's labeler and its NFD
 * rules define them, from the probe's GPU list (pure: no I/O, no logging).
 *
 * Input: the GPUs (any order; only Healthy ones with a card node count, since the Intel
 * labeler only sees cards present in sysfs) and the node's Intel display PCI functions
 * (udev_scan_pci_display_functions(): what NFD's pci.device feature matches, whatever
 * their driver or DRM nodes). Output: a sorted strv of "name=value" lines, the content
 * of an NFD local feature file:
 *   gpu.intel.com/millicores      1000 x GPUs
 *   gpu.intel.com/memory.max      sum of MemoryBytes (GPU_MEMORY_* already applied)
 *   gpu.intel.com/tiles           sum of tiles
 *   gpu.intel.com/cards           "card0.card1..." first chunk only (deprecated)
 *   gpu.intel.com/gpu-numbers     "0.1.2", split (below) into gpu-numbers2, 3, ...
 *   gpu.intel.com/numa-gpu-map    "0-0.1_1-2.3" (GPUs with a NUMA node), split likewise
 *   gpu.intel.com/pci-groups      with pci_grouping_level > 0: GPUs grouped by the first
 *                                 level components of their sysfs path from "pci*", groups
 *                                 sorted, "_" between groups, "." within; split likewise
 * and from the PCI functions, as Intel's NFD rules (platform-labeling-rules) make them:
 *   gpu.intel.com/device-id.<class>-<device>.present=true for each device id of classes
 *                                 0300 and 0380;
 *   gpu.intel.com/device-id.<class>-<device>.count=N once per class: N is every function
 *                                 of the class (an SR-IOV PF and its VFs count, 5 on a Flex
 *                                 170 with 4 VFs), <device> the id of the first function
 *                                 in PCI address order (NFD's "index .pci.device 0");
 *   gpu.intel.com/family, product, device.count for Max 1100/1550, the Max series, Flex
 *                                 140/170 and the A series (device.count: the functions
 *                                 with that class and id).
 * GPUs are ordered by card name compared as strings ("card10" < "card2"), the order in
 * which the Intel labeler reads /sys/class/drm. Splitting: chunks of at most 63
 * characters cut just after the last alphanumeric character, chunks 2.. start with "Z"
 * (62 characters of value). No GPU and no PCI function: no line at all (*ret is NULL), so
 * a node without an Intel GPU carries no gpu.intel.com/ label.
 * Functions return 0 or a negative errno (-ENOMEM, -EINVAL for an unsplittable value).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "daemons/probe/gpu.h"

#define LABELS_INTEL_PREFIX "gpu.intel.com/"
#define LABELS_INTEL_VALUE_MAX 63
/* Highest GPU_PCI_GROUPING_LEVEL honoured. */
#define LABELS_INTEL_PCI_LEVEL_MAX 64

/* One Intel PCI function of a display class. */
typedef struct LabelsIntelPci {
        char address[16];       /* "0000:4d:00.1" */
        uint32_t pci_class;     /* 0x038000 */
        uint16_t device_id;
} LabelsIntelPci;

/* Splits value into chunks as described above; *ret is a strv of at least one chunk. */
int labels_intel_split(const char *value, size_t max_len, const char *prefix, char ***ret);

/* Builds the label lines for gpus[0..n-1] and the PCI functions pci[0..n_pci-1] (sorted by
 * address). */
int labels_intel_build(Gpu * const *gpus, size_t n, const LabelsIntelPci *pci, size_t n_pci,
                       unsigned pci_grouping_level, char ***ret);

/* The "cardN" name of a GPU's card node (from its syspath), or NULL. */
const char *labels_intel_card_name(const Gpu *g);

/* Parses GPU_PCI_GROUPING_LEVEL: decimal 0..LABELS_INTEL_PCI_LEVEL_MAX. */
int labels_intel_parse_pci_level(const char *s, unsigned *ret);
