/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * paths.h — root directories with test overrides (documented in docs/ENVIRONMENT.md).
 *
 * KGPU_SYSFS_ROOT  prefix for direct sysfs reads (default "/sys"); libudev itself is
 *                  redirected by umockdev in tests, not by this.
 * KGPU_DEV_ROOT    prefix for /dev lookups done by the probe (default "/dev"); device
 *                  specs sent to the kubelet always name the real /dev path.
 */
#pragma once

/* Returns an O_PATH|O_DIRECTORY fd (caller closes) or negative errno. */
int paths_open_sysfs_root(void);
const char *paths_sysfs_root(void);
const char *paths_dev_root(void);
/* mkdir -p with mode for a path (absolute). */
int mkdir_p(const char *path, unsigned mode);
