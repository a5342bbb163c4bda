/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * config-overlay.c — named NVIDIA configs over kgpu.yaml; see config-overlay.h.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/config-internal.h"
#include "common/config-overlay.h"
#include "common/inroot.h"
#include "common/util.h"

bool config_name_valid(const char *name) {
        size_t n;

        if (!name)
                return false;
        n = strnlen(name, CONFIG_NAME_MAX + 1);
        if (n == 0 || n > CONFIG_NAME_MAX || name[0] == '.')
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = name[i];

                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '-'))
                        return false;
        }
        return true;
}

static int set_error(char **ret_error, int r, const char *fmt, ...) _printf_(3, 4);
static int set_error(char **ret_error, int r, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        if (vasprintf(ret_error, fmt, ap) < 0) {
                *ret_error = NULL;
                r = -ENOMEM;
        }
        va_end(ap);
        return r;
}

/* Opens file inside the directory (contained resolution); -ENOENT when it does not exist. */
static int open_in(int dir_fd, const char *file) {
        /* O_NONBLOCK: a FIFO planted there does not hang the broker; fstat() refuses it. */
        return inroot_openat(dir_fd, file, O_RDONLY|O_NOCTTY|O_NONBLOCK, 0);
}

int config_named_read(const char *directory, const char *name,
                      char **ret_text, size_t *ret_len, char **ret_path, char **ret_error) {
        _cleanup_close_ int dir_fd = -EBADF, fd = -EBADF;
        _cleanup_free_ char *file = NULL, *path = NULL, *text = NULL;
        struct stat st;
        ssize_t n;
        size_t len = 0;

        *ret_error = NULL;
        if (!config_name_valid(name))
                return set_error(ret_error, -EINVAL, "invalid config name: 1 to %u characters of "
                                 "A-Z a-z 0-9 . _ - not starting with '.'", CONFIG_NAME_MAX);
        if (!directory || directory[0] != '/')
                return set_error(ret_error, -EINVAL, "nvidiaConfigs.directory is not set to an absolute path");

        dir_fd = inroot_open_root(directory);
        if (dir_fd < 0) {
                if (dir_fd == -ENOENT || dir_fd == -ENOTDIR)
                        return set_error(ret_error, -ENOENT, "no config named '%s': %s: %s", name, directory,
                                         strerror(-dir_fd));
                return set_error(ret_error, dir_fd, "%s: cannot open: %s", directory, strerror(-dir_fd));
        }
        if (asprintf(&file, "%s.yaml", name) < 0)
                return -ENOMEM;
        fd = open_in(dir_fd, file);
        if (fd == -ENOENT) {
                /* A ConfigMap key as upstream names its configs: no extension. */
                free(file);
                file = strdup(name);
                if (!file)
                        return -ENOMEM;
                fd = open_in(dir_fd, file);
        }
        if (asprintf(&path, "%s/%s", directory, file) < 0)
                return -ENOMEM;
        if (fd == -ENOENT)
                return set_error(ret_error, -ENOENT, "no config named '%s' (neither %s/%s.yaml nor %s/%s exists)",
                                 name, directory, name, directory, name);
        if (fd < 0)
                return set_error(ret_error, fd == -ENOMEM ? -EIO : fd, "%s: cannot open: %s", path,
                                 strerror(-fd));
        if (fstat(fd, &st) < 0)
                return set_error(ret_error, -errno, "%s: cannot stat: %s", path, strerror(errno));
        if (S_ISDIR(st.st_mode))
                return set_error(ret_error, -ENOENT, "no config named '%s': %s is a directory", name, path);
        if (!S_ISREG(st.st_mode))
                return set_error(ret_error, -EINVAL, "%s: not a regular file", path);
        if ((uint64_t) st.st_size > CONFIG_FILE_MAX)
                return set_error(ret_error, -EFBIG, "%s: file too large (over %u bytes)", path, CONFIG_FILE_MAX);
        text = malloc(CONFIG_FILE_MAX + 1);
        if (!text)
                return -ENOMEM;
        /* Read up to the bound whatever fstat said: the file may grow meanwhile. */
        while (len <= CONFIG_FILE_MAX) {
                n = read(fd, text + len, CONFIG_FILE_MAX + 1 - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return set_error(ret_error, -EIO, "%s: read error: %s", path, strerror(errno));
                if (n == 0)
                        break;
                len += (size_t) n;
        }
        if (len > CONFIG_FILE_MAX)
                return set_error(ret_error, -EFBIG, "%s: file too large (over %u bytes)", path, CONFIG_FILE_MAX);
        text[len] = 0;
        *ret_text = TAKE_PTR(text);
        *ret_len = len;
        *ret_path = TAKE_PTR(path);
        return 0;
}

int config_load_named(const char *config_path, const ConfigOverride *overrides, size_t n_overrides,
                      const char *directory, const char *name, Config **ret, char **ret_error) {
        _cleanup_free_ char *text = NULL, *path = NULL;
        size_t len = 0;
        int r;

        if (isempty(name))
                return config_load(config_path, overrides, n_overrides, ret, ret_error);
        r = config_named_read(directory, name, &text, &len, &path, ret_error);
        if (r < 0)
                return r;
        r = config_load_with_overlay(config_path, overrides, n_overrides, text, len, path, ret, ret_error);
        if (r == -ENOENT)
                r = -EIO;       /* kgpu.yaml itself missing: not an unknown name */
        return r;
}

int config_load_selected(const char *config_path, const ConfigOverride *overrides, size_t n_overrides,
                         const char *name, Config **ret, char **ret_error) {
        _cleanup_(config_freep) Config *base = NULL;
        int r;

        r = config_load(config_path, overrides, n_overrides, &base, ret_error);
        if (r < 0 || isempty(name)) {
                if (r >= 0)
                        *ret = TAKE_PTR(base);
                return r;
        }
        return config_load_named(config_path, overrides, n_overrides, base->nvidia_configs_directory, name,
                                 ret, ret_error);
}
