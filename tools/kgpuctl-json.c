/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* kgpuctl-json.c — JSON string output shared by kgpuctl and kgpu-render-device. */

#include <stdio.h>

#include "tools/kgpuctl.h"

void ctl_json_string(const char *s) {
        putchar('"');
        for (const unsigned char *p = (const unsigned char *) (s ?: ""); *p; p++) {
                if (*p == '"' || *p == '\\')
                        printf("\\%c", *p);
                else if (*p < 0x20)
                        printf("\\u%04x", *p);
                else
                        putchar(*p);
        }
        putchar('"');
}
