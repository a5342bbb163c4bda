/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kgpuctl-render-device.c — "kgpuctl render-device [N]": the Nth DRM render node.
 *
 * Contract: works without the daemons and without a bus (inside a container that got
 * GPUs from kgpu): lists the character devices named renderD* in <dev root>/dri
 * (KGPU_DEV_ROOT, default /dev), sorts them by minor number, and prints the path of
 * the Nth (N from 1, default 1), or with --json the whole list and the choice. The
 * printed path always starts with /dev/dri, the path a program in the container
 * opens. Errors (no /dev/dri, no render node, N out of range, N not a number) are one
 * clear line on stderr and a non-zero exit status. The scan is bounded (RENDER_MAX).
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/paths.h"
#include "common/util.h"
#include "tools/kgpuctl.h"

#define RENDER_MAX 1024

typedef struct RenderNode {
        char name[64];
        unsigned minor;
} RenderNode;

static int render_node_cmp(const void *a, const void *b) {
        const RenderNode *x = a, *y = b;

        if (x->minor != y->minor)
                return x->minor < y->minor ? -1 : 1;
        return strcmp(x->name, y->name);
}

static int ctl_render_nodes(const char *dev_root, RenderNode **ret, size_t *ret_n) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_free_ RenderNode *nodes = NULL;
        size_t n = 0;
        DIR *d;
        struct dirent *de;

        if (asprintf(&dir, "%s/dri", dev_root) < 0)
                return -ENOMEM;
        d = opendir(dir);
        if (!d)
                return -errno;
        nodes = calloc(RENDER_MAX, sizeof(RenderNode));
        if (!nodes) {
                closedir(d);
                return -ENOMEM;
        }
        while ((de = readdir(d))) {
                struct stat st;

                if (!startswith(de->d_name, "renderD") || strlen(de->d_name) >= sizeof(nodes[0].name))
                        continue;
                if (fstatat(dirfd(d), de->d_name, &st, 0) < 0 || !S_ISCHR(st.st_mode))
                        continue;
                if (n >= RENDER_MAX)
                        break;
                strcpy(nodes[n].name, de->d_name);
                nodes[n].minor = minor(st.st_rdev);
                n++;
        }
        closedir(d);
        qsort(nodes, n, sizeof(RenderNode), render_node_cmp);
        *ret = TAKE_PTR(nodes);
        *ret_n = n;
        return 0;
}

int ctl_render_device(Ctl *c, int argc, char **argv) {
        _cleanup_free_ RenderNode *nodes = NULL;
        const char *dev_root = paths_dev_root();
        uint32_t index = 1;
        size_t n = 0;
        int r;

        if (argc > 2) {
                fprintf(stderr, "render-device takes at most one argument (N, from 1).\n");
                return -EINVAL;
        }
        if (argc == 2 && (safe_atou32(argv[1], &index) < 0 || index == 0)) {
                fprintf(stderr, "Invalid render device number '%s': expected 1, 2, ...\n", argv[1]);
                return -EINVAL;
        }

        r = ctl_render_nodes(dev_root, &nodes, &n);
        if (r == -ENOENT || (r >= 0 && n == 0)) {
                fprintf(stderr, "No render device: %s/dri has no renderD* node (was a GPU allocated to this "
                        "container?).\n", dev_root);
                return -ENODEV;
        }
        if (r < 0) {
                fprintf(stderr, "Cannot list %s/dri: %s\n", dev_root, strerror(-r));
                return r;
        }
        if (index > n) {
                fprintf(stderr, "No render device %u: only %zu present.\n", index, n);
                return -ENODEV;
        }

        if (c->json) {
                printf("{\"device\":\"/dev/dri/%s\",\"index\":%u,\"devices\":[", nodes[index - 1].name, index);
                for (size_t i = 0; i < n; i++)
                        printf("%s\"/dev/dri/%s\"", i ? "," : "", nodes[i].name);
                printf("]}\n");
        } else
                printf("/dev/dri/%s\n", nodes[index - 1].name);
        return 0;
}
