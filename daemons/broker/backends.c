/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * backends.c — the table of vendor backends the registry serves (backend.h).
 *
 * Contract: the order is the order of the GPU hooks and of configure; a third vendor
 * (AMD, say) is one more module and one more entry here.
 */

#include <stddef.h>

#include "daemons/broker/backend.h"

const Backend *const resource_backends[] = {
        &intel_backend,
        &nvidia_backend,
        NULL,
};
