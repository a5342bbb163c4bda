/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * outputs.h — the probe's generated files: the NFD local feature file with the Intel
 * node labels and the CDI spec for Intel GPUs.
 *
 * Both are written atomically: a hidden temp file (".NAME.XXXXXX", which neither NFD nor
 * CDI loaders read) in the target directory, fsync, rename over the target, fsync of the
 * directory; a reader sees the old or the new content, never a mix. Missing directories
 * are created (0755). Content is built by pure functions so tests can compare it.
 *
 * The files follow kgpu's life: written only by a probe that serves (manager.h), kept
 * when it stops or restarts, and taken away when there is nothing to say (no GPU of a
 * kind) or when the package is removed (kgpu-probed --remove-outputs). Removal touches
 * only kgpu's own files: the CDI specs by their fixed names (OUTPUTS_CDI_FILE,
 * CDI_NVIDIA_FILE), the feature file only when every line of it is a label kgpu writes.
 * Functions return 0 (or a count) or a negative errno and do not log; callers log once.
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

/* Largest feature file read back before removing it. */
#define OUTPUTS_FEATURE_FILE_MAX (1024 * 1024)

/* True when text is a feature file kgpu writes: one or more lines, each "name=value"
 * with a name under gpu.intel.com/ or nvidia.com/, each ended by a newline. */
bool outputs_feature_text_is_ours(const char *text, size_t len);

/* Removes the feature file at path if it is kgpu's (above). Returns 1 if removed, 0 if
 * there was none, -EEXIST if a file kgpu did not write is there (left alone), -EINVAL
 * for a path that is not absolute, or another negative errno. A symlink is never
 * followed (-ELOOP) and the file is unlinked only if it is still the one that was read. */
int outputs_remove_feature_file(const char *path);

/* Removes kgpu's CDI specs (OUTPUTS_CDI_FILE and CDI_NVIDIA_FILE) from directory; other
 * files stay. Returns the number removed or the first negative errno (-EINVAL for a
 * directory that is not absolute). */
int outputs_remove_cdi_specs(const char *directory);
