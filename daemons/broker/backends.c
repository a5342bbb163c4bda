/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * backends.c — the table of vendor backends the registry serves (backend.h).
 *
 * Contract: the order is the order of the GPU hooks and of configure; a third vendor
 * (AMD, say) is one more module and one more entry here.
 */

#include <stddef.h>

#include "common/util.h"
#include "daemons/broker/backend.h"

const Backend *const resource_backends[] = {
        &intel_backend,
        &nvidia_backend,
        NULL,
};

/* The registry keeps one state slot per entry. */
_Static_assert(ELEMENTSOF(resource_backends) <= RESOURCE_BACKENDS_MAX + 1, "raise RESOURCE_BACKENDS_MAX");
