/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kgpu-render-device.c — `kgpuctl render-device` as a self-contained program for
 * container images: no bus, no daemons, linked statically where the build allows, so
 * it can be copied into any image. Both forms of Intel's render-device.sh:
 * `vainfo --device $(kgpu-render-device 1)` and `kgpu-render-device vainfo --display
 * drm --device` (the device appended, the command exec'd).
 *
 * Options (-h/--help, --version, --json; one or two dashes, exact names) come before
 * the command; everything from the command on is the command's own.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/opt-parse.h"
#include "tools/kgpuctl.h"

static void help(void) {
        printf("kgpu-render-device [--json] [N]\n"
               "kgpu-render-device [N] COMMAND [ARG...] OPTION\n\n"
               "Prints the Nth DRM render node (N from 1, default 1) this container was given,\n"
               "sorted by minor number, e.g. vainfo --device $(kgpu-render-device 2).\n"
               "With a command, runs it with the node appended as its last argument (no shell),\n"
               "e.g. kgpu-render-device vainfo --display drm --device.\n");
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "help",    no_argument, NULL, 'h' },
                { "h",       no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                { "json",    no_argument, NULL, 'j' },
                {}
        };
        _cleanup_free_ char **args = NULL;
        const char *value;
        Ctl c = {};
        size_t n = 1;
        OptParser p;
        int o, r;

        args = calloc((size_t) argc + 2, sizeof(char *));
        if (!args) {
                fprintf(stderr, "Out of memory.\n");
                return EXIT_FAILURE;
        }
        /* ctl_render_device() takes argv as "render-device [N] [COMMAND ARG...]". */
        args[0] = (char *) "render-device";
        opt_parser_init(&p, argc, argv, opts);
        for (;;) {
                o = opt_next(&p, &value);
                if (o < 0) {
                        fprintf(stderr, "%s: %s; see kgpu-render-device --help.\n", p.arg, p.error);
                        return EXIT_FAILURE;
                }
                if (o == 'h') {
                        help();
                        return EXIT_SUCCESS;
                }
                if (o == 'V') {
                        printf("kgpu-render-device %s\n", KGPU_VERSION);
                        return EXIT_SUCCESS;
                }
                if (o == 'j') {
                        c.json = true;
                        continue;
                }
                if (p.index >= argc)
                        break;
                args[n++] = argv[p.index++];
                if (p.done || ctl_render_device_command_starts(args + 1, n - 1)) {
                        while (p.index < argc)
                                args[n++] = argv[p.index++];
                        break;
                }
        }
        r = ctl_render_device(&c, (int) n, args);
        return r < 0 ? (c.exit_status ?: EXIT_FAILURE) : EXIT_SUCCESS;
}
