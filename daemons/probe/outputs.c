/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * outputs.c — where kgpu's generated files go and how they are written and taken away
 * (see outputs.h).
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemons/probe/outputs.h"
#include "daemons/probe/source.h"

static int mkdir_parents(const char *dir) {
        _cleanup_free_ char *p = strdup(dir);

        if (!p)
                return -ENOMEM;
        for (char *s = p + 1; ; s++) {
                if (*s != '/' && *s != 0)
                        continue;
                char c = *s;

                *s = 0;
                if (mkdir(p, 0755) < 0 && errno != EEXIST)
                        return negative_errno();
                *s = c;
                if (c == 0)
                        break;
        }
        return 0;
}

/* Splits an absolute path into its directory (with the final '/') and its last
 * component, which must name a file. */
static int split_path(const char *path, char **ret_dir, const char **ret_name) {
        const char *name;
        char *dir;

        if (isempty(path) || path[0] != '/' || strlen(path) > 4096)
                return -EINVAL;
        name = strrchr(path, '/') + 1;
        if (isempty(name) || streq(name, ".") || streq(name, ".."))
                return -EINVAL;
        dir = strndup(path, (size_t) (name - path));
        if (!dir)
                return -ENOMEM;
        *ret_dir = dir;
        *ret_name = name;
        return 0;
}

int outputs_write_atomic(const char *path, const char *data, size_t len) {
        _cleanup_free_ char *dir = NULL;
        const char *name;
        int r;

        r = split_path(path, &dir, &name);
        if (r < 0)
                return r;
        r = mkdir_parents(dir);
        if (r < 0)
                return r;
        return write_file_atomic_at(AT_FDCWD, path, data, len, 0644);
}

bool outputs_cdi_name_is_valid(const char *name) {
        /* CDI device names: letters, digits, '_', '-', '.', ':'; starting alphanumeric. */
        if (isempty(name) || strlen(name) > 128)
                return false;
        for (const char *p = name; *p; p++) {
                bool alnum = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9');

                if (p == name && !alnum)
                        return false;
                if (!alnum && !strchr("_-.:", *p))
                        return false;
        }
        return true;
}

bool outputs_feature_text_is_ours(const char *text, size_t len) {
        size_t i = 0;

        if (!text || len == 0 || text[len - 1] != '\n')
                return false;
        while (i < len) {
                const char *line = text + i, *end = memchr(line, '\n', len - i);
                const char *eq, *name;

                /* end is never NULL: the text ends with a newline. */
                if (end == line || memchr(line, 0, (size_t) (end - line)))
                        return false;
                eq = memchr(line, '=', (size_t) (end - line));
                if (!eq)
                        return false;
                name = NULL;
                for (size_t k = 0; !name && k < gpu_sources_count; k++) {
                        const char *prefix = gpu_sources[k]->label_prefix;

                        if (prefix && strncmp(line, prefix, strlen(prefix)) == 0)
                                name = line + strlen(prefix);
                }
                if (!name)
                        return false;
                if (name >= eq)         /* a prefix with no name after it */
                        return false;
                i = (size_t) (end - text) + 1;
        }
        return true;
}

/* Splits an absolute path into its directory (opened) and its last component. */
static int open_parent(const char *path, int *ret_fd, const char **ret_name) {
        _cleanup_free_ char *dir = NULL;
        const char *name;
        int fd, r;

        r = split_path(path, &dir, &name);
        if (r < 0)
                return r;
        fd = open(dir, O_RDONLY|O_DIRECTORY|O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        *ret_fd = fd;
        *ret_name = name;
        return 0;
}

int outputs_remove_feature_file(const char *path) {
        _cleanup_close_ int dir_fd = -EBADF, fd = -EBADF;
        _cleanup_free_ char *text = NULL;
        struct stat st, now;
        const char *name;
        size_t n = 0;
        int r;

        r = open_parent(path, &dir_fd, &name);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        fd = openat(dir_fd, name, O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? 0 : negative_errno();
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode) || st.st_size > OUTPUTS_FEATURE_FILE_MAX)
                return -EEXIST;
        text = malloc((size_t) st.st_size + 1);
        if (!text)
                return -ENOMEM;
        while (n < (size_t) st.st_size) {
                ssize_t k = read(fd, text + n, (size_t) st.st_size - n);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return negative_errno();
                if (k == 0)
                        break;
                n += (size_t) k;
        }
        if (!outputs_feature_text_is_ours(text, n))
                return -EEXIST;
        /* Still the file that was read (not replaced since)? */
        if (fstatat(dir_fd, name, &now, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : negative_errno();
        if (now.st_dev != st.st_dev || now.st_ino != st.st_ino)
                return -EEXIST;
        if (unlinkat(dir_fd, name, 0) < 0)
                return errno == ENOENT ? 0 : negative_errno();
        (void) fsync(dir_fd);
        return 1;
}

int outputs_remove_cdi_specs(const char *directory) {
        _cleanup_close_ int dir_fd = -EBADF;
        int n = 0;

        if (isempty(directory) || directory[0] != '/')
                return -EINVAL;
        dir_fd = open(directory, O_RDONLY|O_DIRECTORY|O_CLOEXEC);
        if (dir_fd < 0)
                return errno == ENOENT ? 0 : negative_errno();
        for (size_t i = 0; i < gpu_sources_count; i++) {
                if (!gpu_sources[i]->cdi_file)
                        continue;
                if (unlinkat(dir_fd, gpu_sources[i]->cdi_file, 0) < 0) {
                        if (errno == ENOENT)
                                continue;
                        return negative_errno();
                }
                n++;
        }
        if (n > 0)
                (void) fsync(dir_fd);
        return n;
}
