/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kgpuctl-render-device.c — "kgpuctl render-device [N] [COMMAND ARG...]": the Nth DRM
 * render node, printed or appended to a command that is then run.
 *
 * Contract: works without the daemons and without a bus (inside a container that got
 * GPUs from kgpu): lists the character devices named renderD* in <dev root>/dri
 * (KGPU_DEV_ROOT, default /dev), sorts them by minor number, and prints the path of
 * the Nth (N from 1, default 1), or with --json the whole list and the choice. The
 * printed path always starts with /dev/dri, the path a program in the container
 * opens. With a command (the form of Intel's render-device.sh: "render-device [N]
 * vainfo --display drm --device"), the command runs with the path appended as its last
 * argument: exec'd directly (execvp, no shell), after a "Running: ..." line on stderr.
 * N is the first argument when it looks like a number; a command needs at least one
 * argument after it (the option that takes the device), as the script requires.
 * Errors (no /dev/dri, no render node, N out of range, N not a number, a command not
 * found: exit status 127, not runnable: 126) are one clear line on stderr and a
 * non-zero exit status. The scan is bounded (RENDER_MAX).
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

bool ctl_render_device_looks_numeric(const char *s) {
        if (*s == '-' || *s == '+')
                s++;
        return *s >= '0' && *s <= '9';
}

bool ctl_render_device_command_starts(char **args, size_t n) {
        /* args: what follows "render-device" so far; the newest is args[n - 1]. */
        return (n == 1 && !ctl_render_device_looks_numeric(args[0])) || n == 2;
}

/* Runs command[] with device appended, as Intel's render-device.sh does; returns only
 * on failure (c->exit_status 127: not found, 126: not runnable, as a shell says). */
static int render_device_exec(Ctl *c, char **command, size_t n, const char *device) {
        _cleanup_free_ char **argv = calloc(n + 2, sizeof(char *));
        int e;

        if (!argv) {
                fprintf(stderr, "Out of memory.\n");
                return -ENOMEM;
        }
        memcpy(argv, command, n * sizeof(char *));
        argv[n] = (char *) device;
        fprintf(stderr, "Running:");
        for (size_t i = 0; i <= n; i++)
                fprintf(stderr, " %s", argv[i]);
        fprintf(stderr, "\n");
        (void) fflush(stdout);
        (void) fflush(stderr);
        execvp(argv[0], argv);
        e = errno;
        if (e == ENOENT || e == ENOTDIR) {
                fprintf(stderr, "Command '%s' not found%s.\n", argv[0],
                        strchr(argv[0], '/') ? "" : " (looked in $PATH)");
                c->exit_status = 127;
        } else {
                fprintf(stderr, "Cannot run '%s': %s\n", argv[0], strerror(e));
                c->exit_status = 126;
        }
        return -e;
}

int ctl_render_device(Ctl *c, int argc, char **argv) {
        _cleanup_free_ RenderNode *nodes = NULL;
        _cleanup_free_ char *device = NULL;
        const char *dev_root = paths_dev_root();
        char **command = NULL;
        uint32_t index = 1;
        size_t n = 0, n_command = 0;
        int r;

        /* render-device [N] [COMMAND ARG...]: N when it looks like a number (Intel's
         * render-device.sh takes a first argument of digits as N), else the command. */
        if (argc >= 2 && ctl_render_device_looks_numeric(argv[1])) {
                if (safe_atou32(argv[1], &index) < 0 || index == 0) {
                        fprintf(stderr, "Invalid render device number '%s': expected 1, 2, ...\n", argv[1]);
                        return -EINVAL;
                }
                command = argv + 2;
                n_command = (size_t) argc - 2;
        } else if (argc >= 2) {
                command = argv + 1;
                n_command = (size_t) argc - 1;
        }
        if (n_command == 1) {
                /* As render-device.sh: a command comes with the option that takes the device. */
                fprintf(stderr, "Invalid render device number '%s': expected 1, 2, ..., or a command and its "
                        "arguments ending with the option that takes the device (vainfo --display drm --device).\n",
                        command[0]);
                return -EINVAL;
        }
        if (n_command > 0 && c->json) {
                fprintf(stderr, "--json prints the device; it does not go with a command.\n");
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
        if (asprintf(&device, "/dev/dri/%s", nodes[index - 1].name) < 0) {
                device = NULL;
                fprintf(stderr, "Out of memory.\n");
                return -ENOMEM;
        }

        if (n_command > 0)
                return render_device_exec(c, command, n_command, device);
        if (c->json) {
                printf("{\"device\":\"%s\",\"index\":%u,\"devices\":[", device, index);
                for (size_t i = 0; i < n; i++)
                        printf("%s\"/dev/dri/%s\"", i ? "," : "", nodes[i].name);
                printf("]}\n");
        } else
                printf("%s\n", device);
        return 0;
}
