/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * inroot.c — paths inside another root (see inroot.h).
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/inroot.h"
#include "common/util.h"

int inroot_open_root(const char *root) {
        int fd;

        if (isempty(root) || root[0] != '/')
                return -EINVAL;
        fd = open(root, O_PATH|O_DIRECTORY|O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* Without openat2() (kernels before 5.6, valgrind): the same resolution by hand, one
 * component at a time from the root's descriptor, symlinks read with readlinkat() and
 * restarted from the root when absolute, ".." never above the root, at most 40 links.
 * *ret is the resolved path inside the root ("/" for the root itself). */
int inroot_resolve_by_hand(int root_fd, const char *path, char **ret) {
        _cleanup_free_ char *cur = NULL, *todo = NULL;
        size_t cur_len = 0;
        unsigned links = 0;
        char *p;

        cur = calloc(1, INROOT_PATH_MAX + 2);
        todo = strdup(path);
        if (!cur || !todo)
                return -ENOMEM;
        p = todo;
        for (;;) {
                char target[INROOT_PATH_MAX + 1], *comp, *rest;
                struct stat st;
                size_t len;
                ssize_t n;

                p += strspn(p, "/");
                if (!*p)
                        break;
                comp = p;
                len = strcspn(p, "/");
                rest = p + len;
                if (len == 1 && comp[0] == '.') {
                        p = rest;
                        continue;
                }
                if (len == 2 && comp[0] == '.' && comp[1] == '.') {
                        char *slash = strrchr(cur, '/');

                        cur_len = slash ? (size_t) (slash - cur) : 0;
                        cur[cur_len] = 0;
                        p = rest;
                        continue;
                }
                if (cur_len + 1 + len > INROOT_PATH_MAX)
                        return -ENAMETOOLONG;
                cur[cur_len] = '/';
                memcpy(cur + cur_len + 1, comp, len);
                cur[cur_len + 1 + len] = 0;
                if (fstatat(root_fd, cur + 1, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        return -errno;
                if (!S_ISLNK(st.st_mode)) {
                        if (*rest && !S_ISDIR(st.st_mode))
                                return -ENOTDIR;
                        cur_len += 1 + len;
                        p = rest;
                        continue;
                }
                if (++links > 40)
                        return -ELOOP;
                n = readlinkat(root_fd, cur + 1, target, sizeof(target) - 1);
                if (n < 0)
                        return -errno;
                if (n == 0 || (size_t) n >= sizeof(target) - 1)
                        return -EINVAL;
                target[n] = 0;
                cur[cur_len] = 0;               /* back to the link's directory */
                if (target[0] == '/')
                        cur_len = 0, cur[0] = 0;
                {
                        char *next = NULL;

                        if (asprintf(&next, "%s%s", target, rest) < 0)
                                return -ENOMEM;
                        free(todo);
                        todo = p = next;
                }
        }
        if (cur_len == 0)
                strcpy(cur, "/");
        *ret = TAKE_PTR(cur);
        return 0;
}

int inroot_openat(int root_fd, const char *path, int flags, mode_t mode) {
        struct open_how how = {
                .flags = (uint64_t) (flags | O_CLOEXEC),
                .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
                .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
        };
        long fd;

        if (!path || strlen(path) > INROOT_PATH_MAX)
                return -EINVAL;
        while (path[0] == '/')
                path++;
        if (!path[0])
                path = ".";
        fd = syscall(SYS_openat2, root_fd, path, &how, sizeof(how));
        if (fd < 0 && errno == ENOSYS) {
                _cleanup_free_ char *resolved = NULL;
                int r = inroot_resolve_by_hand(root_fd, path, &resolved);

                if (r < 0)
                        return r;
                fd = openat(root_fd, streq(resolved, "/") ? "." : resolved + 1, flags | O_CLOEXEC | O_NOFOLLOW, mode);
        }
        return fd < 0 ? -errno : (int) fd;
}

static int fd_path(int fd, char **ret) {
        char proc[64], buf[PATH_MAX + 1];
        ssize_t n;

        (void) snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        n = readlink(proc, buf, sizeof(buf) - 1);
        if (n < 0)
                return -errno;
        if ((size_t) n >= sizeof(buf) - 1 || buf[0] != '/')
                return -ENAMETOOLONG;
        buf[n] = 0;
        *ret = strdup(buf);
        return *ret ? 0 : -ENOMEM;
}

int inroot_resolve(int root_fd, const char *path, char **ret) {
        _cleanup_free_ char *root = NULL, *full = NULL;
        _cleanup_close_ int fd = -EBADF;
        const char *rest;
        int r;

        fd = inroot_openat(root_fd, path, O_PATH, 0);
        if (fd < 0)
                return fd;
        if ((r = fd_path(root_fd, &root)) < 0 || (r = fd_path(fd, &full)) < 0)
                /* No /proc: the resolution by hand says the same. */
                return inroot_resolve_by_hand(root_fd, path, ret);
        if (streq(root, "/"))
                rest = full;
        else {
                rest = startswith(full, root);
                if (!rest || (rest[0] != '/' && rest[0] != 0))
                        return -EXDEV;          /* not under the root: a bind mount moved it */
        }
        *ret = strdup(rest[0] ? rest : "/");
        return *ret ? 0 : -ENOMEM;
}

int inroot_mkdir_p(int root_fd, const char *path, mode_t mode) {
        _cleanup_free_ char *p = NULL;
        int fd;

        if (!path || strlen(path) > INROOT_PATH_MAX)
                return -EINVAL;
        fd = inroot_openat(root_fd, path, O_PATH|O_DIRECTORY, 0);
        if (fd != -ENOENT)
                return fd;
        p = strdup(path);
        if (!p)
                return -ENOMEM;
        /* Walk the prefixes: open each one in the root, create it in its opened parent. */
        for (char *s = p + strspn(p, "/"); ; ) {
                _cleanup_close_ int parent = -EBADF;
                char *slash = strchr(s, '/'), *name, save = 0;

                if (slash) {
                        save = *slash;
                        *slash = 0;
                }
                name = strrchr(p, '/');
                name = name ? name + 1 : p;
                fd = inroot_openat(root_fd, p, O_PATH|O_DIRECTORY, 0);
                if (fd == -ENOENT) {
                        char *cut = name > p ? name - 1 : NULL;

                        if (cut)
                                *cut = 0;
                        parent = inroot_openat(root_fd, cut ? p : "/", O_PATH|O_DIRECTORY, 0);
                        if (cut)
                                *cut = '/';
                        if (parent < 0)
                                return parent;
                        if (streq(name, ".") || streq(name, ".."))
                                return -EINVAL;
                        if (mkdirat(parent, name, mode) < 0 && errno != EEXIST)
                                return -errno;
                        fd = inroot_openat(root_fd, p, O_PATH|O_DIRECTORY, 0);
                }
                if (fd < 0)
                        return fd;
                if (!slash)
                        return fd;
                safe_close(fd);
                *slash = save;
                s = slash + 1 + strspn(slash + 1, "/");
                if (!*s)
                        return inroot_openat(root_fd, p, O_PATH|O_DIRECTORY, 0);
        }
}

bool inroot_path_is_plain(const char *path) {
        size_t len;

        if (!path || path[0] != '/')
                return false;
        len = strlen(path);
        if (len < 2 || len > INROOT_PATH_MAX || path[len - 1] == '/')
                return false;
        for (const char *c = path; *c; c++)
                if ((unsigned char) *c < 0x20 || *c == 0x7f)
                        return false;
        for (const char *c = path; c; c = strchr(c + 1, '/')) {
                const char *n = c + 1;
                size_t l = strcspn(n, "/");

                if (l == 0 || (l == 1 && n[0] == '.') || (l == 2 && n[0] == '.' && n[1] == '.'))
                        return false;
        }
        return true;
}
