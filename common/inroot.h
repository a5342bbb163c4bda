/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * inroot.h — paths looked up inside another root directory (a driver root, a container's
 * root file system) without ever leaving it: every symlink met on the way, absolute or
 * relative, is resolved as if that root were "/" (Linux openat2() with RESOLVE_IN_ROOT,
 * kernel 5.6 or later), "/proc/self/..."-style magic links are refused. Used by the probe
 * (the NVIDIA driver root) and by kgpu-cdi-hook (the container's root), so both files
 * are libc only.
 *
 * Functions return 0 or a file descriptor, or a negative errno (-ENOSYS on a kernel
 * without openat2()).
 */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

/* Longest path taken. */
#define INROOT_PATH_MAX 4095U

/* An O_PATH|O_DIRECTORY descriptor of root (absolute; symlinks in it are followed: the
 * root itself is the caller's). */
int inroot_open_root(const char *root);

/* openat2(root_fd, path, flags, mode, RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS); path is
 * taken relative to the root whether or not it starts with '/'. O_CLOEXEC is added. */
int inroot_openat(int root_fd, const char *path, int flags, mode_t mode);

/* The path, inside the root, of what path names once every symlink is resolved in the
 * root ("/lib/x86_64-linux-gnu/libcuda.so.1" -> "/usr/lib/x86_64-linux-gnu/libcuda.so.
 * 550.54.15"); read back through /proc/self/fd. */
int inroot_resolve(int root_fd, const char *path, char **ret);

/* The same resolution without openat2() and /proc, one component at a time (what
 * inroot_openat() and inroot_resolve() fall back to on kernels before 5.6 and under
 * valgrind); the path must exist. Exported so tests compare it with openat2(). */
int inroot_resolve_by_hand(int root_fd, const char *path, char **ret);

/* Opens the directory path inside the root, creating the missing ones (mode) one by one,
 * each created in its resolved parent. Returns an O_PATH|O_DIRECTORY descriptor. */
int inroot_mkdir_p(int root_fd, const char *path, mode_t mode);

/* Whether path is absolute and plain: no empty, "." or ".." component, no trailing '/',
 * at most INROOT_PATH_MAX bytes, no control characters. "/" itself is not. */
bool inroot_path_is_plain(const char *path);
