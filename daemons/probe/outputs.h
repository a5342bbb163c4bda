/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * outputs.h — the probe's generated files: the NFD local feature file with the Intel
 * node labels and the CDI spec for Intel GPUs.
 *
 * Both are written atomically: a hidden temp file (".NAME.XXXXXX", which neither NFD nor
 * CDI loaders read) in the target directory, fsync, rename over the target, fsync of the
 * directory; a reader sees the old or the new content, never a mix. Missing directories
 * are created (0755). Content is built by pure functions so tests can compare it.
 * Functions return 0 or a negative errno and do not log; callers log once.
 */
#pragma once

#include <stddef.h>

#include "common/config.h"
#include "daemons/probe/gpu.h"

#define OUTPUTS_FEATURE_FILE_DEFAULT "/etc/kubernetes/node-feature-discovery/features.d/kgpu"
#define OUTPUTS_CDI_DIRECTORY_DEFAULT "/var/run/cdi"
#define OUTPUTS_CDI_KIND "gpu.intel.com/gpu"
#define OUTPUTS_CDI_FILE "kgpu-intel-gpu.json"
#define OUTPUTS_CDI_VERSION "0.5.0"

/* Adds the NVIDIA labels of gpus (labels-nvidia.h; c: NULL or what they read of the
 * config) to the label lines in *labels and sorts them all. */
int outputs_add_nvidia_labels(char ***labels, Gpu * const *gpus, size_t n, const Config *c);

/* Writes data to path atomically (see above). path must be absolute. */
int outputs_write_atomic(const char *path, const char *data, size_t len);

/* The CDI spec (JSON, cdiVersion 0.5.0, kind gpu.intel.com/gpu) with one device per
 * Healthy GPU, named by its id (the PCI address), whose containerEdits.deviceNodes are the
 * GPU's DRM nodes (path and type "c"), in id order. Returns the number of devices. */
int outputs_cdi_spec(Gpu * const *gpus, size_t n, char **ret);

/* The CDI device name of a GPU id ("0000:03:00.0" is a valid CDI device name). */
bool outputs_cdi_name_is_valid(const char *name);
