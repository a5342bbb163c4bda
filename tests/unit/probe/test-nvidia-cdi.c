/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * test-nvidia-cdi.c — what the NVIDIA CDI spec gives a container beyond its device nodes
 * (issue 13): the ld.so.cache reader (daemons/probe/ldcache.c) on a cache the real
 * `ldconfig -r` wrote (tests/data/ldcache/ld.so.cache, see its README) and on every truncation and
 * damage of it; the driver's files found under a driver root (nvidia-driver-files.c),
 * with symlinks that try to lead out of it; the spec text with those files, a device
 * root and the hook (cdi-nvidia.c); and a new driver version giving new files.
 */

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/util.h"
#include "daemons/probe/cdi-nvidia.h"
#include "daemons/probe/gpu.h"
#include "daemons/probe/ldcache.h"
#include "daemons/probe/nvidia-driver-files.h"
#include "daemons/probe/nvidia.h"
#include "tests/unit/test-main.h"

#define VERSION "550.54.15"
#define LIBDIR "/usr/lib/x86_64-linux-gnu"

static char *read_fixture(size_t *ret_size) {
        const char *src = getenv("KGPU_SOURCE_ROOT");
        char path[4096];
        struct stat st;
        char *buf;
        FILE *f;

        ck_assert_ptr_nonnull(src);
        (void) snprintf(path, sizeof(path), "%s/tests/data/ldcache/ld.so.cache", src);
        f = fopen(path, "re");
        ck_assert_msg(f, "%s: %m", path);
        ck_assert_int_eq(fstat(fileno(f), &st), 0);
        buf = malloc((size_t) st.st_size);
        ck_assert_ptr_nonnull(buf);
        ck_assert_uint_eq(fread(buf, 1, (size_t) st.st_size, f), (size_t) st.st_size);
        fclose(f);
        *ret_size = (size_t) st.st_size;
        return buf;
}

static const LdCacheEntry *find_key(const LdCacheEntry *e, size_t n, const char *key) {
        for (size_t i = 0; i < n; i++)
                if (streq(e[i].key, key))
                        return &e[i];
        return NULL;
}

START_TEST(test_ldcache_real) {
        _cleanup_free_ char *data = NULL;
        _cleanup_free_ LdCacheEntry *e = NULL, *all = NULL;
        size_t size, n, n_all;
        const LdCacheEntry *x;

        data = read_fixture(&size);
        ck_assert_int_eq(ldcache_parse(data, size, -1, &all, &n_all), 0);
        ck_assert_int_eq(ldcache_parse(data, size, LDCACHE_FLAG_ELF_LIBC6 | LDCACHE_FLAG_X8664_LIB64, &e, &n), 0);
        /* What ldconfig -p lists for the fixture's root (tests/data/ldcache/README.md). */
        x = find_key(e, n, "libcuda.so.1");
        ck_assert_ptr_nonnull(x);
        ck_assert_str_eq(x->value, LIBDIR "/libcuda.so.1");
        x = find_key(e, n, "libnvidia-ml.so.1");
        ck_assert_ptr_nonnull(x);
        ck_assert_str_eq(x->value, LIBDIR "/libnvidia-ml.so.1");
        /* ldconfig files the soname links only, not the development link libcuda.so. */
        ck_assert_ptr_null(find_key(all, n_all, "libcuda.so"));
        ck_assert_ptr_nonnull(find_key(e, n, "libkgpu-other.so.2"));
        /* The 32-bit library is in the cache but not of the host's ABI. */
        ck_assert_ptr_nonnull(find_key(all, n_all, "libcuda32.so.1"));
        ck_assert_ptr_null(find_key(e, n, "libcuda32.so.1"));
        ck_assert_uint_lt(n, n_all);
}
END_TEST

/* Parses a copy of exactly size bytes (so a read past the end is caught by ASan and
 * valgrind) and checks the contract. */
static int parse_exact(const char *data, size_t size) {
        _cleanup_free_ char *copy = malloc(size ? size : 1);
        _cleanup_free_ LdCacheEntry *e = NULL;
        size_t n = 12345;
        int r;

        ck_assert_ptr_nonnull(copy);
        memcpy(copy, data, size);
        r = ldcache_parse(copy, size, -1, &e, &n);
        if (r < 0) {
                ck_assert_ptr_null(e);
                return r;
        }
        ck_assert_uint_le(n, LDCACHE_ENTRIES_MAX);
        for (size_t i = 0; i < n; i++) {
                ck_assert(e[i].key >= copy && e[i].key < copy + size);
                ck_assert(e[i].value >= copy && e[i].value < copy + size);
                ck_assert_uint_le(strlen(e[i].key), LDCACHE_STRING_MAX);
                ck_assert_uint_le(strlen(e[i].value), LDCACHE_STRING_MAX);
        }
        return (int) n;
}

START_TEST(test_ldcache_hostile) {
        _cleanup_free_ char *data = NULL;
        size_t size;
        int full;

        data = read_fixture(&size);
        full = parse_exact(data, size);
        ck_assert_int_gt(full, 4);
        /* Every truncation: an error or fewer entries, never a read past the end. */
        for (size_t k = 0; k < size; k++) {
                int r = parse_exact(data, k);

                ck_assert(r < 0 || r <= full);
                if (k < 48)
                        ck_assert_int_eq(r, -EINVAL);
        }
        /* Every byte of the header and of the first entries set to 0xff, then to 0. */
        for (size_t k = 0; k < MIN(size, (size_t) 48 + 24 * 4); k++)
                for (int v = 0; v < 2; v++) {
                        _cleanup_free_ char *d = malloc(size);

                        memcpy(d, data, size);
                        d[k] = v ? (char) 0xff : 0;
                        (void) parse_exact(d, size);
                }
        {
                _cleanup_free_ char *d = malloc(size);
                uint32_t big = UINT32_MAX;

                /* nlibs past the file. */
                memcpy(d, data, size);
                memcpy(d + 20, &big, 4);
                ck_assert_int_eq(parse_exact(d, size), -EINVAL);
                /* The other byte order. */
                memcpy(d, data, size);
                d[28] = 3;
                ck_assert_int_eq(parse_exact(d, size), -EBADMSG);
                /* Every string offset of every entry past the end: entries skipped. */
                memcpy(d, data, size);
                for (int i = 0; i < full; i++)
                        memcpy(d + 48 + 24 * i + 4, &big, 4);
                ck_assert_int_eq(parse_exact(d, size), 0);
                /* The last string without its NUL (the file ends inside it). */
                memcpy(d, data, size);
                ck_assert_int_lt(parse_exact(d, size - 1), full + 1);
        }
        /* Not a cache at all. */
        ck_assert_int_eq(parse_exact("glibc-ld.so.cache1.0", 20), -EINVAL);
        ck_assert_int_eq(parse_exact("", 0), -EINVAL);
}
END_TEST

START_TEST(test_ldcache_old_format) {
        _cleanup_free_ char *data = NULL, *d = NULL;
        size_t size, old = 16 + 2 * 12, start = (old + 7) & ~(size_t) 7;
        uint32_t two = 2;

        /* An old-format block of two entries ahead of the new cache, as glibc before 2.32
         * wrote by default: the new one is found after it. */
        data = read_fixture(&size);
        d = calloc(1, start + size);
        ck_assert_ptr_nonnull(d);
        memcpy(d, LDCACHE_OLD_MAGIC, strlen(LDCACHE_OLD_MAGIC));
        memcpy(d + 12, &two, 4);
        memcpy(d + start, data, size);
        ck_assert_int_eq(parse_exact(d, start + size), parse_exact(data, size));
        /* An old-format block that claims more entries than the file holds. */
        memcpy(d + 12, &(uint32_t) { 1000000 }, 4);
        ck_assert_int_eq(parse_exact(d, start + size), -EINVAL);
}
END_TEST

/* --- a driver root -------------------------------------------------------------------- */

static char root[] = "/tmp/test-nvidia-cdi.XXXXXX";
static char outside[] = "/tmp/test-nvidia-cdi-out.XXXXXX";

static void mkfile(const char *rel, mode_t mode) {
        char p[4096];
        int fd;

        (void) snprintf(p, sizeof(p), "%s%s", root, rel);
        fd = open(p, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, mode);
        ck_assert_msg(fd >= 0, "%s: %m", p);
        ck_assert_int_eq(write(fd, "x", 1), 1);
        ck_assert_int_eq(fchmod(fd, mode), 0);
        close(fd);
}

static void mklink(const char *target, const char *rel) {
        char p[4096];

        (void) snprintf(p, sizeof(p), "%s%s", root, rel);
        ck_assert_msg(symlink(target, p) == 0, "%s: %m", p);
}

static void mkdirs(const char *rel) {
        char p[4096];

        (void) snprintf(p, sizeof(p), "mkdir -p '%s%s'", root, rel);
        ck_assert_int_eq(system(p), 0);
}

/* The files the fixture's cache was made for (tests/data/ldcache/make-cache.sh), with a
 * few traps. */
static void make_root(void) {
        _cleanup_free_ char *data = NULL;
        char p[4096];
        size_t size;
        FILE *f;

        strcpy(root, "/tmp/test-nvidia-cdi.XXXXXX");
        strcpy(outside, "/tmp/test-nvidia-cdi-out.XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(root));
        ck_assert_ptr_nonnull(mkdtemp(outside));
        ck_assert_int_eq(chmod(root, 0755), 0);
        mkdirs("/etc");
        mkdirs(LIBDIR);
        mkdirs("/usr/lib/i386-linux-gnu");
        mkdirs("/usr/bin");
        mkdirs("/usr/sbin");
        mkdirs("/lib/firmware/nvidia/" VERSION);
        mkdirs("/var/run/nvidia-persistenced");
        data = read_fixture(&size);
        (void) snprintf(p, sizeof(p), "%s/etc/ld.so.cache", root);
        f = fopen(p, "we");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(data, 1, size, f), size);
        fclose(f);

        mkfile(LIBDIR "/libcuda.so." VERSION, 0755);
        mklink("libcuda.so." VERSION, LIBDIR "/libcuda.so.1");
        mklink("libcuda.so.1", LIBDIR "/libcuda.so");
        mkfile(LIBDIR "/libnvidia-ml.so." VERSION, 0755);
        mklink("libnvidia-ml.so." VERSION, LIBDIR "/libnvidia-ml.so.1");
        mkfile(LIBDIR "/libnvidia-ptxjitcompiler.so." VERSION, 0755);
        mklink("libnvidia-ptxjitcompiler.so." VERSION, LIBDIR "/libnvidia-ptxjitcompiler.so.1");
        mkfile(LIBDIR "/libkgpu-other.so.2.0.0", 0755);
        mklink("libkgpu-other.so.2.0.0", LIBDIR "/libkgpu-other.so.2");
        mkfile("/usr/lib/i386-linux-gnu/libcuda32.so." VERSION, 0755);
        mklink("libcuda32.so." VERSION, "/usr/lib/i386-linux-gnu/libcuda32.so.1");
        /* A trap: the soname link of libnvidia-opticalflow leads out of the root. Resolved
         * inside it, it names nothing; followed on the host, it would find this file. */
        (void) snprintf(p, sizeof(p), "%s/libnvidia-opticalflow.so." VERSION, outside);
        f = fopen(p, "we");
        ck_assert_ptr_nonnull(f);
        fclose(f);
        (void) snprintf(p, sizeof(p), "../../../../../../../../..%s/libnvidia-opticalflow.so." VERSION, outside);
        mklink(p, LIBDIR "/libnvidia-opticalflow.so.1");

        mkfile("/usr/bin/nvidia-smi", 0755);
        mkfile("/usr/bin/nvidia-debugdump", 0755);
        mkfile("/usr/bin/nvidia-cuda-mps-control", 0644);     /* not executable: skipped */
        mkfile("/usr/sbin/nvidia-cuda-mps-control", 0755);
        mkfile("/lib/firmware/nvidia/" VERSION "/gsp_ga10x.bin", 0644);
        mkfile("/lib/firmware/nvidia/" VERSION "/gsp_tu10x.bin", 0644);
        mkfile("/lib/firmware/nvidia/" VERSION "/README", 0644);
        {
                struct sockaddr_un sa = { .sun_family = AF_UNIX };
                int s = socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0);

                ck_assert_int_ge(s, 0);
                (void) snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/var/run/nvidia-persistenced/socket", root);
                ck_assert_int_eq(bind(s, (struct sockaddr *) &sa, sizeof(sa)), 0);
                close(s);
        }
}

static void remove_root(void) {
        char cmd[8400];

        (void) snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", root, outside);
        (void) system(cmd);
}

static const NvidiaDriverMount *find_mount(const NvidiaDriverFiles *f, const char *container_path) {
        for (size_t i = 0; i < f->n_mounts; i++)
                if (streq(f->mounts[i].container_path, container_path))
                        return &f->mounts[i];
        return NULL;
}

static void check_mount(const NvidiaDriverFiles *f, const char *container_path, NvidiaDriverFileKind kind) {
        const NvidiaDriverMount *m = find_mount(f, container_path);
        char host[4200];

        ck_assert_msg(m, "no mount of %s", container_path);
        (void) snprintf(host, sizeof(host), "%s%s", root, container_path);
        ck_assert_str_eq(m->host_path, host);
        ck_assert_int_eq(m->kind, kind);
}

START_TEST(test_driver_files) {
        _cleanup_(nvidia_driver_files_freep) NvidiaDriverFiles *f = NULL;
        _cleanup_strv_free_ char **want_links = NULL;

        make_root();
        ck_assert_int_eq(nvidia_driver_files_find(root, VERSION, &f), 0);
        check_mount(f, LIBDIR "/libcuda.so." VERSION, NVIDIA_FILE_LIBRARY);
        check_mount(f, LIBDIR "/libnvidia-ml.so." VERSION, NVIDIA_FILE_LIBRARY);
        check_mount(f, LIBDIR "/libnvidia-ptxjitcompiler.so." VERSION, NVIDIA_FILE_LIBRARY);
        check_mount(f, "/usr/bin/nvidia-smi", NVIDIA_FILE_BINARY);
        check_mount(f, "/usr/bin/nvidia-debugdump", NVIDIA_FILE_BINARY);
        check_mount(f, "/usr/sbin/nvidia-cuda-mps-control", NVIDIA_FILE_BINARY);
        check_mount(f, "/lib/firmware/nvidia/" VERSION "/gsp_ga10x.bin", NVIDIA_FILE_FIRMWARE);
        check_mount(f, "/lib/firmware/nvidia/" VERSION "/gsp_tu10x.bin", NVIDIA_FILE_FIRMWARE);
        check_mount(f, "/var/run/nvidia-persistenced/socket", NVIDIA_FILE_IPC);
        /* 3 libraries, 3 binaries, 2 firmware files, 1 socket: nothing else (not the other
         * library, not the 32-bit one, not the file outside the root, not README). */
        ck_assert_uint_eq(f->n_mounts, 9);
        for (size_t i = 0; i < f->n_mounts; i++)
                ck_assert_msg(!strstr(f->mounts[i].host_path, outside), "%s", f->mounts[i].host_path);

        ck_assert_int_eq(strv_extend(&want_links, "libcuda.so." VERSION "::" LIBDIR "/libcuda.so.1"), 0);
        ck_assert_int_eq(strv_extend(&want_links, "libcuda.so.1::" LIBDIR "/libcuda.so"), 0);
        ck_assert_int_eq(strv_extend(&want_links, "libnvidia-ml.so." VERSION "::" LIBDIR "/libnvidia-ml.so.1"), 0);
        ck_assert_int_eq(strv_extend(&want_links, "libnvidia-ptxjitcompiler.so." VERSION "::" LIBDIR
                                                  "/libnvidia-ptxjitcompiler.so.1"), 0);
        strv_sort(want_links);
        ck_assert_msg(strv_equal(f->links, want_links), "links: %s", strv_join(f->links, " "));
        ck_assert_uint_eq(strv_length(f->ld_folders), 1);
        ck_assert_str_eq(f->ld_folders[0], LIBDIR);
        remove_root();
}
END_TEST

START_TEST(test_driver_version_change) {
        _cleanup_(nvidia_driver_files_freep) NvidiaDriverFiles *a = NULL, *b = NULL;
        _cleanup_(gpu_freep) Gpu *g = NULL;
        _cleanup_free_ char *spec_a = NULL, *spec_b = NULL;
        Gpu *gpus[1];
        CdiNvidiaOptions o = { .hook = "/usr/libexec/kgpu-cdi-hook" };

        make_root();
        ck_assert_int_eq(gpu_new("GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4", &g), 0);
        ck_assert_int_eq(free_and_strdup(&g->vendor, "nvidia"), 0);
        g->index = 0;
        ck_assert_int_eq(free_and_strdup(&g->driver_version, VERSION), 0);
        ck_assert_int_eq(strv_extend(&g->device_nodes, "/dev/nvidia0"), 0);
        gpus[0] = g;
        ck_assert_str_eq(cdi_nvidia_driver_version(gpus, 1), VERSION);
        ck_assert_int_eq(nvidia_driver_files_find(root, cdi_nvidia_driver_version(gpus, 1), &a), 0);
        o.files = a;
        ck_assert_int_eq(cdi_nvidia_spec_with(gpus, 1, &o, &spec_a), 2);
        ck_assert_ptr_nonnull(strstr(spec_a, "libcuda.so." VERSION "\""));

        /* The driver was updated: nvidia-smi reports another version, whose libraries
         * are not there yet; the spec names none of the old ones. */
        ck_assert_int_eq(free_and_strdup(&g->driver_version, "555.42.02"), 0);
        ck_assert_int_eq(nvidia_driver_files_find(root, cdi_nvidia_driver_version(gpus, 1), &b), 0);
        ck_assert_ptr_null(find_mount(b, LIBDIR "/libcuda.so." VERSION));
        ck_assert_ptr_nonnull(find_mount(b, "/usr/bin/nvidia-smi"));
        o.files = b;
        ck_assert_int_eq(cdi_nvidia_spec_with(gpus, 1, &o, &spec_b), 2);
        ck_assert_ptr_null(strstr(spec_b, VERSION));
        ck_assert_ptr_null(strstr(spec_b, "update-ldcache"));

        /* Versions that would be paths. */
        ck_assert_int_eq(free_and_strdup(&g->driver_version, "../../etc"), 0);
        ck_assert_ptr_null(cdi_nvidia_driver_version(gpus, 1));
        ck_assert_int_eq(nvidia_driver_files_find(root, "../../etc", &b), -EINVAL);
        ck_assert_int_eq(nvidia_driver_files_find(root, "550.54.15/x", &b), -EINVAL);
        ck_assert_int_eq(nvidia_driver_files_find(root, "", &b), -EINVAL);
        remove_root();
}
END_TEST

START_TEST(test_spec_text) {
        char *nodes[] = { (char *) "/dev/nvidia-caps/nvidia-cap21", (char *) "/dev/nvidia-caps/nvidia-cap22", NULL };
        GpuMigDevice mig = { .device_index = 0, .uuid = (char *) "MIG-3b6a1bd0-0c95-5d1e-9b2d-2c1a7b5f2d11",
                             .profile = (char *) "1g.10gb", .gi_id = 2, .ci_id = 0, .device_nodes = nodes };
        NvidiaDriverMount mounts[] = {
                { (char *) "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                  (char *) "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", NVIDIA_FILE_LIBRARY },
                { (char *) "/run/nvidia/driver/usr/bin/nvidia-smi", (char *) "/usr/bin/nvidia-smi",
                  NVIDIA_FILE_BINARY },
                { (char *) "/run/nvidia/driver/run/nvidia-persistenced/socket",
                  (char *) "/run/nvidia-persistenced/socket", NVIDIA_FILE_IPC },
        };
        char *links[] = { (char *) "libcuda.so.550.54.15::/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                          (char *) "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so", NULL };
        char *folders[] = { (char *) "/usr/lib/x86_64-linux-gnu", NULL };
        NvidiaDriverFiles f = { .version = (char *) "550.54.15", .mounts = mounts, .n_mounts = ELEMENTSOF(mounts),
                                .links = links, .ld_folders = folders };
        CdiNvidiaOptions o = { .dev_root = "/run/nvidia/driver", .hook = "/usr/libexec/kgpu-cdi-hook",
                               .files = &f };
        _cleanup_(gpu_freep) Gpu *g = NULL;
        _cleanup_free_ char *spec = NULL;
        Gpu *gpus[1];

        ck_assert_int_eq(gpu_new("GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4", &g), 0);
        ck_assert_int_eq(free_and_strdup(&g->vendor, "nvidia"), 0);
        g->index = 0;
        ck_assert_int_eq(strv_extend(&g->device_nodes, "/dev/nvidia0"), 0);
        ck_assert_int_eq(gpu_set_mig_devices(g, &mig, 1), 0);
        gpus[0] = g;
        ck_assert_int_eq(cdi_nvidia_spec_with(gpus, 1, &o, &spec), 4);
        ck_assert_str_eq(spec,
                "# Written by kgpu-probed: the node's NVIDIA GPUs. Do not edit.\n"
                "cdiVersion: \"0.5.0\"\n"
                "kind: \"nvidia.com/gpu\"\n"
                "containerEdits:\n"
                "  env:\n"
                "  - \"NVIDIA_VISIBLE_DEVICES=void\"\n"
                "  deviceNodes:\n"
                "  - path: \"/dev/nvidiactl\"\n"
                "    hostPath: \"/run/nvidia/driver/dev/nvidiactl\"\n"
                "  - path: \"/dev/nvidia-uvm\"\n"
                "    hostPath: \"/run/nvidia/driver/dev/nvidia-uvm\"\n"
                "  - path: \"/dev/nvidia-uvm-tools\"\n"
                "    hostPath: \"/run/nvidia/driver/dev/nvidia-uvm-tools\"\n"
                "  mounts:\n"
                "  - hostPath: \"/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\"\n"
                "    containerPath: \"/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\"\n"
                "    options: [\"ro\", \"nosuid\", \"nodev\", \"bind\"]\n"
                "  - hostPath: \"/run/nvidia/driver/usr/bin/nvidia-smi\"\n"
                "    containerPath: \"/usr/bin/nvidia-smi\"\n"
                "    options: [\"ro\", \"nosuid\", \"nodev\", \"bind\"]\n"
                "  - hostPath: \"/run/nvidia/driver/run/nvidia-persistenced/socket\"\n"
                "    containerPath: \"/run/nvidia-persistenced/socket\"\n"
                "    options: [\"ro\", \"nosuid\", \"nodev\", \"bind\", \"noexec\"]\n"
                "  hooks:\n"
                "  - hookName: \"createContainer\"\n"
                "    path: \"/usr/libexec/kgpu-cdi-hook\"\n"
                "    args:\n"
                "    - \"kgpu-cdi-hook\"\n"
                "    - \"create-symlinks\"\n"
                "    - \"--link\"\n"
                "    - \"libcuda.so.550.54.15::/usr/lib/x86_64-linux-gnu/libcuda.so.1\"\n"
                "    - \"--link\"\n"
                "    - \"libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so\"\n"
                "  - hookName: \"createContainer\"\n"
                "    path: \"/usr/libexec/kgpu-cdi-hook\"\n"
                "    args:\n"
                "    - \"kgpu-cdi-hook\"\n"
                "    - \"update-ldcache\"\n"
                "    - \"--folder\"\n"
                "    - \"/usr/lib/x86_64-linux-gnu\"\n"
                "devices:\n"
                "- name: \"0\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "      hostPath: \"/run/nvidia/driver/dev/nvidia0\"\n"
                "- name: \"GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "      hostPath: \"/run/nvidia/driver/dev/nvidia0\"\n"
                "- name: \"0:0\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "      hostPath: \"/run/nvidia/driver/dev/nvidia0\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap21\"\n"
                "      hostPath: \"/run/nvidia/driver/dev/nvidia-caps/nvidia-cap21\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap22\"\n"
                "      hostPath: \"/run/nvidia/driver/dev/nvidia-caps/nvidia-cap22\"\n"
                "- name: \"MIG-3b6a1bd0-0c95-5d1e-9b2d-2c1a7b5f2d11\"\n"
                "  containerEdits:\n"
                "    deviceNodes:\n"
                "    - path: \"/dev/nvidia0\"\n"
                "      hostPath: \"/run/nvidia/driver/dev/nvidia0\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap21\"\n"
                "      hostPath: \"/run/nvidia/driver/dev/nvidia-caps/nvidia-cap21\"\n"
                "    - path: \"/dev/nvidia-caps/nvidia-cap22\"\n"
                "      hostPath: \"/run/nvidia/driver/dev/nvidia-caps/nvidia-cap22\"\n");
}
END_TEST

/* nvidia-smi of a driver root runs with that root's libraries: LD_LIBRARY_PATH is the
 * root's library directories of the host's ABI (not the 32-bit one), the probe's own
 * LD_LIBRARY_PATH replaced; a tool outside the root, or the root "/", runs as it is. */
START_TEST(test_tool_env) {
        _cleanup_strv_free_ char **env = NULL;
        _cleanup_free_ char *path = NULL, *want = NULL, *tool = NULL, *other = NULL;
        size_t n_ld = 0;

        make_root();
        ck_assert_int_eq(nvidia_driver_library_path(root, &path), 0);
        ck_assert_int_ge(asprintf(&want, "%s" LIBDIR, root), 0);
        ck_assert_str_eq(path, want);
        ck_assert_int_eq(nvidia_driver_library_path("/", &other), 0);
        ck_assert_ptr_null(other);

        setenv("LD_LIBRARY_PATH", "/host/lib", 1);
        setenv("KGPU_TEST_MARK", "kept", 1);
        ck_assert_int_ge(asprintf(&tool, "%s/usr/bin/nvidia-smi", root), 0);
        ck_assert_int_eq(nvidia_tool_env(root, tool, &env), 0);
        ck_assert_ptr_nonnull(env);
        free(want);
        ck_assert_int_ge(asprintf(&want, "LD_LIBRARY_PATH=%s" LIBDIR, root), 0);
        for (char **e = env; *e; e++)
                if (startswith(*e, "LD_LIBRARY_PATH=")) {
                        ck_assert_str_eq(*e, want);
                        n_ld++;
                }
        ck_assert_uint_eq(n_ld, 1);
        ck_assert(strv_contains(env, "KGPU_TEST_MARK=kept"));
        env = strv_free(env);
        ck_assert_int_eq(nvidia_tool_env(root, "/opt/fake/nvidia-smi", &env), 0);
        ck_assert_ptr_null(env);
        ck_assert_int_eq(nvidia_tool_env("/", "/usr/bin/nvidia-smi", &env), 0);
        ck_assert_ptr_null(env);
        /* A root whose name is a prefix of the tool's directory is not its root. */
        free(tool);
        ck_assert_int_ge(asprintf(&tool, "%sx/usr/bin/nvidia-smi", root), 0);
        ck_assert_int_eq(nvidia_tool_env(root, tool, &env), 0);
        ck_assert_ptr_null(env);
        remove_root();
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("nvidia-cdi");
        TCase *tc = tcase_create("core");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_ldcache_real);
        tcase_add_test(tc, test_ldcache_hostile);
        tcase_add_test(tc, test_ldcache_old_format);
        tcase_add_test(tc, test_driver_files);
        tcase_add_test(tc, test_driver_version_change);
        tcase_add_test(tc, test_spec_text);
        tcase_add_test(tc, test_tool_env);
        suite_add_tcase(s, tc);
        return s;
}

KGPU_TEST_SUITE(suite)
