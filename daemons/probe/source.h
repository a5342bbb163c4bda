/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * source.h — the probe's GPU sources: one small table of operations per vendor.
 *
 * The manager (manager.c) keeps the GPU table, the bus objects and the generated files;
 * it never asks which vendor a GPU belongs to. Everything vendor-specific sits behind
 * one GpuSource: Intel (source-intel.c: libudev and sysfs, SR-IOV, the GPU_MEMORY_*
 * policy) and NVIDIA (source-nvidia.c over nvidia.c: nvidia-smi inventory and health).
 * A third vendor is a new source-<vendor>.c with its table and one entry in
 * gpu_sources[] (source.c); nothing else changes.
 *
 * Contract of the operations (any may be NULL: nothing to do):
 * - new/free: the source's state (data), created by manager_new() in table order and
 *   freed by manager_free(); new() may keep m.
 * - check: validates what the source reads of a configuration before anything changes
 *   (start and reload); -EINVAL and *ret_key (a text naming the key and what was
 *   expected, valid until the next check) refuse it, other errors are failures.
 * - configure: takes the configuration (already checked).
 * - rescan: reads the source's GPUs again and reconciles them with the manager's table
 *   (manager_upsert_gpu(), manager_remove_gpu(), ...); may go on asynchronously.
 * - wait_initial: runs the event loop until the first rescan is complete.
 * - device_event: one udev event of the drm subsystem.
 * - reply_when_done: answers a Rescan call once an asynchronous rescan ended; returns 1
 *   if it took message, 0 when nothing runs.
 * - log_found: the operator's line for a GPU of this source that appeared (NULL: the
 *   manager's generic line).
 * - labels: the node label lines ("name=value", under label_prefix) for gpus.
 * - cdi_write: writes <directory>/<cdi_file> for gpus, or removes it when it would be
 *   empty.
 * Functions return negative errno; the manager logs at the boundary.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <libudev.h>
#include <systemd/sd-bus.h>

#include "common/config.h"
#include "daemons/probe/gpu.h"

typedef struct Manager Manager;

/* Most sources the table holds. */
#define GPU_SOURCES_MAX 8

typedef struct GpuSource {
        const char *name;               /* "Intel", "NVIDIA": for messages */
        const char *vendor;             /* Gpu.vendor of the GPUs it finds */
        const char *label_prefix;       /* the node labels it writes, "gpu.intel.com/" */
        const char *cdi_file;           /* its CDI spec under cdi.specDirectory */
        bool mps;                       /* its GPUs take an MPS control daemon (SetMps, mps.h) */

        int (*new)(Manager *m, void **ret);
        void (*free)(Manager *m, void *data);
        int (*check)(Manager *m, void *data, const Config *c, const char **ret_key);
        int (*configure)(Manager *m, void *data, const Config *c);
        int (*rescan)(Manager *m, void *data);
        int (*wait_initial)(Manager *m, void *data);
        int (*device_event)(Manager *m, void *data, struct udev_device *d);
        int (*reply_when_done)(Manager *m, void *data, sd_bus_message *message);
        void (*log_found)(const Gpu *g);
        int (*labels)(Manager *m, void *data, Gpu * const *gpus, size_t n, char ***ret);
        int (*cdi_write)(Manager *m, void *data, const char *directory, Gpu * const *gpus, size_t n);
} GpuSource;

/* The sources, in the order they are created, configured and rescanned. */
extern const GpuSource * const gpu_sources[];
extern const size_t gpu_sources_count;

/* The source whose GPUs carry this vendor, or NULL. */
const GpuSource *gpu_source_find(const char *vendor);
