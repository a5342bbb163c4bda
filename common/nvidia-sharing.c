/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * nvidia-sharing.c — the devices an NVIDIA sharing entry names (see nvidia-sharing.h).
 */

#include <string.h>

#include "common/nvidia-sharing.h"
#include "common/util.h"

/* A decimal number of 1..9 digits (leading zeros allowed, as the config accepts). */
static bool parse_number(const char *s, size_t len, uint32_t *ret) {
        uint32_t v = 0;

        if (len == 0 || len > 9)
                return false;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
                v = v * 10 + (uint32_t) (s[i] - '0');
        }
        *ret = v;
        return true;
}

bool nvidia_device_ref_matches(const char *ref, const NvidiaDeviceRef *d) {
        const char *uuid = isempty(d->gpu_uuid) ? d->gpu_id : d->gpu_uuid;
        const char *colon, *p;
        uint32_t a, b;

        if (isempty(ref))
                return false;
        if (parse_number(ref, strlen(ref), &a))
                return d->gpu_index >= 0 && (uint32_t) d->gpu_index == a;
        if ((colon = strchr(ref, ':')) && parse_number(ref, (size_t) (colon - ref), &a) &&
            parse_number(colon + 1, strlen(colon + 1), &b))
                return d->mig && d->gpu_index >= 0 && (uint32_t) d->gpu_index == a && d->mig_index == b;
        if (streq(ref, uuid) || streq(ref, d->gpu_id))
                return true;
        if (!d->mig)
                return false;
        if (streq(ref, d->mig_uuid))
                return true;
        /* MIG-GPU-<gpu uuid>/<gi>/<ci> (drivers before R470). */
        if (!isempty(uuid) && (p = startswith(ref, "MIG-")) && (p = startswith(p, uuid)) && *p == '/') {
                const char *slash = strchr(p + 1, '/');

                return slash && parse_number(p + 1, (size_t) (slash - p - 1), &a) &&
                       parse_number(slash + 1, strlen(slash + 1), &b) && d->mig_gi == a && d->mig_ci == b;
        }
        return false;
}

bool nvidia_devices_match(char * const *devices, const NvidiaDeviceRef *d) {
        if (!devices)
                return true;
        for (char * const *r = devices; *r; r++)
                if (nvidia_device_ref_matches(*r, d))
                        return true;
        return false;
}

bool config_nvidia_mps_names_gpu(const Config *c, int32_t gpu_index, const char *gpu_uuid, const char *gpu_id) {
        const NvidiaDeviceRef d = { .gpu_index = gpu_index, .gpu_uuid = gpu_uuid, .gpu_id = gpu_id };

        if (!c || (isempty(gpu_uuid) && isempty(gpu_id) && gpu_index < 0))
                return false;
        for (size_t i = 0; i < c->nvidia_mps.n_resources; i++) {
                const ConfigSharedResource *e = &c->nvidia_mps.resources[i];

                if (streq(e->name, NVIDIA_SHARING_RESOURCE_GPU) && e->replicas > 0 &&
                    nvidia_devices_match(e->devices, &d))
                        return true;
        }
        return false;
}
