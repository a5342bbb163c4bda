/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kgpu-render-device.c — `kgpuctl render-device` as a self-contained program for
 * container images: no bus, no daemons, linked statically where the build allows, so
 * it can be copied into any image (`vainfo --device $(kgpu-render-device 1)`).
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/kgpuctl.h"

int main(int argc, char **argv) {
        Ctl c = {};
        int i = 1;

        if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
                printf("kgpu-render-device [--json] [N]\n\n"
                       "Prints the Nth DRM render node (N from 1, default 1) this container was given,\n"
                       "sorted by minor number, e.g. vainfo --device $(kgpu-render-device 2).\n");
                return EXIT_SUCCESS;
        }
        if (argc > 1 && strcmp(argv[1], "--version") == 0) {
                printf("kgpu-render-device %s\n", KGPU_VERSION);
                return EXIT_SUCCESS;
        }
        if (argc > 1 && strcmp(argv[1], "--json") == 0) {
                c.json = true;
                i++;
        }
        /* ctl_render_device() takes argv as "render-device [N]". */
        argv[i - 1] = (char *) "render-device";
        return ctl_render_device(&c, argc - (i - 1), argv + (i - 1)) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
