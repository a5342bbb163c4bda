/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gpu.c — the Gpu object and the sysfs value parsers (see gpu.h).
 *
 * Parsers never log and never allocate; they accept only the exact forms the kernel
 * writes, so anything else is reported as -EINVAL and replaced by a safe default.
 */

#include <ctype.h>
#include <errno.h>
#include <string.h>

#include "common/util.h"
#include "daemons/probe/gpu.h"

int gpu_new(const char *id, Gpu **ret) {
        _cleanup_(gpu_freep) Gpu *g = NULL;

        if (isempty(id))
                return -EINVAL;

        g = calloc(1, sizeof(Gpu));
        if (!g)
                return -ENOMEM;

        g->id = strdup(id);
        g->vendor = strdup("");
        g->driver = strdup("");
        g->pci_address = strdup("");
        g->product = strdup("");
        g->card_node = strdup("");
        g->render_node = strdup("");
        g->uuid = strdup("");
        g->health = strdup(GPU_HEALTHY);
        g->health_reason = strdup("");
        g->device_nodes = calloc(1, sizeof(char *));
        g->by_path_nodes = calloc(1, sizeof(char *));
        g->mei_nodes = calloc(1, sizeof(char *));
        g->physical_function = strdup("");
        if (!g->by_path_nodes || !g->mei_nodes || !g->physical_function)
                return -ENOMEM;
        if (!g->id || !g->vendor || !g->driver || !g->pci_address || !g->product ||
            !g->card_node || !g->render_node || !g->uuid || !g->health ||
            !g->health_reason || !g->device_nodes)
                return -ENOMEM;
        g->compute_mode = strdup("");
        g->mig_mode = strdup("");
        g->compute_capability = strdup("");
        g->driver_version = strdup("");
        g->cuda_version = strdup("");
        g->mps_state = strdup("");
        g->mps_pipe_directory = strdup("");
        if (!g->compute_mode || !g->mig_mode || !g->compute_capability || !g->driver_version ||
            !g->cuda_version || !g->mps_state || !g->mps_pipe_directory)
                return -ENOMEM;
        g->tiles = 1;
        g->numa_node = -1;
        g->index = -1;

        *ret = TAKE_PTR(g);
        return 0;
}

Gpu *gpu_free(Gpu *g) {
        if (!g)
                return NULL;
        free(g->id);
        free(g->vendor);
        free(g->driver);
        free(g->pci_address);
        free(g->product);
        free(g->card_node);
        free(g->render_node);
        strv_free(g->device_nodes);
        free(g->uuid);
        free(g->health);
        free(g->health_reason);
        strv_free(g->by_path_nodes);
        strv_free(g->mei_nodes);
        free(g->physical_function);
        free(g->card_syspath);
        free(g->render_syspath);
        free(g->compute_mode);
        free(g->mig_mode);
        gpu_mig_devices_free(g->mig_devices, g->n_mig_devices);
        free(g->compute_capability);
        free(g->driver_version);
        free(g->cuda_version);
        gpu_links_free(g->links, g->n_links);
        free(g->mps_state);
        free(g->mps_pipe_directory);
        return mfree(g);
}

void gpu_mig_devices_free(GpuMigDevice *l, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(l[i].uuid);
                free(l[i].profile);
                strv_free(l[i].device_nodes);
        }
        free(l);
}

void gpu_links_free(GpuLink *l, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(l[i].peer_id);
                free(l[i].type);
        }
        free(l);
}

int gpu_set_mig_devices(Gpu *g, const GpuMigDevice *src, size_t n) {
        GpuMigDevice *l = NULL;

        if (n > GPU_MIG_DEVICES_MAX)
                return -E2BIG;
        if (n > 0) {
                l = calloc(n, sizeof(GpuMigDevice));
                if (!l)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                l[i] = (GpuMigDevice) {
                        .device_index = src[i].device_index,
                        .uuid = strdup(src[i].uuid ?: ""),
                        .profile = strdup(src[i].profile ?: ""),
                        .gi_id = src[i].gi_id,
                        .ci_id = src[i].ci_id,
                        .device_nodes = src[i].device_nodes ? strv_copy(src[i].device_nodes)
                                                            : calloc(1, sizeof(char *)),
                        .memory_bytes = src[i].memory_bytes,
                };
                if (!l[i].uuid || !l[i].profile || !l[i].device_nodes) {
                        gpu_mig_devices_free(l, i + 1);
                        return -ENOMEM;
                }
        }
        gpu_mig_devices_free(g->mig_devices, g->n_mig_devices);
        g->mig_devices = l;
        g->n_mig_devices = n;
        return 0;
}

int gpu_set_links(Gpu *g, const GpuLink *src, size_t n) {
        GpuLink *l = NULL;

        if (n > GPU_LINKS_MAX)
                return -E2BIG;
        if (n > 0) {
                l = calloc(n, sizeof(GpuLink));
                if (!l)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                l[i] = (GpuLink) {
                        .peer_id = strdup(src[i].peer_id ?: ""),
                        .type = strdup(src[i].type ?: ""),
                        .nvlinks = src[i].nvlinks,
                };
                if (!l[i].peer_id || !l[i].type) {
                        gpu_links_free(l, i + 1);
                        return -ENOMEM;
                }
        }
        gpu_links_free(g->links, g->n_links);
        g->links = l;
        g->n_links = n;
        return 0;
}

bool gpu_mig_devices_equal(const GpuMigDevice *a, size_t n_a, const GpuMigDevice *b, size_t n_b) {
        if (n_a != n_b)
                return false;
        for (size_t i = 0; i < n_a; i++)
                if (a[i].device_index != b[i].device_index || !streq(a[i].uuid, b[i].uuid) ||
                    !streq(a[i].profile, b[i].profile) || a[i].gi_id != b[i].gi_id ||
                    a[i].ci_id != b[i].ci_id || a[i].memory_bytes != b[i].memory_bytes ||
                    !strv_equal(a[i].device_nodes, b[i].device_nodes))
                        return false;
        return true;
}

bool gpu_links_equal(const GpuLink *a, size_t n_a, const GpuLink *b, size_t n_b) {
        if (n_a != n_b)
                return false;
        for (size_t i = 0; i < n_a; i++)
                if (!streq(a[i].peer_id, b[i].peer_id) || !streq(a[i].type, b[i].type) ||
                    a[i].nvlinks != b[i].nvlinks)
                        return false;
        return true;
}

int gpu_update_device_nodes(Gpu *g) {
        _cleanup_strv_free_ char **l = NULL;
        int r;

        l = calloc(1, sizeof(char *));
        if (!l)
                return -ENOMEM;
        if (!isempty(g->card_node)) {
                r = strv_extend(&l, g->card_node);
                if (r < 0)
                        return r;
        }
        if (!isempty(g->render_node)) {
                r = strv_extend(&l, g->render_node);
                if (r < 0)
                        return r;
        }
        strv_free(g->device_nodes);
        g->device_nodes = TAKE_PTR(l);
        return 0;
}

int gpu_diff_properties(const Gpu *a, const Gpu *b, char ***ret) {
        _cleanup_strv_free_ char **l = NULL;
        int r = 0;

        l = calloc(1, sizeof(char *));
        if (!l)
                return -ENOMEM;

#define DIFF(cond, name)                                        \
        do {                                                    \
                if (r >= 0 && (cond))                           \
                        r = strv_extend(&l, name);              \
        } while (0)

        DIFF(!streq(a->driver, b->driver), "Driver");
        DIFF(!streq(a->product, b->product), "Product");
        DIFF(a->memory_bytes != b->memory_bytes, "MemoryBytes");
        DIFF(a->tiles != b->tiles, "Tiles");
        DIFF(a->numa_node != b->numa_node, "NumaNode");
        DIFF(!streq(a->card_node, b->card_node), "CardNode");
        DIFF(!streq(a->render_node, b->render_node), "RenderNode");
        DIFF(!strv_equal(a->device_nodes, b->device_nodes), "DeviceNodes");
        DIFF(!streq(a->uuid, b->uuid), "Uuid");
        DIFF(!streq(a->health, b->health), "Health");
        DIFF(!streq(a->health_reason, b->health_reason), "HealthReason");
        DIFF(!strv_equal(a->by_path_nodes, b->by_path_nodes), "ByPathNodes");
        DIFF(!strv_equal(a->mei_nodes, b->mei_nodes), "MeiNodes");
        DIFF(!streq(a->physical_function, b->physical_function), "PhysicalFunction");
        DIFF(a->index != b->index, "Index");
        DIFF(!streq(a->compute_mode, b->compute_mode), "ComputeMode");
        DIFF(!streq(a->mig_mode, b->mig_mode), "MigMode");
        DIFF(!gpu_mig_devices_equal(a->mig_devices, a->n_mig_devices, b->mig_devices, b->n_mig_devices),
             "MigDevices");
        DIFF(!streq(a->compute_capability, b->compute_capability), "ComputeCapability");
        DIFF(!streq(a->driver_version, b->driver_version), "DriverVersion");
        DIFF(!streq(a->cuda_version, b->cuda_version), "CudaVersion");
        DIFF(!gpu_links_equal(a->links, a->n_links, b->links, b->n_links), "Links");
        DIFF(!streq(a->mps_state, b->mps_state), "MpsState");
        DIFF(!streq(a->mps_pipe_directory, b->mps_pipe_directory), "MpsPipeDirectory");
#undef DIFF
        if (r < 0)
                return r;

        *ret = TAKE_PTR(l);
        return 0;
}

int gpu_copy_properties(Gpu *dst, const Gpu *src) {
        _cleanup_strv_free_ char **nodes = NULL, **by_path = NULL, **mei = NULL;
        int r;

        nodes = strv_copy(src->device_nodes);
        by_path = strv_copy(src->by_path_nodes);
        mei = strv_copy(src->mei_nodes);
        if (!nodes || !by_path || !mei)
                return -ENOMEM;

        if ((r = free_and_strdup(&dst->vendor, src->vendor)) < 0 ||
            (r = free_and_strdup(&dst->driver, src->driver)) < 0 ||
            (r = free_and_strdup(&dst->pci_address, src->pci_address)) < 0 ||
            (r = free_and_strdup(&dst->product, src->product)) < 0 ||
            (r = free_and_strdup(&dst->card_node, src->card_node)) < 0 ||
            (r = free_and_strdup(&dst->render_node, src->render_node)) < 0 ||
            (r = free_and_strdup(&dst->uuid, src->uuid)) < 0 ||
            (r = free_and_strdup(&dst->health, src->health)) < 0 ||
            (r = free_and_strdup(&dst->health_reason, src->health_reason)) < 0 ||
            (r = free_and_strdup(&dst->physical_function, src->physical_function)) < 0 ||
            (r = free_and_strdup(&dst->card_syspath, src->card_syspath)) < 0 ||
            (r = free_and_strdup(&dst->render_syspath, src->render_syspath)) < 0 ||
            (r = free_and_strdup(&dst->compute_mode, src->compute_mode)) < 0 ||
            (r = free_and_strdup(&dst->mig_mode, src->mig_mode)) < 0 ||
            (r = free_and_strdup(&dst->compute_capability, src->compute_capability)) < 0 ||
            (r = free_and_strdup(&dst->driver_version, src->driver_version)) < 0 ||
            (r = free_and_strdup(&dst->cuda_version, src->cuda_version)) < 0 ||
            (r = free_and_strdup(&dst->mps_state, src->mps_state)) < 0 ||
            (r = free_and_strdup(&dst->mps_pipe_directory, src->mps_pipe_directory)) < 0 ||
            (r = gpu_set_mig_devices(dst, src->mig_devices, src->n_mig_devices)) < 0 ||
            (r = gpu_set_links(dst, src->links, src->n_links)) < 0)
                return r;

        dst->vendor_id = src->vendor_id;
        dst->device_id = src->device_id;
        dst->memory_bytes = src->memory_bytes;
        dst->tiles = src->tiles;
        dst->numa_node = src->numa_node;
        dst->pci_class = src->pci_class;
        dst->index = src->index;
        dst->memory_known = src->memory_known;
        strv_free(dst->device_nodes);
        dst->device_nodes = TAKE_PTR(nodes);
        strv_free(dst->by_path_nodes);
        dst->by_path_nodes = TAKE_PTR(by_path);
        strv_free(dst->mei_nodes);
        dst->mei_nodes = TAKE_PTR(mei);
        return 0;
}

int gpu_set_health(Gpu *g, const char *health, const char *reason) {
        int r;

        if (streq(g->health, health) && streq(g->health_reason, reason ?: ""))
                return 0;
        r = free_and_strdup(&g->health, health);
        if (r < 0)
                return r;
        r = free_and_strdup(&g->health_reason, reason ?: "");
        if (r < 0)
                return r;
        return 1;
}

static bool str_is_bounded(const char *s) {
        return s && strnlen(s, GPU_SYSFS_VALUE_MAX + 1) <= GPU_SYSFS_VALUE_MAX;
}

int gpu_parse_pci_id(const char *s, uint16_t *ret) {
        const char *p;
        unsigned v = 0;
        size_t n = 0;

        if (!str_is_bounded(s))
                return -EINVAL;
        p = startswith(s, "0x") ?: startswith(s, "0X") ?: s;
        for (; *p; p++, n++) {
                if (!isxdigit((unsigned char) *p) || n >= 4)
                        return -EINVAL;
                v = v * 16 + (unsigned) (isdigit((unsigned char) *p) ? *p - '0'
                                                                    : (tolower((unsigned char) *p) - 'a' + 10));
        }
        if (n == 0)
                return -EINVAL;
        *ret = (uint16_t) v;
        return 0;
}

int gpu_parse_numa_node(const char *s, int32_t *ret) {
        int32_t v;
        int r;

        if (!str_is_bounded(s))
                return -EINVAL;
        r = safe_atoi32(s, &v);
        if (r < 0)
                return r;
        /* The kernel writes -1 for "no node"; CONFIG_NODES_SHIFT caps real nodes at 1024. */
        if (v < -1 || v > 4095)
                return -ERANGE;
        *ret = v;
        return 0;
}

int gpu_parse_memory_bytes(const char *s, uint64_t *ret) {
        uint64_t v;
        int r;

        if (!str_is_bounded(s))
                return -EINVAL;
        r = safe_atou64(s, &v);
        if (r < 0)
                return r;
        if (v > GPU_MEMORY_PER_TILE_MAX)
                return -ERANGE;
        *ret = v;
        return 0;
}

bool gpu_pci_address_is_valid(const char *s) {
        /* DDDD:BB:DD.F */
        static const char pattern[] = "xxxx:xx:xx.x";

        if (!s || strnlen(s, sizeof(pattern)) != sizeof(pattern) - 1)
                return false;
        for (size_t i = 0; i < sizeof(pattern) - 1; i++) {
                if (pattern[i] == 'x') {
                        if (!isxdigit((unsigned char) s[i]))
                                return false;
                } else if (s[i] != pattern[i])
                        return false;
        }
        return s[11] >= '0' && s[11] <= '7';
}

static bool all_digits(const char *s) {
        size_t n = 0;

        for (; *s; s++, n++)
                if (!isdigit((unsigned char) *s) || n >= 10)
                        return false;
        return n > 0;
}

GpuNodeKind gpu_node_kind_from_sysname(const char *sysname) {
        const char *p;

        if (!sysname)
                return GPU_NODE_NONE;
        p = startswith(sysname, "renderD");
        if (p)
                return all_digits(p) ? GPU_NODE_RENDER : GPU_NODE_NONE;
        p = startswith(sysname, "card");
        if (p)
                return all_digits(p) ? GPU_NODE_CARD : GPU_NODE_NONE;
        return GPU_NODE_NONE;
}

uint64_t gpu_memory_total(uint64_t per_tile, uint32_t tiles) {
        if (per_tile == 0 || tiles == 0)
                return 0;
        if (per_tile > UINT64_MAX / tiles)
                return 0;
        return per_tile * tiles;
}

void gpu_apply_memory_policy(Gpu *g, uint64_t override, uint64_t reserved) {
        if (!g->memory_known)
                g->memory_bytes = override;
        else
                g->memory_bytes = g->memory_bytes > reserved ? g->memory_bytes - reserved : 0;
}

int gpu_parse_memory_env(const char *s, uint64_t *ret) {
        uint64_t v;
        int r;

        if (!str_is_bounded(s) || isempty(s))
                return -EINVAL;
        for (const char *p = s; *p; p++)
                if (!isdigit((unsigned char) *p))
                        return -EINVAL;
        r = safe_atou64(s, &v);
        if (r < 0)
                return r;
        if (v > (UINT64_C(1) << 60))
                return -ERANGE;
        *ret = v;
        return 0;
}

int gpu_parse_pci_class(const char *s, uint32_t *ret) {
        const char *p;
        uint32_t v = 0;
        size_t n = 0;

        if (!str_is_bounded(s))
                return -EINVAL;
        p = startswith(s, "0x") ?: s;
        for (; *p; p++, n++) {
                if (!isxdigit((unsigned char) *p) || n >= 6)
                        return -EINVAL;
                v = v * 16 + (uint32_t) (isdigit((unsigned char) *p) ? *p - '0'
                                                                    : (tolower((unsigned char) *p) - 'a' + 10));
        }
        if (n == 0)
                return -EINVAL;
        *ret = v;
        return 0;
}
