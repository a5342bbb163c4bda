/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * source.c — the table of GPU sources (see source.h).
 */

#include "common/util.h"
#include "daemons/probe/source-intel.h"
#include "daemons/probe/source-nvidia.h"
#include "daemons/probe/source.h"

const GpuSource * const gpu_sources[] = {
        &gpu_source_intel,
        &gpu_source_nvidia,
};

const size_t gpu_sources_count = ELEMENTSOF(gpu_sources);

_Static_assert(ELEMENTSOF(gpu_sources) <= GPU_SOURCES_MAX, "GPU_SOURCES_MAX too small");

const GpuSource *gpu_source_find(const char *vendor) {
        for (size_t i = 0; i < gpu_sources_count; i++)
                if (streq_ptr(gpu_sources[i]->vendor, vendor))
                        return gpu_sources[i];
        return NULL;
}
