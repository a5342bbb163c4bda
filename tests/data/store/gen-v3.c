/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Makes tests/data/store/kgpu-v3.db with the store of main (schema v3). */
#include <stdio.h>
#include <stdlib.h>
#include "daemons/broker/store.h"

int main(int argc, char **argv) {
        Store *s = NULL;
        char *err = NULL;
        char *i1[] = { "0000:03:00.0", NULL }, *i2[] = { "0000:04:00.0", NULL };
        char *n1[] = { "GPU-4a5e1f3c-9d2b-4e8f-a1c7-0b3d5e7f9a11::0", "GPU-4a5e1f3c-9d2b-4e8f-a1c7-0b3d5e7f9a11::1", NULL };
        char *n2[] = { "GPU-7c8d9e0f-1a2b-4c3d-8e5f-6a7b8c9d0e22::0", NULL };
        char *m3[] = { "MIG-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "MIG-1f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
                       "MIG-2f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", NULL };
        char *tmp[] = { "0000:05:00.0", NULL };
        char **r1[] = { i1 }, **r2[] = { i2 }, **rn[] = { n1, n2 }, **rm[] = { m3 }, **rt[] = { tmp };
        uint64_t id[2], last;
        StoreHolder h;
        StoreInventoryGpu gpus[2] = {
                { .path = "/io/kgpu/Probe1/gpu/_30000_3a03_3a00_2e0", .id = "0000:03:00.0", .vendor = "intel",
                  .driver = "i915", .card_node = "/dev/dri/card0", .render_node = "/dev/dri/renderD128",
                  .health_reason = "", .device_nodes = "/dev/dri/card0\n/dev/dri/renderD128", .numa_node = 0,
                  .device_id = 0x56a0, .healthy = true },
                { .path = "/io/kgpu/Probe1/gpu/_30000_3a04_3a00_2e0", .id = "0000:04:00.0", .vendor = "intel",
                  .driver = "xe", .card_node = "/dev/dri/card1", .render_node = "/dev/dri/renderD129",
                  .health_reason = "", .device_nodes = NULL, .numa_node = -1, .device_id = 0xe20b, .healthy = true },
        };

        if (store_open(argv[1], "3b1f0c2e-5d4a-4f6b-9e8d-7c6b5a4f3e2d", &s, &err) < 0) { fprintf(stderr, "%s\n", err); return 1; }
        if (store_allocate(s, "gpu.intel.com/i915", r1, 1, 1764200000000000ULL, id, NULL, NULL) < 0) return 2;
        h = (StoreHolder) { .id = id[0], .pod_namespace = "default", .pod_name = "render-0", .container_name = "main" };
        if (store_reconcile(s, NULL, 0, &h, 1, 1764200001000000ULL) < 0) return 3;
        if (store_allocate(s, "gpu.intel.com/i915", r2, 1, 1764200002000000ULL, id, NULL, NULL) < 0) return 4;
        /* Superseded by the next one: deleted. */
        if (store_allocate(s, "gpu.intel.com/i915", r2, 1, 1764200003000000ULL, id, NULL, NULL) < 0) return 5;
        if (store_allocate(s, "nvidia.com/gpu", rn, 2, 1764200004000000ULL, id, NULL, NULL) < 0) return 6;
        h = (StoreHolder) { .id = id[1], .pod_namespace = "ml", .pod_name = "train-7f9c", .container_name = "worker" };
        if (store_reconcile(s, NULL, 0, &h, 1, 1764200005000000ULL) < 0) return 7;
        if (store_allocate(s, "nvidia.com/mig-1g.10gb", rm, 1, 1764200006000000ULL, id, NULL, NULL) < 0) return 8;
        /* The newest is released: AUTOINCREMENT's sequence stays above every id left. */
        if (store_allocate(s, "gpu.intel.com/i915", rt, 1, 1764200007000000ULL, &last, NULL, NULL) < 0) return 9;
        if (store_reconcile(s, &last, 1, NULL, 0, 1764200008000000ULL) < 0) return 10;
        if (store_save_inventory(s, gpus, 2) < 0) return 11;
        store_free(s);
        return 0;
}
