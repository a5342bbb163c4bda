/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gpu-properties.c — io.kgpu.Gpu1 properties (an a{sv} from the probe) read, checked and
 * applied to a GpuInfo.
 *
 * Contract: see gpu-properties.h. The probe is trusted less than the broker: every value
 * is bounded and checked before anything is changed. No logging.
 */

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-bus.h>

#include "common/bus-names.h"
#include "common/bus-util.h"
#include "common/util.h"
#include "daemons/broker/gpu-properties.h"

#define PROBE_STRING_MAX 256            /* Vendor, Driver, HealthReason, Product */
#define PROBE_NUMA_MAX 4096
#define PROBE_INDEX_MAX 4095            /* Gpu1.Index: -1 or 0..this */
#define PROBE_WORD_MAX 64               /* ComputeMode, MigMode, MpsState, ComputeCapability, MIG profile, link type */
#define PROBE_MIG_DEVICES_MAX 64        /* MigDevices entries per GPU (a GPU has at most 7 today) */
#define PROBE_LINKS_MAX 1024            /* Links entries per GPU (one per other GPU) */
#define PROBE_MEMORY_MAX (UINT64_C(1) << 52)    /* 4 PiB: MemoryBytes and MIG memory above this are refused */


static bool string_printable(const char *s) {
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        return false;
        return true;
}

static bool valid_bounded(const char *s, size_t max, bool allow_empty) {
        size_t n = strnlen(s, max + 1);

        return n <= max && (allow_empty || n > 0) && string_printable(s);
}

/* "" or an absolute path below /dev without "." or ".." components or "//". */
static bool valid_dev_node(const char *s) {
        const char *p;

        if (isempty(s))
                return true;
        if (!valid_bounded(s, RESOURCES_PATH_MAX, false))
                return false;
        p = startswith(s, "/dev/");
        if (!p || *p == 0)
                return false;
        for (;;) {
                size_t l = strcspn(p, "/");

                if (l == 0 || (l == 1 && p[0] == '.') || (l == 2 && p[0] == '.' && p[1] == '.'))
                        return false;
                if (p[l] == 0)
                        return true;
                p += l + 1;
        }
}

/* "" or an absolute path without "." or ".." components or "//" (a host path the broker
 * hands to the kubelet as a mount source: Gpu1.MpsPipeDirectory). */
static bool valid_abs_path(const char *s) {
        const char *p;

        if (isempty(s))
                return true;
        if (!valid_bounded(s, RESOURCES_PATH_MAX, false) || s[0] != '/' || s[1] == 0)
                return false;
        p = s + 1;
        for (;;) {
                size_t l = strcspn(p, "/");

                if (l == 0 || (l == 1 && p[0] == '.') || (l == 2 && p[0] == '.' && p[1] == '.'))
                        return false;
                if (p[l] == 0)
                        return true;
                p += l + 1;
        }
}

/* A short token: printable, no blanks, no '/', no ',' or '=' (MIG profiles end up in
 * resource names, link types in logs). */
static bool valid_word(const char *s, bool allow_empty) {
        if (!valid_bounded(s, PROBE_WORD_MAX, allow_empty))
                return false;
        return s[strcspn(s, " /,=\"\\")] == 0;
}

/* A device node of a list: non-empty, below /dev (valid_dev_node()). */
static bool valid_list_node(const char *s) {
        return !isempty(s) && valid_dev_node(s);
}

/* Reads an "as" of device node paths: at most RESOURCES_NODES_MAX, each a valid node
 * below /dev, duplicates dropped. Sets *bad (and consumes the value) when the list is
 * invalid; *ret is replaced only when it is valid. */
static int read_node_array(sd_bus_message *msg, char ***ret, bool *bad) {
        char **l = NULL;
        int r;

        r = bus_read_strv_bounded(msg, RESOURCES_NODES_MAX, valid_list_node, &l);
        if (r == -EBADMSG) {
                *bad = true;
                return 0;
        }
        if (r < 0)
                return r;
        strv_free(*ret);
        *ret = l;
        return 0;
}

static void mig_devices_free(MigDeviceInfo *d, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(d[i].uuid);
                free(d[i].profile);
                strv_free(d[i].device_nodes);
        }
        free(d);
}

static void links_free(GpuLinkInfo *l, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(l[i].peer);
                free(l[i].type);
        }
        free(l);
}

/* Reads Gpu1.MigDevices "a(ussuuast)", inside its variant: at most PROBE_MIG_DEVICES_MAX
 * entries, each with a MIG UUID (non-empty, bounded like an id), a profile (a word),
 * device nodes below /dev and a memory size; device indexes and UUIDs unique. Sets *bad
 * (and consumes the value) when anything is invalid; *ret is replaced only when valid. */
static int read_mig_devices(sd_bus_message *msg, MigDeviceInfo **ret, size_t *ret_n, bool *bad) {
        MigDeviceInfo *d = NULL;
        size_t n = 0, seen = 0;
        bool bad_here = false;
        int r;

        r = sd_bus_message_enter_container(msg, 'a', "(ussuuast)");
        if (r < 0)
                return r;
        for (;;) {
                _cleanup_strv_free_ char **nodes = NULL;
                const char *uuid, *profile;
                uint32_t index, gi, ci;
                uint64_t memory;
                MigDeviceInfo *t;

                r = sd_bus_message_enter_container(msg, 'r', "ussuuast");
                if (r < 0)
                        goto fail;
                if (r == 0)
                        break;
                if (++seen > PROBE_MIG_DEVICES_MAX)
                        bad_here = true;        /* read on to consume it, keep nothing */
                r = sd_bus_message_read(msg, "ussuu", &index, &uuid, &profile, &gi, &ci);
                if (r < 0)
                        goto fail;
                if (!valid_bounded(uuid, RESOURCES_ID_MAX, false) || !valid_word(profile, false))
                        bad_here = true;
                for (size_t i = 0; i < n && !bad_here; i++)
                        if (d[i].index == index || streq(d[i].uuid, uuid))
                                bad_here = true;
                if (!bad_here) {
                        t = reallocarray(d, n + 1, sizeof(MigDeviceInfo));
                        if (!t) {
                                r = -ENOMEM;
                                goto fail;
                        }
                        d = t;
                        d[n] = (MigDeviceInfo) { .index = index, .gi = gi, .ci = ci };
                        n++;
                        d[n - 1].uuid = strdup(uuid);
                        d[n - 1].profile = strdup(profile);
                        if (!d[n - 1].uuid || !d[n - 1].profile) {
                                r = -ENOMEM;
                                goto fail;
                        }
                }
                r = read_node_array(msg, &nodes, &bad_here);
                if (r < 0)
                        goto fail;
                r = sd_bus_message_read(msg, "t", &memory);
                if (r < 0)
                        goto fail;
                if (memory > PROBE_MEMORY_MAX)
                        bad_here = true;
                if (!bad_here) {
                        d[n - 1].device_nodes = TAKE_PTR(nodes);
                        d[n - 1].memory_bytes = memory;
                }
                r = sd_bus_message_exit_container(msg);
                if (r < 0)
                        goto fail;
        }
        r = sd_bus_message_exit_container(msg);
        if (r < 0)
                goto fail;
        if (bad_here) {
                *bad = true;
                mig_devices_free(d, n);
                return 0;
        }
        mig_devices_free(*ret, *ret_n);
        *ret = d;
        *ret_n = n;
        return 0;
fail:
        mig_devices_free(d, n);
        return r;
}

static bool valid_link_type(const char *s) {
        /* The connection kinds of `nvidia-smi topo -m` the contract names. */
        static const char *const types[] = { "NV", "PIX", "PXB", "PHB", "NODE", "SYS" };

        for (size_t i = 0; i < ELEMENTSOF(types); i++)
                if (streq(s, types[i]))
                        return true;
        return false;
}

/* Reads Gpu1.Links "a(ssy)", inside its variant: at most PROBE_LINKS_MAX entries, each a peer
 * id (bounded like an id, not twice), one of the contract's link types, and an NVLink
 * count (0 unless "NV"). Sets *bad (and consumes the value) when anything is invalid. */
static int read_links(sd_bus_message *msg, GpuLinkInfo **ret, size_t *ret_n, bool *bad) {
        GpuLinkInfo *l = NULL;
        size_t n = 0, seen = 0;
        bool bad_here = false;
        int r;

        r = sd_bus_message_enter_container(msg, 'a', "(ssy)");
        if (r < 0)
                return r;
        for (;;) {
                const char *peer, *type;
                uint8_t nvlinks;
                GpuLinkInfo *t;

                r = sd_bus_message_read(msg, "(ssy)", &peer, &type, &nvlinks);
                if (r < 0)
                        goto fail;
                if (r == 0)
                        break;
                if (++seen > PROBE_LINKS_MAX || bad_here)
                        continue;
                if (!valid_bounded(peer, RESOURCES_ID_MAX, false) || !valid_link_type(type) ||
                    (!streq(type, "NV") && nvlinks != 0)) {
                        bad_here = true;
                        continue;
                }
                for (size_t i = 0; i < n; i++)
                        if (streq(l[i].peer, peer))
                                bad_here = true;
                if (bad_here)
                        continue;
                t = reallocarray(l, n + 1, sizeof(GpuLinkInfo));
                if (!t) {
                        r = -ENOMEM;
                        goto fail;
                }
                l = t;
                l[n] = (GpuLinkInfo) { .nvlinks = nvlinks };
                n++;
                l[n - 1].peer = strdup(peer);
                l[n - 1].type = strdup(type);
                if (!l[n - 1].peer || !l[n - 1].type) {
                        r = -ENOMEM;
                        goto fail;
                }
        }
        r = sd_bus_message_exit_container(msg);
        if (r < 0)
                goto fail;
        if (bad_here || seen > PROBE_LINKS_MAX) {
                *bad = true;
                links_free(l, n);
                return 0;
        }
        links_free(*ret, *ret_n);
        *ret = l;
        *ret_n = n;
        return 0;
fail:
        links_free(l, n);
        return r;
}

/* Every Gpu1 property read from one a{sv}, before it is validated and applied. */
typedef struct GpuProps {
        char *id, *vendor, *driver, *card, *render, *health, *reason, *uuid, *product,
                *compute_mode, *mig_mode, *compute_capability, *mps_state, *mps_pipe;
        char **nodes, **by_path, **mei;
        MigDeviceInfo *mig;
        GpuLinkInfo *links;
        size_t n_mig, n_links;
        bool have_numa, have_device_id, have_index, have_memory, have_mig, have_links, bad;
        uint16_t device_id;
        int32_t numa, index;
        uint64_t memory;
} GpuProps;

static void gpu_props_done(GpuProps *p) {
        free(p->id);
        free(p->vendor);
        free(p->driver);
        free(p->card);
        free(p->render);
        free(p->health);
        free(p->reason);
        free(p->uuid);
        free(p->product);
        free(p->compute_mode);
        free(p->mig_mode);
        free(p->compute_capability);
        free(p->mps_state);
        free(p->mps_pipe);
        strv_free(p->nodes);
        strv_free(p->by_path);
        strv_free(p->mei);
        mig_devices_free(p->mig, p->n_mig);
        links_free(p->links, p->n_links);
}

/* The string property called name, NULL if it is none. */
static char **gpu_props_string(GpuProps *p, const char *name) {
        static const struct {
                const char *name;
                size_t offset;
        } table[] = {
                { "Id",                 offsetof(GpuProps, id) },
                { "Vendor",             offsetof(GpuProps, vendor) },
                { "Driver",             offsetof(GpuProps, driver) },
                { "CardNode",           offsetof(GpuProps, card) },
                { "RenderNode",         offsetof(GpuProps, render) },
                { "Health",             offsetof(GpuProps, health) },
                { "HealthReason",       offsetof(GpuProps, reason) },
                { "Uuid",               offsetof(GpuProps, uuid) },
                { "Product",            offsetof(GpuProps, product) },
                { "ComputeMode",        offsetof(GpuProps, compute_mode) },
                { "MigMode",            offsetof(GpuProps, mig_mode) },
                { "ComputeCapability",  offsetof(GpuProps, compute_capability) },
                { "MpsState",           offsetof(GpuProps, mps_state) },
                { "MpsPipeDirectory",   offsetof(GpuProps, mps_pipe) },
        };

        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                if (streq(name, table[i].name))
                        return (char **) ((uint8_t *) p + table[i].offset);
        return NULL;
}

/* bus_read_property_map()'s handler, inside the variant of property name (of type
 * contents): reads it into p (returns 1); a known property of the wrong type sets p->bad
 * and is skipped, an unknown one is skipped (returns 0). */
static int gpu_property(sd_bus_message *msg, const char *name, const char *contents, void *userdata) {
        GpuProps *p = userdata;
        char **target = gpu_props_string(p, name);
        int r;

        if ((target && !streq(contents, "s")) ||
            ((streq(name, "NumaNode") || streq(name, "Index")) && !streq(contents, "i")) ||
            (streq(name, "DeviceId") && !streq(contents, "q")) ||
            (streq(name, "MemoryBytes") && !streq(contents, "t")) ||
            (streq(name, "MigDevices") && !streq(contents, "a(ussuuast)")) ||
            (streq(name, "Links") && !streq(contents, "a(ssy)")) ||
            ((streq(name, "DeviceNodes") || streq(name, "ByPathNodes") || streq(name, "MeiNodes")) &&
             !streq(contents, "as"))) {
                p->bad = true;
                return 0;
        }
        if (target) {
                const char *v;

                r = sd_bus_message_read_basic(msg, 's', &v);
                if (r < 0)
                        return r;
                r = free_and_strdup(target, v);
                return r < 0 ? r : 1;
        }
        if (streq(name, "NumaNode")) {
                r = sd_bus_message_read_basic(msg, 'i', &p->numa);
                p->have_numa = r >= 0;
                return r < 0 ? r : 1;
        }
        if (streq(name, "DeviceNodes") || streq(name, "ByPathNodes")) {
                r = read_node_array(msg, streq(name, "DeviceNodes") ? &p->nodes : &p->by_path, &p->bad);
                return r < 0 ? r : 1;
        }
        if (streq(name, "MeiNodes")) {
                r = read_node_array(msg, &p->mei, &p->bad);
                return r < 0 ? r : 1;
        }
        if (streq(name, "DeviceId")) {
                r = sd_bus_message_read_basic(msg, 'q', &p->device_id);
                p->have_device_id = r >= 0;
                return r < 0 ? r : 1;
        }
        if (streq(name, "Index")) {
                r = sd_bus_message_read_basic(msg, 'i', &p->index);
                p->have_index = r >= 0;
                return r < 0 ? r : 1;
        }
        if (streq(name, "MemoryBytes")) {
                r = sd_bus_message_read_basic(msg, 't', &p->memory);
                p->have_memory = r >= 0;
                return r < 0 ? r : 1;
        }
        if (streq(name, "MigDevices")) {
                r = read_mig_devices(msg, &p->mig, &p->n_mig, &p->bad);
                p->have_mig = r >= 0;
                return r < 0 ? r : 1;
        }
        if (streq(name, "Links")) {
                r = read_links(msg, &p->links, &p->n_links, &p->bad);
                p->have_links = r >= 0;
                return r < 0 ? r : 1;
        }
        return 0;
}

static bool gpu_props_valid(const GpuProps *p) {
        return !p->bad &&
                (!p->id || valid_bounded(p->id, RESOURCES_ID_MAX, false)) &&
                (!p->vendor || valid_bounded(p->vendor, PROBE_STRING_MAX, true)) &&
                (!p->driver || valid_bounded(p->driver, PROBE_STRING_MAX, true)) &&
                (!p->health || valid_bounded(p->health, PROBE_STRING_MAX, true)) &&
                (!p->reason || valid_bounded(p->reason, PROBE_STRING_MAX, true)) &&
                (!p->card || valid_dev_node(p->card)) &&
                (!p->render || valid_dev_node(p->render)) &&
                (!p->uuid || valid_bounded(p->uuid, RESOURCES_ID_MAX, true)) &&
                (!p->product || valid_bounded(p->product, PROBE_STRING_MAX, true)) &&
                (!p->compute_mode || valid_word(p->compute_mode, true)) &&
                (!p->mig_mode || valid_word(p->mig_mode, true)) &&
                (!p->compute_capability || valid_word(p->compute_capability, true)) &&
                (!p->mps_state || valid_word(p->mps_state, true)) &&
                (!p->mps_pipe || valid_abs_path(p->mps_pipe)) &&
                (!p->have_index || (p->index >= -1 && p->index <= PROBE_INDEX_MAX)) &&
                (!p->have_memory || p->memory <= PROBE_MEMORY_MAX);
}

/* Moves what p has into info; p keeps what it did not give. */
static void gpu_props_move(GpuProps *p, GpuInfo *info) {
#define MOVE(field, v) if (p->v) { free(info->field); info->field = TAKE_PTR(p->v); }
        MOVE(id, id);
        MOVE(vendor, vendor);
        MOVE(driver, driver);
        MOVE(card_node, card);
        MOVE(render_node, render);
        MOVE(health_reason, reason);
        MOVE(uuid, uuid);
        MOVE(product, product);
        MOVE(compute_mode, compute_mode);
        MOVE(mig_mode, mig_mode);
        MOVE(compute_capability, compute_capability);
        MOVE(mps_state, mps_state);
        MOVE(mps_pipe_directory, mps_pipe);
#undef MOVE
        if (p->have_mig) {
                mig_devices_free(info->mig_devices, info->n_mig_devices);
                info->mig_devices = TAKE_PTR(p->mig);
                info->n_mig_devices = p->n_mig;
                p->n_mig = 0;
        }
        if (p->have_links) {
                links_free(info->links, info->n_links);
                info->links = TAKE_PTR(p->links);
                info->n_links = p->n_links;
                p->n_links = 0;
        }
        if (p->have_index)
                info->index = p->index;
        if (p->have_memory)
                info->memory_bytes = p->memory;
        if (p->nodes) {
                strv_free(info->device_nodes);
                info->device_nodes = TAKE_PTR(p->nodes);
        }
        if (p->by_path) {
                strv_free(info->by_path_nodes);
                info->by_path_nodes = TAKE_PTR(p->by_path);
        }
        if (p->mei) {
                strv_free(info->mei_nodes);
                info->mei_nodes = TAKE_PTR(p->mei);
        }
        if (p->health)
                info->healthy = streq(p->health, "Healthy");
        if (p->have_device_id)
                info->device_id = p->device_id;
        if (p->have_numa)
                info->numa_node = p->numa >= 0 && p->numa < PROBE_NUMA_MAX ? p->numa : -1;
}

int probe_gpu_properties_apply(sd_bus_message *msg, GpuInfo *info) {
        GpuProps p = { .numa = -1, .index = -1 };
        int r;

        /* The whole a{sv} is consumed, so that a caller can go on reading after an
         * -EBADMSG; only errors of the message itself stop early. */
        r = bus_read_property_map(msg, gpu_property, &p);
        /* Validate everything before changing anything. */
        if (r >= 0 && !gpu_props_valid(&p))
                r = -EBADMSG;
        if (r >= 0)
                gpu_props_move(&p, info);
        gpu_props_done(&p);
        return r < 0 ? r : 0;
}
