/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gpu-properties.h — reads the probe's io.kgpu.Gpu1 properties into a GpuInfo.
 *
 * Contract:
 *  - Pure over the message: no bus calls, no logging. Every value is bounded (lengths,
 *    list sizes, device nodes below /dev, words without separators) before it is used.
 */
#pragma once

#include <systemd/sd-bus.h>

#include "daemons/broker/records.h"

/*
 * Applies the io.kgpu.Gpu1 properties of an a{sv} (the message positioned at it) to
 * info. Unknown properties are skipped; a known one with a wrong type or an invalid
 * value (too long, control characters, device node outside /dev) fails with -EBADMSG
 * and leaves info untouched.
 */
int probe_gpu_properties_apply(sd_bus_message *msg, GpuInfo *info);
