/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* paths.c — root directories with test overrides (see paths.h). */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/paths.h"
#include "common/util.h"

const char *paths_sysfs_root(void) {
        const char *e = getenv("KGPU_SYSFS_ROOT");

        return isempty(e) ? "/sys" : e;
}

const char *paths_dev_root(void) {
        const char *e = getenv("KGPU_DEV_ROOT");

        return isempty(e) ? "/dev" : e;
}

int paths_open_sysfs_root(void) {
        int fd = open(paths_sysfs_root(), O_PATH|O_DIRECTORY|O_CLOEXEC);

        return fd < 0 ? negative_errno() : fd;
}

int mkdir_p(const char *path, unsigned mode) {
        _cleanup_free_ char *p = NULL;

        if (!path || path[0] != '/')
                return -EINVAL;
        p = strdup(path);
        if (!p)
                return -ENOMEM;
        for (char *s = p + 1; ; s++) {
                if (*s == '/' || *s == 0) {
                        char c = *s;

                        *s = 0;
                        if (mkdir(p, mode) < 0 && errno != EEXIST)
                                return negative_errno();
                        *s = c;
                        if (c == 0)
                                break;
                }
        }
        return 0;
}
