/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-sysfs.c — libFuzzer target for the probe's sysfs attribute parsers (gpu.h).
 *
 * Contract: the input, as one NUL-terminated attribute value, goes through every parser
 * (PCI ids, NUMA node, memory size, PCI address, DRM node names, driver name, memory
 * total). A parser that succeeds must return a value inside its documented bounds, and
 * must agree with itself when its output is printed and parsed again; one that fails
 * must not have written its result. Anything else, or a crash, is a bug.
 */

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemons/probe/gpu.h"
#include "daemons/probe/udev-scan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *s, again[64];
        uint16_t id = 0xdead, id2;
        int32_t numa = INT32_MIN, numa2;
        uint64_t mem = UINT64_MAX, mem2;

        s = malloc(size + 1);
        if (!s)
                abort();
        memcpy(s, data, size);
        s[size] = 0;

        if (gpu_parse_pci_id(s, &id) >= 0) {
                snprintf(again, sizeof again, "0x%04" PRIx16, id);
                if (gpu_parse_pci_id(again, &id2) < 0 || id2 != id)
                        abort();
        } else if (id != 0xdead)
                abort();

        if (gpu_parse_numa_node(s, &numa) >= 0) {
                if (numa < -1 || numa > 4095)
                        abort();
                snprintf(again, sizeof again, "%" PRIi32, numa);
                if (gpu_parse_numa_node(again, &numa2) < 0 || numa2 != numa)
                        abort();
        } else if (numa != INT32_MIN)
                abort();

        if (gpu_parse_memory_bytes(s, &mem) >= 0) {
                if (mem > GPU_MEMORY_PER_TILE_MAX)
                        abort();
                snprintf(again, sizeof again, "%" PRIu64, mem);
                if (gpu_parse_memory_bytes(again, &mem2) < 0 || mem2 != mem)
                        abort();
                /* Totals never wrap: 0 or an exact product. */
                for (uint32_t tiles = 0; tiles <= GPU_TILES_MAX; tiles += 16) {
                        uint64_t t = gpu_memory_total(mem, tiles);

                        if (t != 0 && t / tiles != mem)
                                abort();
                }
        } else if (mem != UINT64_MAX)
                abort();

        if (gpu_pci_address_is_valid(s) && strlen(s) != 12)
                abort();

        switch (gpu_node_kind_from_sysname(s)) {
        case GPU_NODE_CARD:
                if (strncmp(s, "card", 4) != 0 || strlen(s) > 4 + 10)
                        abort();
                break;
        case GPU_NODE_RENDER:
                if (strncmp(s, "renderD", 7) != 0 || strlen(s) > 7 + 10)
                        abort();
                break;
        default:
                break;
        }
        if (gpu_driver_is_intel(s) && strcmp(s, "i915") != 0 && strcmp(s, "xe") != 0)
                abort();

        /* PCI class (at most 24 bits) and GPU_MEMORY_* values (at most 2^60, decimal). */
        {
                uint32_t cls = UINT32_MAX, cls2;
                uint64_t env = UINT64_MAX, env2;

                if (gpu_parse_pci_class(s, &cls) >= 0) {
                        snprintf(again, sizeof again, "0x%06" PRIx32, cls);
                        if (cls > 0xffffff || gpu_parse_pci_class(again, &cls2) < 0 || cls2 != cls)
                                abort();
                } else if (cls != UINT32_MAX)
                        abort();
                if (gpu_parse_memory_env(s, &env) >= 0) {
                        snprintf(again, sizeof again, "%" PRIu64, env);
                        if (env > (UINT64_C(1) << 60) || gpu_parse_memory_env(again, &env2) < 0 || env2 != env)
                                abort();
                } else if (env != UINT64_MAX)
                        abort();
        }

        /* Overflow check of the total with hostile halves. */
        if (size >= 28) {
                uint64_t per_tile, override, reserved;
                uint32_t tiles;
                Gpu g = {};

                memcpy(&per_tile, data, 8);
                memcpy(&tiles, data + 8, 4);
                memcpy(&override, data + 12, 8);
                memcpy(&reserved, data + 20, 8);
                uint64_t t = gpu_memory_total(per_tile, tiles);
                if (t != 0 && (tiles == 0 || t / tiles != per_tile))
                        abort();
                /* GPU_MEMORY_RESERVED saturates, GPU_MEMORY_OVERRIDE only for unknown memory. */
                g.memory_bytes = t;
                g.memory_known = data[0] & 1;
                gpu_apply_memory_policy(&g, override, reserved);
                if (g.memory_known ? g.memory_bytes != (t >= reserved ? t - reserved : 0)
                                   : g.memory_bytes != override)
                        abort();
        }
        free(s);
        return 0;
}
