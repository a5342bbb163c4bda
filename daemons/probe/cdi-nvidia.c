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
#include "daemons/probe/nvidia-driver-files.h"
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

/* One deviceNodes element: path, and hostPath under a device root. */
static void buf_node(Buf *b, const char *indent, const char *path, const char *dev_root) {
        buf_puts(b, indent);
        buf_puts(b, "- path: ");
        buf_quoted(b, path);
        buf_puts(b, "\n");
        if (!isempty(dev_root)) {
                _cleanup_free_ char *host = NULL;

                if (asprintf(&host, "%s%s", dev_root, path) < 0) {
                        b->error = -ENOMEM;
                        return;
                }
                buf_puts(b, indent);
                buf_puts(b, "  hostPath: ");
                buf_quoted(b, host);
                buf_puts(b, "\n");
        }
}

/* One device entry: name and the nodes (common ones skipped). */
static void buf_device(Buf *b, const char *name, const char *gpu_node, char * const *extra, const char *dev_root) {
        buf_puts(b, "- name: ");
        buf_quoted(b, name);
        buf_puts(b, "\n  containerEdits:\n    deviceNodes:\n");
        if (gpu_node)
                buf_node(b, "    ", gpu_node, dev_root);
        for (size_t i = 0; extra && extra[i]; i++)
                buf_node(b, "    ", extra[i], dev_root);
}

static void buf_hook(Buf *b, const char *hook, const char *command, const char *flag, char * const *values) {
        buf_puts(b, "  - hookName: \"createContainer\"\n    path: ");
        buf_quoted(b, hook);
        buf_puts(b, "\n    args:\n    - \"" CDI_NVIDIA_HOOK_NAME "\"\n    - ");
        buf_quoted(b, command);
        buf_puts(b, "\n");
        for (size_t i = 0; values && values[i]; i++) {
                buf_puts(b, "    - ");
                buf_quoted(b, flag);
                buf_puts(b, "\n    - ");
                buf_quoted(b, values[i]);
                buf_puts(b, "\n");
        }
}

/* The spec-wide edits: env, the common nodes, and the driver's files with their hooks. */
static void buf_common(Buf *b, const CdiNvidiaOptions *o) {
        static const char *const nodes[] = { "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools" };
        const NvidiaDriverFiles *f = o ? o->files : NULL;
        const char *dev_root = o ? o->dev_root : NULL;

        buf_puts(b, "containerEdits:\n  env:\n  - \"NVIDIA_VISIBLE_DEVICES=void\"\n  deviceNodes:\n");
        for (size_t i = 0; i < ELEMENTSOF(nodes); i++)
                buf_node(b, "  ", nodes[i], dev_root);
        if (!f)
                return;
        if (f->n_mounts > 0)
                buf_puts(b, "  mounts:\n");
        for (size_t i = 0; i < f->n_mounts; i++) {
                buf_puts(b, "  - hostPath: ");
                buf_quoted(b, f->mounts[i].host_path);
                buf_puts(b, "\n    containerPath: ");
                buf_quoted(b, f->mounts[i].container_path);
                buf_puts(b, f->mounts[i].kind == NVIDIA_FILE_IPC ?
                            "\n    options: [\"ro\", \"nosuid\", \"nodev\", \"bind\", \"noexec\"]\n" :
                            "\n    options: [\"ro\", \"nosuid\", \"nodev\", \"bind\"]\n");
        }
        if (isempty(o->hook) || (strv_length(f->links) == 0 && strv_length(f->ld_folders) == 0))
                return;
        buf_puts(b, "  hooks:\n");
        if (strv_length(f->links) > 0)
                buf_hook(b, o->hook, "create-symlinks", "--link", f->links);
        if (strv_length(f->ld_folders) > 0)
                buf_hook(b, o->hook, "update-ldcache", "--folder", f->ld_folders);
}

static int gpu_cmp(const void *a, const void *b) {
        const Gpu *x = *(Gpu * const *) a, *y = *(Gpu * const *) b;

        return x->index < y->index ? -1 : x->index > y->index ? 1 : strcmp(x->id, y->id);
}

int cdi_nvidia_spec(Gpu * const *gpus, size_t n, char **ret) {
        return cdi_nvidia_spec_with(gpus, n, NULL, ret);
}

int cdi_nvidia_spec_with(Gpu * const *gpus, size_t n, const CdiNvidiaOptions *o, char **ret) {
        const char *dev_root = o && !isempty(o->dev_root) && !streq(o->dev_root, "/") ? o->dev_root : NULL;
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
                     "kind: \"" CDI_NVIDIA_KIND "\"\n");
        {
                CdiNvidiaOptions c = o ? *o : (CdiNvidiaOptions) {};

                c.dev_root = dev_root;
                buf_common(&b, &c);
        }
        buf_puts(&b, "devices:\n");
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
                buf_device(&b, name, node, NULL, dev_root);
                n_devices++;
                if (outputs_cdi_name_is_valid(g->id)) {
                        buf_device(&b, g->id, node, NULL, dev_root);
                        n_devices++;
                }
                for (size_t m = 0; m < g->n_mig_devices; m++) {
                        const GpuMigDevice *d = &g->mig_devices[m];

                        (void) snprintf(name, sizeof(name), "%d:%u", g->index, d->device_index);
                        buf_device(&b, name, node, d->device_nodes, dev_root);
                        n_devices++;
                        if (outputs_cdi_name_is_valid(d->uuid)) {
                                buf_device(&b, d->uuid, node, d->device_nodes, dev_root);
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
        return cdi_nvidia_write_with(directory, gpus, n, NULL);
}

const char *cdi_nvidia_driver_version(Gpu * const *gpus, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (streq(gpus[i]->vendor, "nvidia") && nvidia_driver_version_is_valid(gpus[i]->driver_version))
                        return gpus[i]->driver_version;
        return NULL;
}

int cdi_nvidia_write_with(const char *directory, Gpu * const *gpus, size_t n, const CdiNvidiaOptions *o) {
        _cleanup_free_ char *spec = NULL, *path = NULL;
        int r;

        if (isempty(directory))
                return 0;
        if (asprintf(&path, "%s/%s", directory, CDI_NVIDIA_FILE) < 0)
                return -ENOMEM;
        r = cdi_nvidia_spec_with(gpus, n, o, &spec);
        if (r < 0)
                return r;
        if (r == 0)
                return unlink(path) < 0 && errno != ENOENT ? negative_errno() : 0;
        return outputs_write_atomic(path, spec, strlen(spec));
}
