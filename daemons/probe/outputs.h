/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * outputs.h — the probe's generated files as a set: where they go, the one way they are
 * written, and taking away what kgpu wrote. Their content comes from one module per
 * file: labels.c (the NFD local feature file, every source's labels), cdi-intel.c and
 * cdi-nvidia.c (one CDI spec per GPU source, named by the source's cdi_file).
 *
 * Every file is written atomically by write_file_atomic_at() (common/util.h): a hidden
 * temp file (".NAME.<random>", which neither NFD nor CDI loaders read) in the target
 * directory, fsync, rename over the target, fsync of the directory; a reader sees the
 * old or the new content, never a mix. Missing directories are created (0755). Content
 * is built by pure functions so tests can compare it.
 *
 * The files follow kgpu's life: written only by a probe that serves (manager.h), kept
 * when it stops or restarts, and taken away when there is nothing to say (no GPU of a
 * kind) or when the package is removed (kgpu-probed --remove-outputs). Removal touches
 * only kgpu's own files: the CDI specs by their fixed names (each source's cdi_file),
 * the feature file only when every line of it is a label kgpu writes (under a source's
 * label_prefix).
 * Functions return 0 (or a count) or a negative errno and do not log; callers log once.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define OUTPUTS_FEATURE_FILE_DEFAULT "/etc/kubernetes/node-feature-discovery/features.d/kgpu"
#define OUTPUTS_CDI_DIRECTORY_DEFAULT "/var/run/cdi"
/* The cdiVersion of every CDI spec kgpu writes. */
#define OUTPUTS_CDI_VERSION "0.5.0"

/* Writes data to path atomically (see above), mode 0644. path must be absolute. */
int outputs_write_atomic(const char *path, const char *data, size_t len);

/* Whether name is a valid CDI device name: letters, digits, '_', '-', '.', ':', starting
 * alphanumeric, at most 128 characters ("0000:03:00.0" is one). */
bool outputs_cdi_name_is_valid(const char *name);

/* Largest feature file read back before removing it. */
#define OUTPUTS_FEATURE_FILE_MAX (1024 * 1024)

/* True when text is a feature file kgpu writes: one or more lines, each "name=value"
 * with a name under a source's label_prefix (gpu.intel.com/, nvidia.com/), each ended
 * by a newline. */
bool outputs_feature_text_is_ours(const char *text, size_t len);

/* Removes the feature file at path if it is kgpu's (above). Returns 1 if removed, 0 if
 * there was none, -EEXIST if a file kgpu did not write is there (left alone), -EINVAL
 * for a path that is not absolute, or another negative errno. A symlink is never
 * followed (-ELOOP) and the file is unlinked only if it is still the one that was read. */
int outputs_remove_feature_file(const char *path);

/* Removes kgpu's CDI specs (every source's cdi_file) from directory; other files stay.
 * Returns the number removed or the first negative errno (-EINVAL for a directory that
 * is not absolute). */
int outputs_remove_cdi_specs(const char *directory);
