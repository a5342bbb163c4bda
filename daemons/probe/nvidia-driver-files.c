/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-driver-files.c — the driver's files for the CDI spec (see nvidia-driver-files.h).
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/inroot.h"
#include "common/util.h"
#include "daemons/probe/ldcache.h"
#include "daemons/probe/nvidia-driver-files.h"

static const char *const binaries[] = {
        "nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
        "nvidia-cuda-mps-control", "nvidia-cuda-mps-server",
};
static const char *const binary_dirs[] = {
        "/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/nvidia/bin",
};
static const char *const ipc_paths[] = {
        "/var/run/nvidia-persistenced/socket", "/var/run/nvidia-fabricmanager/socket", "/tmp/nvidia-mps",
};
/* The development names NVIDIA links to the soname (name, soname). */
static const char *const dev_links[][2] = {
        { "libcuda.so", "libcuda.so.1" },
        { "libnvidia-opticalflow.so", "libnvidia-opticalflow.so.1" },
};

NvidiaDriverFiles *nvidia_driver_files_free(NvidiaDriverFiles *f) {
        if (!f)
                return NULL;
        for (size_t i = 0; i < f->n_mounts; i++) {
                free(f->mounts[i].host_path);
                free(f->mounts[i].container_path);
        }
        free(f->mounts);
        free(f->version);
        strv_free(f->links);
        strv_free(f->ld_folders);
        free(f);
        return NULL;
}

bool nvidia_driver_version_is_valid(const char *s) {
        size_t n;

        if (!s || s[0] < '0' || s[0] > '9')
                return false;
        n = strspn(s, "0123456789.");
        return n == strlen(s) && n < 32 && !strstr(s, "..");
}

typedef struct Finder {
        const char *root;       /* "" for "/" */
        int root_fd;
        NvidiaDriverFiles *f;
        size_t allocated;
} Finder;

static bool have_mount(const Finder *x, const char *container_path) {
        for (size_t i = 0; i < x->f->n_mounts; i++)
                if (streq(x->f->mounts[i].container_path, container_path))
                        return true;
        return false;
}

/* Adds a mount of the resolved in-root path `resolved` at container_path. */
static int add_mount(Finder *x, const char *resolved, const char *container_path, NvidiaDriverFileKind kind) {
        NvidiaDriverMount *m;
        int r;

        if (have_mount(x, container_path))
                return 0;
        r = array_reserve_bounded((void **) &x->f->mounts, &x->allocated, x->f->n_mounts + 1,
                                  sizeof(NvidiaDriverMount), NVIDIA_DRIVER_MOUNTS_MAX);
        if (r < 0)
                return r;
        m = &x->f->mounts[x->f->n_mounts];
        if (asprintf(&m->host_path, "%s%s", x->root, resolved) < 0) {
                m->host_path = NULL;
                return -ENOMEM;
        }
        m->container_path = strdup(container_path);
        if (!m->container_path) {
                m->host_path = mfree(m->host_path);
                return -ENOMEM;
        }
        m->kind = kind;
        x->f->n_mounts++;
        return 0;
}

/* stat of path in the root (symlinks followed inside it). */
static int stat_in_root(const Finder *x, const char *path, struct stat *st) {
        _cleanup_close_ int fd = inroot_openat(x->root_fd, path, O_PATH, 0);

        if (fd < 0)
                return fd;
        return fstat(fd, st) < 0 ? -errno : 0;
}

static int read_ld_cache(const Finder *x, char **ret, size_t *ret_size) {
        _cleanup_close_ int fd = inroot_openat(x->root_fd, "/etc/ld.so.cache", O_RDONLY|O_NOCTTY, 0);
        _cleanup_free_ char *buf = NULL;
        struct stat st;
        size_t got = 0;

        if (fd < 0)
                return fd;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EBADF;
        if (st.st_size > (off_t) LDCACHE_FILE_MAX)
                return -EFBIG;
        buf = malloc((size_t) st.st_size + 1);
        if (!buf)
                return -ENOMEM;
        while (got < (size_t) st.st_size) {
                ssize_t n = read(fd, buf + got, (size_t) st.st_size - got);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                got += (size_t) n;
        }
        *ret = TAKE_PTR(buf);
        *ret_size = got;
        return 0;
}

static bool ends_with(const char *s, const char *suffix) {
        size_t a = strlen(s), b = strlen(suffix);

        return a >= b && streq(s + a - b, suffix);
}

static int add_link(Finder *x, const char *target, const char *dir, const char *name) {
        _cleanup_free_ char *l = NULL;

        if (asprintf(&l, "%s::%s/%s", target, dir, name) < 0)
                return -ENOMEM;
        if (strv_contains(x->f->links, l))
                return 0;
        return strv_consume(&x->f->links, TAKE_PTR(l));
}

static int find_libraries(Finder *x) {
        _cleanup_free_ char *data = NULL, *suffix = NULL;
        _cleanup_free_ LdCacheEntry *e = NULL;
        size_t size = 0, n = 0;
        int r;

        r = read_ld_cache(x, &data, &size);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        r = ldcache_parse(data, size, ldcache_host_flags(), &e, &n);
        if (r < 0)
                return r;
        if (asprintf(&suffix, ".so.%s", x->f->version) < 0)
                return -ENOMEM;

        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *resolved = NULL, *dir = NULL;
                const char *base;
                struct stat st;

                if (!inroot_path_is_plain(e[i].value) || strchr(e[i].key, '/'))
                        continue;
                if (inroot_resolve(x->root_fd, e[i].value, &resolved) < 0 ||
                    stat_in_root(x, resolved, &st) < 0 || !S_ISREG(st.st_mode))
                        continue;
                base = strrchr(resolved, '/') + 1;
                if (!ends_with(base, suffix) || base == resolved + 1)
                        continue;
                dir = strndup(resolved, (size_t) (base - 1 - resolved));
                if (!dir)
                        return -ENOMEM;
                r = add_mount(x, resolved, resolved, NVIDIA_FILE_LIBRARY);
                if (r < 0)
                        return r;
                if (!strv_contains(x->f->ld_folders, dir) && (r = strv_extend(&x->f->ld_folders, dir)) < 0)
                        return r;
                /* The cache's name for it (the soname) as a link beside it. */
                if (!streq(e[i].key, base) && !ends_with(e[i].key, ".so") && (r = add_link(x, base, dir, e[i].key)) < 0)
                        return r;
                for (size_t k = 0; k < ELEMENTSOF(dev_links); k++)
                        if (streq(e[i].key, dev_links[k][1]) && (r = add_link(x, dev_links[k][1], dir, dev_links[k][0])) < 0)
                                return r;
        }
        return 0;
}

static int find_binaries(Finder *x) {
        int r;

        for (size_t i = 0; i < ELEMENTSOF(binaries); i++)
                for (size_t k = 0; k < ELEMENTSOF(binary_dirs); k++) {
                        _cleanup_free_ char *p = NULL, *resolved = NULL;
                        struct stat st;

                        if (asprintf(&p, "%s/%s", binary_dirs[k], binaries[i]) < 0)
                                return -ENOMEM;
                        if (inroot_resolve(x->root_fd, p, &resolved) < 0 || stat_in_root(x, resolved, &st) < 0 ||
                            !S_ISREG(st.st_mode) || !(st.st_mode & 0111))
                                continue;
                        r = add_mount(x, resolved, p, NVIDIA_FILE_BINARY);
                        if (r < 0)
                                return r;
                        break;
                }
        return 0;
}

static int find_ipc(Finder *x) {
        int r;

        for (size_t i = 0; i < ELEMENTSOF(ipc_paths); i++) {
                _cleanup_free_ char *resolved = NULL;
                struct stat st;

                if (inroot_resolve(x->root_fd, ipc_paths[i], &resolved) < 0 || stat_in_root(x, resolved, &st) < 0 ||
                    !(S_ISSOCK(st.st_mode) || S_ISDIR(st.st_mode)))
                        continue;
                r = add_mount(x, resolved, resolved, NVIDIA_FILE_IPC);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int find_firmware(Finder *x) {
        _cleanup_free_ char *p = NULL, *dir = NULL;
        _cleanup_close_ int fd = -EBADF;
        DIR *d;
        int r = 0;

        if (asprintf(&p, "/lib/firmware/nvidia/%s", x->f->version) < 0)
                return -ENOMEM;
        if (inroot_resolve(x->root_fd, p, &dir) < 0)
                return 0;
        fd = inroot_openat(x->root_fd, dir, O_RDONLY|O_DIRECTORY, 0);
        if (fd < 0)
                return 0;
        d = fdopendir(fd);
        if (!d)
                return -errno;
        TAKE_FD(fd);
        for (struct dirent *de; (de = readdir(d)); ) {
                _cleanup_free_ char *f = NULL;

                if (fnmatch("gsp*.bin", de->d_name, 0) != 0 || (de->d_type != DT_REG && de->d_type != DT_UNKNOWN))
                        continue;
                if (asprintf(&f, "%s/%s", streq(dir, "/") ? "" : dir, de->d_name) < 0) {
                        r = -ENOMEM;
                        break;
                }
                if (de->d_type == DT_UNKNOWN) {
                        struct stat st;

                        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                                continue;
                }
                r = add_mount(x, f, f, NVIDIA_FILE_FIRMWARE);
                if (r < 0)
                        break;
        }
        closedir(d);
        return r;
}

static int mount_cmp(const void *a, const void *b) {
        const NvidiaDriverMount *x = a, *y = b;

        if (x->kind != y->kind)
                return x->kind < y->kind ? -1 : 1;
        return strcmp(x->container_path, y->container_path);
}

int nvidia_driver_files_find(const char *driver_root, const char *version, NvidiaDriverFiles **ret) {
        _cleanup_(nvidia_driver_files_freep) NvidiaDriverFiles *f = NULL;
        _cleanup_close_ int root_fd = -EBADF;
        Finder x = {};
        int r;

        if (!ret || !nvidia_driver_version_is_valid(version))
                return -EINVAL;
        if (isempty(driver_root) || streq(driver_root, "/"))
                driver_root = "";
        else if (driver_root[0] != '/' || strlen(driver_root) > INROOT_PATH_MAX / 2)
                return -EINVAL;
        root_fd = inroot_open_root(driver_root[0] ? driver_root : "/");
        if (root_fd < 0)
                return root_fd;
        f = calloc(1, sizeof(*f));
        if (!f)
                return -ENOMEM;
        f->version = strdup(version);
        if (!f->version)
                return -ENOMEM;
        x = (Finder) { .root = driver_root, .root_fd = root_fd, .f = f };
        /* A root with a trailing slash would give "//" in host paths. */
        if (driver_root[0] && driver_root[strlen(driver_root) - 1] == '/')
                return -EINVAL;

        if ((r = find_libraries(&x)) < 0 || (r = find_binaries(&x)) < 0 || (r = find_ipc(&x)) < 0 ||
            (r = find_firmware(&x)) < 0)
                return r;
        if (f->n_mounts > 1)
                qsort(f->mounts, f->n_mounts, sizeof(NvidiaDriverMount), mount_cmp);
        strv_sort(f->links);
        *ret = TAKE_PTR(f);
        return 0;
}

int nvidia_driver_library_path(const char *driver_root, char **ret) {
        _cleanup_free_ char *data = NULL;
        _cleanup_free_ LdCacheEntry *e = NULL;
        _cleanup_strv_free_ char **dirs = NULL;
        _cleanup_close_ int root_fd = -EBADF;
        Finder x = {};
        size_t size = 0, n = 0;
        int r;

        if (!ret)
                return -EINVAL;
        if (isempty(driver_root) || streq(driver_root, "/")) {
                *ret = NULL;
                return 0;
        }
        if (driver_root[0] != '/' || strlen(driver_root) > INROOT_PATH_MAX / 2)
                return -EINVAL;
        root_fd = inroot_open_root(driver_root);
        if (root_fd < 0)
                return root_fd;
        x = (Finder) { .root = driver_root, .root_fd = root_fd };
        r = read_ld_cache(&x, &data, &size);
        if (r < 0)
                return r;
        r = ldcache_parse(data, size, ldcache_host_flags(), &e, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *resolved = NULL, *dir = NULL;
                char *slash;

                if (!inroot_path_is_plain(e[i].value) || inroot_resolve(root_fd, e[i].value, &resolved) < 0)
                        continue;
                slash = strrchr(resolved, '/');
                if (!slash || slash == resolved || strchr(resolved, ':'))
                        continue;
                if (asprintf(&dir, "%s%.*s", driver_root, (int) (slash - resolved), resolved) < 0)
                        return -ENOMEM;
                if (!strv_contains(dirs, dir) && (r = strv_consume(&dirs, TAKE_PTR(dir))) < 0)
                        return r;
                if (strv_length(dirs) >= 64)
                        break;
        }
        if (!dirs) {
                *ret = NULL;
                return 0;
        }
        *ret = strv_join(dirs, ":");
        return *ret ? 0 : -ENOMEM;
}

int nvidia_tool_env(const char *driver_root, const char *tool, char ***ret) {
        _cleanup_strv_free_ char **env = NULL;
        _cleanup_free_ char *path = NULL, *var = NULL;
        const char *rest;
        int r;

        *ret = NULL;
        if (isempty(driver_root) || streq(driver_root, "/") || !tool)
                return 0;
        rest = startswith(tool, driver_root);
        if (!rest || rest[0] != '/')
                return 0;               /* a tool configured elsewhere runs as it is */
        r = nvidia_driver_library_path(driver_root, &path);
        if (r < 0)
                return r;
        if (!path)
                return -ENOENT;
        for (char **e = environ; e && *e; e++)
                if (!startswith(*e, "LD_LIBRARY_PATH=") && (r = strv_extend(&env, *e)) < 0)
                        return r;
        if (asprintf(&var, "LD_LIBRARY_PATH=%s", path) < 0)
                return -ENOMEM;
        r = strv_consume(&env, TAKE_PTR(var));
        if (r < 0)
                return r;
        *ret = TAKE_PTR(env);
        return 0;
}
