/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-driver-files.h — what of an NVIDIA driver installation a container needs, found
 * the way NVIDIA's own CDI generator (nvidia-ctk cdi generate) finds it, for the CDI spec
 * (cdi-nvidia.h):
 * - libraries: every entry of <driver root>/etc/ld.so.cache (ldcache.h) of the host's
 *   ABI whose file, once its symlinks are resolved inside the driver root, is named
 *   "*.so.<driver version>" (libcuda.so.550.54.15, libnvidia-ml.so.550.54.15, ...);
 *   with the cache's other names of that file as links beside it ("libcuda.so.1 ->
 *   libcuda.so.550.54.15"), plus "libcuda.so -> libcuda.so.1" and
 *   "libnvidia-opticalflow.so -> libnvidia-opticalflow.so.1" as NVIDIA adds, and their
 *   directories as the folders of the container's ld cache;
 * - binaries: nvidia-smi, nvidia-debugdump, nvidia-persistenced, nvidia-cuda-mps-control,
 *   nvidia-cuda-mps-server, the first executable one of each in the driver root's
 *   /usr/bin, /usr/sbin, /bin, /sbin, /usr/local/nvidia/bin;
 * - IPC: /var/run/nvidia-persistenced/socket, /var/run/nvidia-fabricmanager/socket and
 *   /tmp/nvidia-mps of the driver root, those that exist;
 * - firmware: /lib/firmware/nvidia/<version>/gsp*.bin of the driver root.
 * Every path is resolved inside the driver root (inroot.h: a symlink can never lead out
 * of it); a mount's containerPath is the resolved path (binaries: the path searched),
 * its hostPath the same under the driver root. The version must be digits and dots
 * (it comes from nvidia-smi); anything else is -EINVAL. A driver root without an ld
 * cache gives no libraries (not an error: the other files are still found).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "common/cleanup.h"

#define NVIDIA_DRIVER_MOUNTS_MAX 1024U

typedef enum NvidiaDriverFileKind {
        NVIDIA_FILE_LIBRARY,
        NVIDIA_FILE_BINARY,
        NVIDIA_FILE_IPC,
        NVIDIA_FILE_FIRMWARE,
} NvidiaDriverFileKind;

typedef struct NvidiaDriverMount {
        char *host_path;
        char *container_path;
        NvidiaDriverFileKind kind;
} NvidiaDriverMount;

typedef struct NvidiaDriverFiles {
        char *version;
        NvidiaDriverMount *mounts;      /* sorted: kind, then container path */
        size_t n_mounts;
        char **links;                   /* "TARGET::LINK" (LINK absolute, in the container) */
        char **ld_folders;              /* directories of the libraries, in the container */
} NvidiaDriverFiles;

NvidiaDriverFiles *nvidia_driver_files_free(NvidiaDriverFiles *f);
DEFINE_CLEANUP_FUNC(NvidiaDriverFiles, nvidia_driver_files_free);

/* Whether s is a driver version kgpu uses in paths: 1-31 digits and dots, starting with
 * a digit, no "..". */
bool nvidia_driver_version_is_valid(const char *s);

/* Finds the files of driver version under driver_root (NULL or "" is "/"). */
int nvidia_driver_files_find(const char *driver_root, const char *version, NvidiaDriverFiles **ret);

/* How a tool of a driver root (nvidia-smi, nvidia-cuda-mps-control found under
 * flags.nvidiaDriverRoot) finds that root's libraries rather than the host's: the
 * directories of the root's ld cache entries of the host's ABI (resolved inside the
 * root), each as <root><dir>, joined by ':' for LD_LIBRARY_PATH (at most 64). *ret is
 * NULL for the root "/" and for a root without libraries in its cache; -ENOENT without
 * a cache. */
int nvidia_driver_library_path(const char *driver_root, char **ret);

/* The environment a tool found under the driver root runs with (*ret, a strv, caller
 * frees): the probe's own with LD_LIBRARY_PATH replaced by nvidia_driver_library_path(),
 * so the driver container's nvidia-smi loads the driver container's libnvidia-ml. *ret
 * NULL (the probe's environment) for the root "/" and for a tool outside the root (a
 * configured path). -ENOENT (no ld cache) or another error when the root's libraries
 * cannot be named (*ret NULL: the caller says so and runs the tool as it is). */
int nvidia_tool_env(const char *driver_root, const char *tool, char ***ret);
