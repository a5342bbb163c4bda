/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-build.c — the NVIDIA Gpu objects from nvidia-smi's parsed answers (pure: no
 * I/O; see nvidia_build_gpus() in nvidia.h). nvidia.c runs the tools.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/nvidia.h"

#define NVIDIA_VENDOR_ID 0x10deU
#define NVIDIA_PCI_CLASS_3D 0x030200U

int nvidia_mig_minor_lookup(const char *text, uint32_t gpu_minor, uint32_t gi, int32_t ci, uint32_t *ret) {
        char want[96];
        size_t wl;

        if (!text)
                return -ENOENT;
        if (ci < 0)
                (void) snprintf(want, sizeof(want), "gpu%" PRIu32 "/gi%" PRIu32 "/access", gpu_minor, gi);
        else
                (void) snprintf(want, sizeof(want), "gpu%" PRIu32 "/gi%" PRIu32 "/ci%" PRId32 "/access",
                                gpu_minor, gi, ci);
        wl = strlen(want);
        for (const char *l = text; *l; ) {
                const char *e = strchr(l, '\n') ?: l + strlen(l);

                if ((size_t) (e - l) > wl && strncmp(l, want, wl) == 0 && l[wl] == ' ') {
                        const char *v = l + wl;
                        uint32_t minor = 0;
                        size_t digits = 0;

                        while (v < e && *v == ' ')
                                v++;
                        for (; v < e && *v >= '0' && *v <= '9' && digits < 7; v++, digits++)
                                minor = minor * 10 + (uint32_t) (*v - '0');
                        if (digits > 0 && (v == e || *v == '\r' || *v == ' ')) {
                                *ret = minor;
                                return 0;
                        }
                        return -EBADMSG;
                }
                l = *e ? e + 1 : e;
        }
        return -ENOENT;
}

/* "1g.10gb" -> 10 GiB; "1c.3g.71gb" -> 71 GiB; 0 when the name says nothing. */
static uint64_t profile_memory_bytes(const char *profile) {
        const char *p = strrchr(profile, '.');
        uint64_t gb = 0;
        size_t digits = 0;

        if (!p)
                return 0;
        for (p++; *p >= '0' && *p <= '9' && digits < 6; p++, digits++)
                gb = gb * 10 + (uint64_t) (*p - '0');
        if (digits == 0 || strncmp(p, "gb", 2) != 0)
                return 0;
        return gb << 30;
}

static const NvidiaQGpu *q_gpu_find(const NvidiaQGpu *q, size_t n, const char *pci) {
        for (size_t i = 0; i < n && !isempty(pci); i++)
                if (streq(q[i].pci_address, pci))
                        return &q[i];
        return NULL;
}

static int build_mig_devices(Gpu *g, const NvidiaGpu *row, uint32_t minor,
                             const NvidiaMigDevice *migs, size_t n_migs,
                             const NvidiaQMigDevice *q_migs, size_t n_q_migs, const char *mig_minors) {
        GpuMigDevice l[GPU_MIG_DEVICES_MAX] = {};
        char *nodes[GPU_MIG_DEVICES_MAX][3] = {};
        char paths[GPU_MIG_DEVICES_MAX][2][64];
        size_t n = 0;

        for (size_t i = 0; i < n_migs; i++) {
                const NvidiaMigDevice *d = &migs[i];
                const NvidiaQMigDevice *q = NULL;
                uint32_t gi = 0, ci = 0, cap;
                bool ids = false;
                size_t k = 0;

                if (d->gpu_index != row->index)
                        continue;
                if (n >= GPU_MIG_DEVICES_MAX)
                        return -E2BIG;
                for (size_t j = 0; j < n_q_migs; j++)
                        if (streq(q_migs[j].pci_address, row->pci_address) &&
                            q_migs[j].device_index == d->device_index) {
                                q = &q_migs[j];
                                break;
                        }
                if (q) {
                        gi = q->gi_id;
                        ci = q->ci_id;
                        ids = true;
                } else if (d->gi_id >= 0 && d->ci_id >= 0) {
                        gi = (uint32_t) d->gi_id;
                        ci = (uint32_t) d->ci_id;
                        ids = true;
                }
                /* Without its GPU and compute instance capability nodes a container cannot
                 * use the MIG device: such a device is not published at all. */
                if (!ids) {
                        log_warning("NVIDIA MIG device %" PRIu32 " (%s) of GPU %s: its GPU and compute instance "
                                    "are unknown (neither nvidia-smi -q nor the nvidia-smi table lists them), so "
                                    "are its capability nodes: not advertised.",
                                    d->device_index, d->uuid, row->uuid);
                        continue;
                }
                for (int c = -1; c <= 0; c++) {
                        int32_t want_ci = c < 0 ? -1 : (int32_t) ci;

                        if (nvidia_mig_minor_lookup(mig_minors, minor, gi, want_ci, &cap) < 0)
                                break;
                        (void) snprintf(paths[n][k], sizeof(paths[n][k]), "/dev/nvidia-caps/nvidia-cap%" PRIu32, cap);
                        nodes[n][k] = paths[n][k];
                        k++;
                }
                if (k != 2) {
                        char name[64];

                        if (k == 0)
                                (void) snprintf(name, sizeof(name), "gpu%" PRIu32 "/gi%" PRIu32, minor, gi);
                        else
                                (void) snprintf(name, sizeof(name), "gpu%" PRIu32 "/gi%" PRIu32 "/ci%" PRIu32,
                                                minor, gi, ci);
                        log_warning("NVIDIA MIG device %" PRIu32 " (%s) of GPU %s: %s has no capability node "
                                    "(%s/access not in %s): not advertised.", d->device_index, d->uuid, row->uuid,
                                    name, name, mig_minors ? "mig-minors" : "a readable mig-minors");
                        continue;
                }
                l[n] = (GpuMigDevice) {
                        .device_index = d->device_index,
                        .uuid = (char *) d->uuid,
                        .profile = (char *) d->profile,
                        .gi_id = gi,
                        .ci_id = ci,
                        .device_nodes = nodes[n],
                        .memory_bytes = q && q->memory_mib > 0 ? q->memory_mib << 20 : profile_memory_bytes(d->profile),
                };
                n++;
        }
        return gpu_set_mig_devices(g, l, n);
}

/* Row j is the one kept for its UUID: valid, and no earlier row has it. */
static bool row_kept(const NvidiaGpu *gpus, size_t j) {
        if (!nvidia_gpu_uuid_is_valid(gpus[j].uuid) || gpus[j].index > INT32_MAX)
                return false;
        for (size_t k = 0; k < j; k++)
                if (streq(gpus[k].uuid, gpus[j].uuid) && nvidia_gpu_uuid_is_valid(gpus[k].uuid) &&
                    gpus[k].index <= INT32_MAX)
                        return false;
        return true;
}

static int build_links(Gpu *g, size_t self, const NvidiaGpu *gpus, size_t n_gpus, const NvidiaTopology *topo) {
        GpuLink l[GPU_LINKS_MAX] = {};
        size_t n = 0;
        uint32_t a = gpus[self].index;

        if (!topo || topo->n_gpus != n_gpus || a >= topo->n_gpus)
                return gpu_set_links(g, NULL, 0);
        for (size_t j = 0; j < n_gpus; j++) {
                uint32_t b = gpus[j].index;
                const NvidiaLink *k;
                const char *type;

                /* Links only to GPUs that are exported, each once, never to itself
                 * (a UUID listed twice is one GPU). */
                if (j == self || b >= topo->n_gpus || n >= GPU_LINKS_MAX || !row_kept(gpus, j) ||
                    streq(gpus[j].uuid, gpus[self].uuid))
                        continue;
                k = &topo->link[a][b];
                if (k->type == NVIDIA_LINK_UNKNOWN || k->type == NVIDIA_LINK_SELF)
                        continue;
                type = nvidia_link_type_to_string((NvidiaLinkType) k->type);
                if (!type)
                        continue;
                l[n++] = (GpuLink) {
                        .peer_id = (char *) gpus[j].uuid,
                        .type = (char *) type,
                        .nvlinks = k->type == NVIDIA_LINK_NVLINK ? k->nvlinks : 0,
                };
        }
        return gpu_set_links(g, l, n);
}

/* D-Bus strings must be UTF-8 (sd-bus refuses others, and one bad property would fail
 * GetManagedObjects as a whole): bytes of invalid sequences become '?'. */
void nvidia_utf8_sanitize(char *s) {
        unsigned char *p = (unsigned char *) s;

        while (*p) {
                size_t n = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 :
                           (*p & 0xf8) == 0xf0 ? 4 : 0;
                uint32_t cp = n == 2 ? (*p & 0x1fU) : n == 3 ? (*p & 0x0fU) : (*p & 0x07U);
                bool ok = n > 0;

                for (size_t k = 1; ok && k < n; k++) {
                        ok = (p[k] & 0xc0) == 0x80;
                        cp = (cp << 6) | (p[k] & 0x3fU);
                }
                /* No overlong forms, surrogates or code points past U+10FFFF. */
                if (ok && n > 1)
                        ok = !((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
                               (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff);
                if (!ok) {
                        *p++ = '?';
                        continue;
                }
                p += n;
        }
}

static void gpus_free(Gpu **l, size_t n) {
        for (size_t i = 0; i < n; i++)
                gpu_free(l[i]);
        free(l);
}

int nvidia_build_gpus(const NvidiaGpu *gpus, size_t n_gpus,
                      const NvidiaMigDevice *migs, size_t n_migs,
                      const NvidiaQMigDevice *q_migs, size_t n_q_migs,
                      const NvidiaQGpu *q_gpus, size_t n_q_gpus,
                      const NvidiaTopology *topo, const NvidiaVersions *versions,
                      const char *mig_minors, Gpu ***ret, size_t *ret_n) {
        Gpu **l;
        size_t n = 0;
        int r = 0;

        l = calloc(n_gpus + 1, sizeof(Gpu *));
        if (!l)
                return -ENOMEM;

        for (size_t i = 0; i < n_gpus; i++) {
                const NvidiaGpu *row = &gpus[i];
                const NvidiaQGpu *q = q_gpu_find(q_gpus, n_q_gpus, row->pci_address);
                uint32_t minor = q && q->minor_number >= 0 ? (uint32_t) q->minor_number : row->index;
                char node[32];
                const char *cm, *driver_version;
                Gpu *g;

                if (!nvidia_gpu_uuid_is_valid(row->uuid) || row->index > INT32_MAX) {
                        log_debug("NVIDIA GPU row %zu has no valid UUID, ignoring it.", i);
                        continue;
                }
                if (!row_kept(gpus, i)) {
                        log_warning("nvidia-smi lists UUID %s twice (GPU %" PRIu32 "); only its first GPU is used.",
                                    row->uuid, row->index);
                        continue;
                }
                r = gpu_new(row->uuid, &g);
                if (r < 0)
                        break;
                l[n++] = g;

                (void) snprintf(node, sizeof(node), "/dev/nvidia%" PRIu32, minor);
                cm = row->compute_mode == NVIDIA_COMPUTE_MODE_UNKNOWN ? ""
                                                                       : nvidia_compute_mode_to_string(row->compute_mode);
                driver_version = !isempty(row->driver_version) ? row->driver_version
                                                                : versions ? versions->driver : "";
                g->vendor_id = NVIDIA_VENDOR_ID;
                g->device_id = (uint16_t) (row->pci_device_id >> 16);
                g->memory_bytes = row->memory_mib << 20;
                g->memory_known = row->memory_mib > 0;
                g->tiles = 1;
                g->numa_node = topo && row->index < topo->n_gpus && topo->n_gpus == n_gpus ? topo->numa_node[row->index] : -1;
                g->pci_class = NVIDIA_PCI_CLASS_3D;
                g->index = (int32_t) row->index;
                strv_free(g->device_nodes);
                g->device_nodes = strv_copy((char *[]) { node, (char *) "/dev/nvidiactl", (char *) "/dev/nvidia-uvm",
                                                         (char *) "/dev/nvidia-uvm-tools", NULL });
                if (!g->device_nodes) {
                        r = -ENOMEM;
                        break;
                }
                if ((r = free_and_strdup(&g->vendor, "nvidia")) < 0 ||
                    (r = free_and_strdup(&g->driver, "nvidia")) < 0 ||
                    (r = free_and_strdup(&g->pci_address, row->pci_address)) < 0 ||
                    (r = free_and_strdup(&g->product, row->name)) < 0 ||
                    (r = free_and_strdup(&g->uuid, row->uuid)) < 0 ||
                    (r = free_and_strdup(&g->compute_mode, cm ?: "")) < 0 ||
                    (r = free_and_strdup(&g->mig_mode, row->mig_mode == NVIDIA_MIG_MODE_ENABLED ? "Enabled" :
                                                       row->mig_mode == NVIDIA_MIG_MODE_DISABLED ? "Disabled" : "")) < 0 ||
                    (r = free_and_strdup(&g->compute_capability, row->compute_cap)) < 0 ||
                    (r = free_and_strdup(&g->driver_version, driver_version)) < 0 ||
                    (r = free_and_strdup(&g->cuda_version, versions ? versions->cuda : "")) < 0)
                        break;
                nvidia_utf8_sanitize(g->product);
                r = build_mig_devices(g, row, minor, migs, n_migs, q_migs, n_q_migs, mig_minors);
                if (r < 0)
                        break;
                r = build_links(g, i, gpus, n_gpus, topo);
                if (r < 0)
                        break;
        }
        if (r < 0) {
                gpus_free(l, n);
                return r;
        }
        *ret = l;
        *ret_n = n;
        return 0;
}
