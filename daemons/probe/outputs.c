/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * outputs.c — atomic writes of the NFD feature file and the CDI spec (see outputs.h).
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "daemons/probe/cdi-nvidia.h"
#include "daemons/probe/labels-intel.h"
#include "daemons/probe/labels-nvidia.h"
#include "daemons/probe/outputs.h"

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

int outputs_add_nvidia_labels(char ***labels, Gpu * const *gpus, size_t n, const Config *c) {
        _cleanup_strv_free_ char **l = NULL;
        int r;

        r = labels_nvidia_from_gpus(gpus, n, c, &l);
        if (r < 0)
                return r;
        for (char **p = l; p && *p; p++) {
                r = strv_extend(labels, *p);
                if (r < 0)
                        return r;
        }
        strv_sort(*labels);
        return 0;
}

int outputs_write_atomic(const char *path, const char *data, size_t len) {
        _cleanup_free_ char *dir = NULL, *tmp = NULL;
        _cleanup_close_ int dir_fd = -EBADF, fd = -EBADF;
        const char *name;
        int r;

        if (isempty(path) || path[0] != '/' || strlen(path) > 4096)
                return -EINVAL;
        name = strrchr(path, '/') + 1;
        if (isempty(name) || streq(name, ".") || streq(name, ".."))
                return -EINVAL;
        dir = strndup(path, (size_t) (name - path));
        if (!dir)
                return -ENOMEM;
        r = mkdir_parents(dir);
        if (r < 0)
                return r;
        dir_fd = open(dir, O_RDONLY|O_DIRECTORY|O_CLOEXEC);
        if (dir_fd < 0)
                return negative_errno();

        if (asprintf(&tmp, ".%s.XXXXXX", name) < 0)
                return -ENOMEM;
        /* mkostemp needs a path; build it under the directory fd's path. */
        {
                _cleanup_free_ char *full = NULL;

                if (asprintf(&full, "%s%s", dir, tmp) < 0)
                        return -ENOMEM;
                fd = mkostemp(full, O_CLOEXEC);
                if (fd < 0)
                        return negative_errno();
                free(tmp);
                tmp = strdup(full + strlen(dir));
                if (!tmp) {
                        (void) unlink(full);
                        return -ENOMEM;
                }
        }

        for (const char *p = data; len > 0; ) {
                ssize_t k = write(fd, p, len);

                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        r = negative_errno();
                        goto fail;
                }
                p += k;
                len -= (size_t) k;
        }
        if (fchmod(fd, 0644) < 0 || fsync(fd) < 0) {
                r = negative_errno();
                goto fail;
        }
        if (renameat(dir_fd, tmp, dir_fd, name) < 0) {
                r = negative_errno();
                goto fail;
        }
        (void) fsync(dir_fd);
        return 0;
fail:
        (void) unlinkat(dir_fd, tmp, 0);
        return r;
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

/* Device node paths come from udev and were checked (absolute, bounded); JSON-escape
 * the two characters that could still break the document. */
static int json_append_str(char **buf, const char *s) {
        _cleanup_free_ char *e = calloc(1, strlen(s) * 6 + 1);
        size_t k = 0;
        char *n;

        if (!e)
                return -ENOMEM;
        for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
                if (*p == '"' || *p == '\\') {
                        e[k++] = '\\';
                        e[k++] = (char) *p;
                } else if (*p < 0x20) {
                        k += (size_t) sprintf(e + k, "\\u%04x", *p);
                } else
                        e[k++] = (char) *p;
        }
        if (asprintf(&n, "%s\"%s\"", *buf, e) < 0)
                return -ENOMEM;
        free(*buf);
        *buf = n;
        return 0;
}

static int append(char **buf, const char *s) {
        char *n;

        if (asprintf(&n, "%s%s", *buf, s) < 0)
                return -ENOMEM;
        free(*buf);
        *buf = n;
        return 0;
}

int outputs_cdi_spec(Gpu * const *gpus, size_t n, char **ret) {
        _cleanup_free_ char *b = strdup("");
        bool first = true;
        int r, n_devices = 0;

        if (!b)
                return -ENOMEM;
        if ((r = append(&b, "{\n  \"cdiVersion\": \"" OUTPUTS_CDI_VERSION "\",\n"
                            "  \"kind\": \"" OUTPUTS_CDI_KIND "\",\n  \"devices\": [")) < 0)
                return r;

        for (size_t i = 0; i < n; i++) {
                const Gpu *g = gpus[i];

                if (streq(g->vendor, "nvidia"))         /* kgpu-nvidia.yaml (cdi-nvidia.c) */
                        continue;
                if (!streq(g->health, GPU_HEALTHY) || !outputs_cdi_name_is_valid(g->id) ||
                    strv_length(g->device_nodes) == 0)
                        continue;
                if ((r = append(&b, first ? "\n    {\n      \"name\": " : ",\n    {\n      \"name\": ")) < 0 ||
                    (r = json_append_str(&b, g->id)) < 0 ||
                    (r = append(&b, ",\n      \"containerEdits\": {\n        \"deviceNodes\": [")) < 0)
                        return r;
                first = false;
                n_devices++;
                for (size_t k = 0; g->device_nodes[k]; k++) {
                        if ((r = append(&b, k ? ",\n          { \"path\": " : "\n          { \"path\": ")) < 0 ||
                            (r = json_append_str(&b, g->device_nodes[k])) < 0 ||
                            (r = append(&b, ", \"type\": \"c\" }")) < 0)
                                return r;
                }
                if ((r = append(&b, "\n        ]\n      }\n    }")) < 0)
                        return r;
        }
        if ((r = append(&b, first ? "]\n}\n" : "\n  ]\n}\n")) < 0)
                return r;

        *ret = TAKE_PTR(b);
        return n_devices;
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
                if (strncmp(line, LABELS_INTEL_PREFIX, strlen(LABELS_INTEL_PREFIX)) == 0)
                        name = line + strlen(LABELS_INTEL_PREFIX);
                else if (strncmp(line, LABELS_NVIDIA_PREFIX, strlen(LABELS_NVIDIA_PREFIX)) == 0)
                        name = line + strlen(LABELS_NVIDIA_PREFIX);
                else
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
        int fd;

        if (isempty(path) || path[0] != '/' || strlen(path) > 4096)
                return -EINVAL;
        name = strrchr(path, '/') + 1;
        if (isempty(name) || streq(name, ".") || streq(name, ".."))
                return -EINVAL;
        dir = strndup(path, (size_t) (name - path));
        if (!dir)
                return -ENOMEM;
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
        static const char * const names[] = { OUTPUTS_CDI_FILE, CDI_NVIDIA_FILE };
        _cleanup_close_ int dir_fd = -EBADF;
        int n = 0;

        if (isempty(directory) || directory[0] != '/')
                return -EINVAL;
        dir_fd = open(directory, O_RDONLY|O_DIRECTORY|O_CLOEXEC);
        if (dir_fd < 0)
                return errno == ENOENT ? 0 : negative_errno();
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                if (unlinkat(dir_fd, names[i], 0) < 0) {
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
