/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * config-overlay.h — named NVIDIA configs: kgpu.yaml with its NVIDIA settings replaced by
 * those of one file of nvidiaConfigs.directory, the way the NVIDIA device plugin's config
 * manager puts one of several named configs in force on a node.
 *
 * A name is what the node label cluster.configLabel says: 1 to CONFIG_NAME_MAX bytes of
 * [A-Za-z0-9._-], not starting with '.' (so never "..data" or a dot file of a mounted
 * ConfigMap, never a path). Its file is <directory>/<name>.yaml, or <directory>/<name>
 * when there is no such file (a ConfigMap's keys as upstream names them). The file is
 * opened inside the directory only: every symlink on the way (a kubelet ConfigMap mount
 * is <name> -> ..data/<name>, ..data -> ..<timestamp>) is resolved as if the directory
 * were "/" (common/inroot.h), so nothing outside it is ever read; it must be a regular
 * file of at most 1 MiB.
 *
 * The named file holds the NVIDIA device plugin's `version: v1` settings only (version,
 * flags, sharing, resources, imex, health; a newer plugin's unknown top-level keys are
 * warned about and ignored as in kgpu.yaml). They replace kgpu.yaml's NVIDIA settings as
 * a whole (a key the named file leaves out has its default, as upstream, where the named
 * file is the plugin's whole config file); the environment and the command line still
 * win over both. A kgpu key in a named file (logLevel, intel.*, nvidia.*, ...) is an error
 * naming file:line:key.
 *
 * Errors: -ENOENT (no such config: unknown name), -EINVAL (invalid name, not a regular
 * file, or a file refused, *ret_error "FILE:LINE: KEY: what"), -EFBIG, -ENOMEM; other
 * negative errnos from opening the directory or reading. *ret_error is set on every
 * error but -ENOMEM.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "common/config.h"

#define CONFIG_NAME_MAX 253U    /* a ConfigMap key's limit; label values are at most 63 */

bool config_name_valid(const char *name);

/* Reads the named config's text (*ret_text NUL-terminated, *ret_len bytes) and the path
 * it was read from (<directory>/<file name>, for messages). */
int config_named_read(const char *directory, const char *name,
                      char **ret_text, size_t *ret_len, char **ret_path, char **ret_error);

/* config_load() with the named config over kgpu.yaml; name NULL or "": config_load(). */
int config_load_named(const char *config_path, const ConfigOverride *overrides, size_t n_overrides,
                      const char *directory, const char *name, Config **ret, char **ret_error);

/* kgpu.yaml alone, then, when name is not empty, with the named config of the directory
 * kgpu.yaml (or the environment, or the command line) names: what the broker's
 * NodeConfig puts in force, for the probe. */
int config_load_selected(const char *config_path, const ConfigOverride *overrides, size_t n_overrides,
                         const char *name, Config **ret, char **ret_error);
