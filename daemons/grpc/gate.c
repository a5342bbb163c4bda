/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gate.c — checks a broker's Allocate answer against the probe's GPU objects (see
 * gate.h).
 *
 * Per container: the request's ids become a grant (the distinct GPUs and MIG devices
 * they name, found through the sorted index of probe-gpus.c), then every entry of the
 * answer must be found in that grant. Grants hold a few units, so the entry checks are
 * linear scans over them.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "daemons/grpc/gate.h"

#define INTEL_PREFIX            "gpu.intel.com/"
#define NVIDIA_PREFIX           "nvidia.com/"
#define MONITORING_SUFFIX       "_monitoring"
#define MONITORING_COMBINED     "monitoring"      /* gpu.intel.com/monitoring: every Intel GPU */
#define MONITORING_ID           "all"
#define SHARE_DIGITS_MAX        9
#define QUOTE_MAX               100     /* bytes of hostile text quoted in a reason */
#define ANNOTATION_NAME_MAX     63
#define MPS_LIMIT_MAX           256     /* bytes in CUDA_MPS_PINNED_DEVICE_MEM_LIMIT */
#define AFFINITY_MASK_MAX       1024    /* bytes in ZE_AFFINITY_MASK */

typedef enum Vendor {
        VENDOR_NONE,
        VENDOR_INTEL,
        VENDOR_NVIDIA,
} Vendor;

typedef struct Unit {
        const ProbeGpu *gpu;
        int32_t mig;            /* index in gpu->migs, -1: the whole GPU */
} Unit;

typedef struct Grant {
        Vendor vendor;
        bool monitoring;        /* an Intel monitoring device: its GPUs' MeiNodes too */
        Unit *units;
        size_t n_units;
        size_t room;
        char *mps_container;    /* GATE_MPS_CONTAINER_ROOT/<resource>/pipe when a granted GPU runs MPS */
} Grant;

static void grant_done(Grant *g) {
        free(g->units);
        free(g->mps_container);
        *g = (Grant) {};
}

static int grant_add(Grant *g, const ProbeGpu *gpu, int32_t mig) {
        for (size_t i = 0; i < g->n_units; i++)
                if (g->units[i].gpu == gpu && g->units[i].mig == mig)
                        return 0;
        if (array_reserve((void **) &g->units, &g->room, g->n_units + 1, sizeof(Unit)) < 0)
                return -ENOMEM;
        g->units[g->n_units++] = (Unit) { gpu, mig };
        return 0;
}

/* "<n>" of a share or replica suffix: 1..SHARE_DIGITS_MAX digits, no leading zero. */
static bool share_number_valid(const char *s) {
        size_t n = strlen(s);

        if (n == 0 || n > SHARE_DIGITS_MAX || (s[0] == '0' && n > 1))
                return false;
        return s[strspn(s, "0123456789")] == 0;
}

static const ProbeGpu *find_vendor(const ProbeGpus *gpus, const char *key, size_t len, const char *vendor,
                                   int32_t *ret_mig) {
        int32_t mig = -1;
        const ProbeGpu *g = probe_gpus_find(gpus, key, len, &mig);

        if (!g || !streq(g->vendor, vendor))
                return NULL;
        *ret_mig = mig;
        return g;
}

/* The GPU (or MIG device) an id of the request names, share suffix stripped. */
static const ProbeGpu *id_lookup(const ProbeGpus *gpus, Vendor vendor, const char *id, int32_t *ret_mig) {
        const char *vname = vendor == VENDOR_INTEL ? "intel" : "nvidia";
        const ProbeGpu *g;
        const char *suffix = NULL;

        g = find_vendor(gpus, id, strlen(id), vname, ret_mig);
        if (g)
                return g;
        if (vendor == VENDOR_INTEL) {
                /* "<pci address>-<n>" (intel.sharedDevNum). */
                suffix = strrchr(id, '-');
                if (suffix && suffix > id && share_number_valid(suffix + 1))
                        return find_vendor(gpus, id, (size_t) (suffix - id), vname, ret_mig);
                return NULL;
        }
        /* "<uuid>::<n>" (time-slicing and MPS replicas). */
        for (const char *p = id; (p = strstr(p, "::")); p++)
                suffix = p;
        if (suffix && suffix > id && share_number_valid(suffix + 2))
                return find_vendor(gpus, id, (size_t) (suffix - id), vname, ret_mig);
        return NULL;
}

static int grant_build(Grant *g, const ProbeGpus *gpus, const char *resource, char * const *ids, size_t n_ids) {
        const char *rest, *driver = NULL;
        size_t driver_len = 0;
        bool any_driver = false;
        int r;

        if ((rest = startswith(resource, INTEL_PREFIX))) {
                size_t l = strlen(rest), sl = strlen(MONITORING_SUFFIX);

                g->vendor = VENDOR_INTEL;
                if (l > sl && streq(rest + l - sl, MONITORING_SUFFIX)) {
                        driver = rest;
                        driver_len = l - sl;
                } else if (streq(rest, MONITORING_COMBINED)) {
                        driver = rest;
                        any_driver = true;
                }
        } else if (startswith(resource, NVIDIA_PREFIX))
                g->vendor = VENDOR_NVIDIA;
        else
                return 0;

        for (size_t i = 0; i < n_ids; i++) {
                const ProbeGpu *gpu;
                int32_t mig = -1;

                if (driver) {
                        /* The monitoring device grants every Intel GPU of its driver (every
                         * Intel GPU for the combined one). */
                        if (!streq(ids[i], MONITORING_ID))
                                continue;
                        g->monitoring = true;
                        for (size_t j = 0; j < gpus->n_gpus; j++) {
                                const ProbeGpu *x = gpus->gpus[j];

                                if (streq(x->vendor, "intel") &&
                                    (any_driver || (strlen(x->driver) == driver_len &&
                                                    memcmp(x->driver, driver, driver_len) == 0))) {
                                        r = grant_add(g, x, -1);
                                        if (r < 0)
                                                return r;
                                }
                        }
                        continue;
                }
                gpu = id_lookup(gpus, g->vendor, ids[i], &mig);
                if (!gpu || (g->vendor == VENDOR_INTEL && mig >= 0))
                        continue;
                r = grant_add(g, gpu, mig);
                if (r < 0)
                        return r;
        }

        for (size_t i = 0; i < g->n_units; i++)
                if (g->vendor == VENDOR_NVIDIA && !isempty(g->units[i].gpu->mps_pipe_directory)) {
                        if (asprintf(&g->mps_container, "%s/%s/pipe", GATE_MPS_CONTAINER_ROOT, resource) < 0) {
                                g->mps_container = NULL;
                                return -ENOMEM;
                        }
                        break;
                }
        return 0;
}

static bool eqn(const char *s, const char *name, size_t len) {
        return !isempty(s) && strlen(s) == len && memcmp(s, name, len) == 0;
}

/* Whether name[0..len) names a granted device to the runtime (a CDI device name, an entry
 * of NVIDIA_VISIBLE_DEVICES, a volume-mount file name). */
static bool name_granted(const Grant *g, Vendor vendor, const char *name, size_t len) {
        if (len == 0 || g->vendor != vendor)
                return false;
        for (size_t i = 0; i < g->n_units; i++) {
                const ProbeGpu *gpu = g->units[i].gpu;
                char buf[32];
                int k;

                if (vendor == VENDOR_INTEL) {
                        if (eqn(gpu->id, name, len))
                                return true;
                        continue;
                }
                if (g->units[i].mig < 0) {
                        if (eqn(gpu->id, name, len) || eqn(gpu->uuid, name, len))
                                return true;
                        k = gpu->index >= 0 ? snprintf(buf, sizeof(buf), "%d", gpu->index) : -1;
                } else {
                        const ProbeMig *mig = &gpu->migs[g->units[i].mig];

                        if (eqn(mig->uuid, name, len))
                                return true;
                        k = gpu->index >= 0 ? snprintf(buf, sizeof(buf), "%d:%u", gpu->index, mig->index) : -1;
                }
                if (k > 0 && (size_t) k == len && memcmp(buf, name, len) == 0)
                        return true;
        }
        return false;
}

/* "<kind>=<name>" of one of kgpu's CDI kinds naming a granted device. */
static bool cdi_granted(const Grant *g, const char *s, size_t len) {
        const char *eq = memchr(s, '=', len);
        size_t kl;

        if (!eq)
                return false;
        kl = (size_t) (eq - s);
        if (kl == strlen(GATE_CDI_KIND_INTEL) && memcmp(s, GATE_CDI_KIND_INTEL, kl) == 0)
                return name_granted(g, VENDOR_INTEL, eq + 1, len - kl - 1);
        if (kl == strlen(GATE_CDI_KIND_NVIDIA) && memcmp(s, GATE_CDI_KIND_NVIDIA, kl) == 0)
                return name_granted(g, VENDOR_NVIDIA, eq + 1, len - kl - 1);
        return false;
}

typedef bool (*ItemCheck)(const Grant *g, const char *item, size_t len);

static bool nvidia_name_granted(const Grant *g, const char *item, size_t len) {
        return name_granted(g, VENDOR_NVIDIA, item, len);
}

/* A non-empty ','-separated list, every item passing check. */
static bool list_granted(const Grant *g, const char *s, ItemCheck check) {
        if (isempty(s))
                return false;
        for (;;) {
                size_t l = strcspn(s, ",");

                if (!check(g, s, l))
                        return false;
                if (s[l] == 0)
                        return true;
                s += l + 1;
        }
}

static bool node_granted(const Grant *g, const char *path) {
        static const char *const control[] = { GATE_NVIDIA_CONTROL_NODES };

        if (isempty(path))
                return false;
        for (size_t i = 0; i < g->n_units; i++) {
                const ProbeGpu *gpu = g->units[i].gpu;

                if (streq(gpu->card_node, path) || streq(gpu->render_node, path) ||
                    strv_contains(gpu->device_nodes, path))
                        return true;
                if (g->monitoring && strv_contains(gpu->mei_nodes, path))
                        return true;
                if (g->units[i].mig >= 0 && strv_contains(gpu->migs[g->units[i].mig].nodes, path))
                        return true;
        }
        if (g->vendor == VENDOR_NVIDIA && g->n_units > 0)
                for (size_t i = 0; i < ELEMENTSOF(control); i++)
                        if (streq(control[i], path))
                                return true;
        return false;
}

static bool permissions_valid(const char *p) {
        bool r = false, w = false;

        if (isempty(p))
                return false;
        for (; *p; p++) {
                if (*p == 'r' && !r)
                        r = true;
                else if (*p == 'w' && !w)
                        w = true;
                else
                        return false;
        }
        return true;
}

static bool mount_granted(const Grant *g, const V1beta1__Mount *mt) {
        const char *cp = mt->container_path, *hp = mt->host_path, *name;

        if (isempty(cp) || isempty(hp) || g->n_units == 0)
                return false;
        if (g->vendor == VENDOR_INTEL) {
                if (!streq(cp, hp) || !mt->read_only)
                        return false;
                if (streq(hp, GATE_BY_PATH_DIR))
                        return true;
                for (size_t i = 0; i < g->n_units; i++)
                        if (strv_contains(g->units[i].gpu->by_path_nodes, hp))
                                return true;
                return false;
        }
        if (g->vendor != VENDOR_NVIDIA)
                return false;
        name = startswith(cp, GATE_NVIDIA_VOLUME_MOUNTS_ROOT "/");
        if (name && streq(hp, GATE_NVIDIA_VOLUME_MOUNTS_HOST))
                return name_granted(g, VENDOR_NVIDIA, name, strlen(name));
        if (!g->mps_container)
                return false;
        if (streq(cp, GATE_MPS_SHM))
                return streq(hp, GATE_MPS_SHM);
        /* Read-only: a pod that could write there could break the daemon's stop. */
        if (streq(cp, g->mps_container) && mt->read_only)
                for (size_t i = 0; i < g->n_units; i++)
                        if (streq(g->units[i].gpu->mps_pipe_directory, hp))
                                return true;
        return false;
}

/* "<digits>=<digits>M", ','-separated, as CUDA_MPS_PINNED_DEVICE_MEM_LIMIT takes it. */
static bool mps_limit_item(const Grant *g, const char *s, size_t len) {
        size_t a = strspn(s, "0123456789"), b;

        if (a == 0 || a >= len || s[a] != '=')
                return false;
        b = strspn(s + a + 1, "0123456789");
        return b > 0 && a + 1 + b + 1 == len && s[a + 1 + b] == 'M';
}

/* "<i>" or "<i>.<t>" (Level Zero device and sub-device, decimal), i below the number of
 * granted GPUs: the device index is what the container sees, so it can name no other. */
static bool affinity_item(const Grant *g, const char *s, size_t len) {
        size_t a = strspn(s, "0123456789"), b = 0;
        uint32_t i = 0;

        if (a == 0 || a > 4 || a > len)
                return false;
        for (size_t k = 0; k < a; k++)
                i = i * 10 + (uint32_t) (s[k] - '0');
        if (a < len) {
                if (s[a] != '.')
                        return false;
                b = strspn(s + a + 1, "0123456789");
                if (b == 0 || b > 4 || a + 1 + b != len)
                        return false;
        }
        return i < g->n_units;
}

static bool env_granted(const Grant *g, const char *key, const char *value) {
        uint32_t pct;

        if (g->vendor == VENDOR_INTEL && !g->monitoring && g->n_units > 0 && value &&
            streq(key, "ZE_AFFINITY_MASK"))
                return strlen(value) <= AFFINITY_MASK_MAX && list_granted(g, value, affinity_item);
        if (g->vendor != VENDOR_NVIDIA || g->n_units == 0 || !value)
                return false;
        if (streq(key, "NVIDIA_VISIBLE_DEVICES"))
                return streq(value, GATE_NVIDIA_VOLUME_MOUNTS_ROOT) || list_granted(g, value, nvidia_name_granted);
        if (!g->mps_container)
                return false;
        if (streq(key, "CUDA_MPS_PIPE_DIRECTORY"))
                return streq(value, g->mps_container);
        if (streq(key, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"))
                return strlen(value) <= MPS_LIMIT_MAX && list_granted(g, value, mps_limit_item);
        if (streq(key, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"))
                return safe_atou32(value, &pct) >= 0 && pct >= 1 && pct <= 100 &&
                       value[strspn(value, "0123456789")] == 0;
        return false;
}

static bool annotation_granted(const Grant *g, const char *prefix, const char *key, const char *value) {
        const char *name = isempty(prefix) ? NULL : startswith(key, prefix);
        size_t l;

        if (!name)
                return false;
        l = strlen(name);
        if (l == 0 || l > ANNOTATION_NAME_MAX ||
            name[strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")] != 0)
                return false;
        return list_granted(g, value, cdi_granted);
}

/* A printable, bounded, quoted copy of hostile text for a reason. */
static const char *quote(const char *s, char buf[static QUOTE_MAX + 8]) {
        size_t k = 0;

        buf[k++] = '\'';
        for (const unsigned char *p = (const unsigned char *) (s ?: ""); *p; p++) {
                if (k >= QUOTE_MAX) {
                        memcpy(buf + k, "...", 3);
                        k += 3;
                        break;
                }
                buf[k++] = *p >= 0x20 && *p < 0x7f ? (char) *p : '?';
        }
        buf[k++] = '\'';
        buf[k] = 0;
        return buf;
}

static int refuse(char **ret_reason, const Grant *g, const char *fmt, ...) _printf_(3, 4);

static int refuse(char **ret_reason, const Grant *g, const char *fmt, ...) {
        _cleanup_free_ char *text = NULL;
        char *reason;
        va_list ap;
        int k;

        va_start(ap, fmt);
        k = vasprintf(&text, fmt, ap);
        va_end(ap);
        if (k < 0)
                return -ENOMEM;
        if (asprintf(&reason, "%s%s", text,
                     g->n_units == 0 ? " (the request's device ids name no GPU kgpu-probed exports)" : "") < 0)
                return -ENOMEM;
        *ret_reason = reason;
        return -EPERM;
}

static int check_container(const Grant *g, size_t i, const char *prefix, const V1beta1__ContainerAllocateResponse *c,
                           char **ret_reason) {
        char a[QUOTE_MAX + 8], b[QUOTE_MAX + 8];

        for (size_t j = 0; j < c->n_devices; j++) {
                const V1beta1__DeviceSpec *d = c->devices[j];

                if (!node_granted(g, d->host_path))
                        return refuse(ret_reason, g, "container %zu: device node %s is not a node of the allocated devices",
                                      i, quote(d->host_path, a));
                if (!streq(d->container_path, d->host_path))
                        return refuse(ret_reason, g, "container %zu: device node %s would appear as %s in the container",
                                      i, quote(d->host_path, a), quote(d->container_path, b));
                if (!permissions_valid(d->permissions))
                        return refuse(ret_reason, g, "container %zu: device node %s with permissions %s (only r and w are granted)",
                                      i, quote(d->host_path, a), quote(d->permissions, b));
        }
        for (size_t j = 0; j < c->n_mounts; j++) {
                const V1beta1__Mount *mt = c->mounts[j];

                if (!mount_granted(g, mt))
                        return refuse(ret_reason, g, "container %zu: %s mount of host path %s at %s is not one kgpu makes for the allocated devices",
                                      i, mt->read_only ? "read-only" : "read-write",
                                      quote(mt->host_path, a), quote(mt->container_path, b));
        }
        for (size_t j = 0; j < c->n_envs; j++) {
                const V1beta1__ContainerAllocateResponse__EnvsEntry *e = c->envs[j];

                if (!env_granted(g, e->key, e->value))
                        return refuse(ret_reason, g, "container %zu: environment variable %s=%s is not one kgpu sets for the allocated devices",
                                      i, quote(e->key, a), quote(e->value, b));
        }
        for (size_t j = 0; j < c->n_annotations; j++) {
                const V1beta1__ContainerAllocateResponse__AnnotationsEntry *e = c->annotations[j];

                if (!annotation_granted(g, prefix, e->key, e->value))
                        return refuse(ret_reason, g, "container %zu: annotation %s=%s is not a CDI annotation (prefix %s) of the allocated devices",
                                      i, quote(e->key, a), quote(e->value, b), prefix ?: "none");
        }
        for (size_t j = 0; j < c->n_cdi_devices; j++) {
                const char *name = c->cdi_devices[j]->name;

                if (isempty(name) || !cdi_granted(g, name, strlen(name)))
                        return refuse(ret_reason, g, "container %zu: CDI device %s is not one of the allocated devices",
                                      i, quote(name, a));
        }
        return 0;
}

int gate_check_allocate(const ProbeGpus *gpus, const char *cdi_annotation_prefix, const char *resource,
                        const V1beta1__AllocateRequest *request, const V1beta1__AllocateResponse *answer,
                        char **ret_reason) {
        int r;

        if (!gpus || !gpus->known) {
                *ret_reason = strdup("no GPU inventory from kgpu-probed yet to check the answer against");
                return *ret_reason ? -ENODATA : -ENOMEM;
        }
        if (request->n_container_requests != answer->n_container_responses)
                return -EINVAL;

        for (size_t i = 0; i < answer->n_container_responses; i++) {
                const V1beta1__ContainerAllocateRequest *q = request->container_requests[i];
                Grant g = {};

                r = grant_build(&g, gpus, resource, q->devices_ids, q->n_devices_ids);
                if (r >= 0)
                        r = check_container(&g, i, cdi_annotation_prefix, answer->container_responses[i], ret_reason);
                grant_done(&g);
                if (r < 0)
                        return r;
        }
        return 0;
}
