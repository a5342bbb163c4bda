/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cdi-nvidia.c — the NVIDIA CDI spec (see cdi-nvidia.h).
 *
 * YAML written by hand: every scalar is a double-quoted string with JSON escapes (which
 * YAML reads the same), so no value can change the document's structure.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "daemons/probe/cdi-nvidia.h"
#include "daemons/probe/outputs.h"

typedef struct Buf {
        char *p;
        size_t len, cap;
        int error;
} Buf;

static void buf_add(Buf *b, const char *s, size_t n) {
        if (b->error < 0)
                return;
        if (b->len + n + 1 > b->cap) {
                size_t cap = MAX(b->cap * 2, b->len + n + 1 + 256);
                char *q = realloc(b->p, cap);

                if (!q) {
                        b->error = -ENOMEM;
                        return;
                }
                b->p = q;
                b->cap = cap;
        }
        memcpy(b->p + b->len, s, n);
        b->len += n;
        b->p[b->len] = 0;
}

static void buf_puts(Buf *b, const char *s) {
        buf_add(b, s, strlen(s));
}

static void buf_quoted(Buf *b, const char *s) {
        buf_add(b, "\"", 1);
        for (const unsigned char *c = (const unsigned char *) s; *c; c++) {
                char e[8];

                if (*c == '"' || *c == '\\') {
                        e[0] = '\\';
                        e[1] = (char) *c;
                        buf_add(b, e, 2);
                } else if (*c < 0x20 || *c == 0x7f) {
                        (void) snprintf(e, sizeof(e), "\\u%04x", *c);
                        buf_add(b, e, 6);
                } else
                        buf_add(b, (const char *) c, 1);
        }
        buf_add(b, "\"", 1);
}

static bool is_common_node(const char *path) {
        return streq(path, "/dev/nvidiactl") || streq(path, "/dev/nvidia-uvm") ||
               streq(path, "/dev/nvidia-uvm-tools");
}

/* One device entry: name and the nodes (common ones skipped). */
static void buf_device(Buf *b, const char *name, const char *gpu_node, char * const *extra) {
        buf_puts(b, "- name: ");
        buf_quoted(b, name);
        buf_puts(b, "\n  containerEdits:\n    deviceNodes:\n");
        if (gpu_node) {
                buf_puts(b, "    - path: ");
                buf_quoted(b, gpu_node);
                buf_puts(b, "\n");
        }
        for (size_t i = 0; extra && extra[i]; i++) {
                buf_puts(b, "    - path: ");
                buf_quoted(b, extra[i]);
                buf_puts(b, "\n");
        }
}

static int gpu_cmp(const void *a, const void *b) {
        const Gpu *x = *(Gpu * const *) a, *y = *(Gpu * const *) b;

        return x->index < y->index ? -1 : x->index > y->index ? 1 : strcmp(x->id, y->id);
}

int cdi_nvidia_spec(Gpu * const *gpus, size_t n, char **ret) {
        _cleanup_free_ Gpu **l = NULL;
        Buf b = {};
        size_t k = 0;
        int n_devices = 0;

        l = calloc(n + 1, sizeof(Gpu *));
        if (!l)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (streq(gpus[i]->vendor, "nvidia") && gpus[i]->index >= 0)
                        l[k++] = gpus[i];
        if (k > 1)
                qsort(l, k, sizeof(Gpu *), gpu_cmp);

        buf_puts(&b, "# Written by kgpu-probed: the node's NVIDIA GPUs. Do not edit.\n"
                     "cdiVersion: \"" OUTPUTS_CDI_VERSION "\"\n"
                     "kind: \"" CDI_NVIDIA_KIND "\"\n"
                     "containerEdits:\n  deviceNodes:\n"
                     "  - path: \"/dev/nvidiactl\"\n"
                     "  - path: \"/dev/nvidia-uvm\"\n"
                     "  - path: \"/dev/nvidia-uvm-tools\"\n"
                     "devices:\n");
        for (size_t i = 0; i < k; i++) {
                const Gpu *g = l[i];
                const char *node = NULL;
                char name[32];

                for (size_t j = 0; g->device_nodes && g->device_nodes[j]; j++)
                        if (!is_common_node(g->device_nodes[j])) {
                                node = g->device_nodes[j];
                                break;
                        }
                (void) snprintf(name, sizeof(name), "%d", g->index);
                buf_device(&b, name, node, NULL);
                n_devices++;
                if (outputs_cdi_name_is_valid(g->id)) {
                        buf_device(&b, g->id, node, NULL);
                        n_devices++;
                }
                for (size_t m = 0; m < g->n_mig_devices; m++) {
                        const GpuMigDevice *d = &g->mig_devices[m];

                        (void) snprintf(name, sizeof(name), "%d:%u", g->index, d->device_index);
                        buf_device(&b, name, node, d->device_nodes);
                        n_devices++;
                        if (outputs_cdi_name_is_valid(d->uuid)) {
                                buf_device(&b, d->uuid, node, d->device_nodes);
                                n_devices++;
                        }
                }
        }
        if (b.error < 0) {
                free(b.p);
                return b.error;
        }
        *ret = b.p;
        return n_devices;
}

int cdi_nvidia_write(const char *directory, Gpu * const *gpus, size_t n) {
        _cleanup_free_ char *spec = NULL, *path = NULL;
        int r;

        if (isempty(directory))
                return 0;
        if (asprintf(&path, "%s/%s", directory, CDI_NVIDIA_FILE) < 0)
                return -ENOMEM;
        r = cdi_nvidia_spec(gpus, n, &spec);
        if (r < 0)
                return r;
        if (r == 0)
                return unlink(path) < 0 && errno != ENOENT ? negative_errno() : 0;
        return outputs_write_atomic(path, spec, strlen(spec));
}
