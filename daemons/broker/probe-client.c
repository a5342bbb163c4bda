/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * probe-client.c — mirrors io.kgpu.Probe1's GPU objects (ObjectManager + PropertiesChanged).
 *
 * Contract: see probe-client.h. This is a boundary: it logs what the probe did to the
 * inventory (GPU added/removed/health, with MESSAGE_IDs) and what it had to ignore.
 * No timers: a signal is applied and ResourcesChanged emitted in the same dispatch.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-bus.h>

#include "common/bus-names.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/inventory.h"
#include "daemons/broker/broker-dbus.h"
#include "daemons/broker/manager.h"
#include "daemons/broker/mps-client.h"
#include "daemons/broker/probe-client.h"

#define PROBE_STRING_MAX 256            /* Vendor, Driver, HealthReason, Product */
#define PROBE_NUMA_MAX 4096
#define PROBE_INDEX_MAX 4095            /* Gpu1.Index: -1 or 0..this */
#define PROBE_WORD_MAX 64               /* ComputeMode, MigMode, MpsState, ComputeCapability, MIG profile, link type */
#define PROBE_MIG_DEVICES_MAX 64        /* MigDevices entries per GPU (a GPU has at most 7 today) */
#define PROBE_LINKS_MAX 1024            /* Links entries per GPU (one per other GPU) */
#define PROBE_MEMORY_MAX (UINT64_C(1) << 52)    /* 4 PiB: MemoryBytes and MIG memory above this are refused */

static const char match_owner[] =
        "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',"
        "interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='" KGPU_PROBE_BUS_NAME "'";
static const char match_objects[] =
        "type='signal',sender='" KGPU_PROBE_BUS_NAME "',path='" KGPU_PROBE_PATH "',"
        "interface='org.freedesktop.DBus.ObjectManager'";
static const char match_properties[] =
        "type='signal',sender='" KGPU_PROBE_BUS_NAME "',interface='org.freedesktop.DBus.Properties',"
        "member='PropertiesChanged',arg0='" KGPU_GPU_INTERFACE "',path_namespace='" KGPU_PROBE_PATH "'";

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

static bool gpu_path_valid(const char *path) {
        const char *p = startswith(path, KGPU_GPU_PATH_PREFIX "/");

        return p && *p && !strchr(p, '/') && strlen(path) <= 1024;
}

/* Reads an "as" of device node paths: at most RESOURCES_NODES_MAX, each a valid node
 * below /dev, duplicates dropped. Sets *bad (and consumes the value) when the list is
 * invalid; *ret is replaced only when it is valid. */
static int read_node_array(sd_bus_message *msg, char ***ret, bool *bad) {
        _cleanup_strv_free_ char **l = NULL;
        bool bad_here = false;
        size_t n = 0;
        int r;

        l = calloc(1, sizeof(char *));
        if (!l)
                return -ENOMEM;
        r = sd_bus_message_enter_container(msg, 'a', "s");
        if (r < 0)
                return r;
        for (;;) {
                const char *v;

                r = sd_bus_message_read(msg, "s", &v);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                if (++n > RESOURCES_NODES_MAX || isempty(v) || !valid_dev_node(v)) {
                        bad_here = true;
                        continue;
                }
                if (!strv_contains(l, v)) {
                        r = strv_extend(&l, v);
                        if (r < 0)
                                return r;
                }
        }
        r = sd_bus_message_exit_container(msg);
        if (r < 0)
                return r;
        if (bad_here) {
                *bad = true;
                return 0;
        }
        strv_free(*ret);
        *ret = TAKE_PTR(l);
        return 0;
}

/* Reads a "v" holding "as" of device node paths (see read_node_array()). */
static int read_node_list(sd_bus_message *msg, char ***ret, bool *bad) {
        int r;

        r = sd_bus_message_enter_container(msg, 'v', "as");
        if (r < 0)
                return r;
        r = read_node_array(msg, ret, bad);
        if (r < 0)
                return r;
        return sd_bus_message_exit_container(msg);
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

/* Reads a "v" holding Gpu1.MigDevices "a(ussuuast)": at most PROBE_MIG_DEVICES_MAX
 * entries, each with a MIG UUID (non-empty, bounded like an id), a profile (a word),
 * device nodes below /dev and a memory size; device indexes and UUIDs unique. Sets *bad
 * (and consumes the value) when anything is invalid; *ret is replaced only when valid. */
static int read_mig_devices(sd_bus_message *msg, MigDeviceInfo **ret, size_t *ret_n, bool *bad) {
        MigDeviceInfo *d = NULL;
        size_t n = 0, seen = 0;
        bool bad_here = false;
        int r;

        r = sd_bus_message_enter_container(msg, 'v', "a(ussuuast)");
        if (r < 0)
                return r;
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

/* Reads a "v" holding Gpu1.Links "a(ssy)": at most PROBE_LINKS_MAX entries, each a peer
 * id (bounded like an id, not twice), one of the contract's link types, and an NVLink
 * count (0 unless "NV"). Sets *bad (and consumes the value) when anything is invalid. */
static int read_links(sd_bus_message *msg, GpuLinkInfo **ret, size_t *ret_n, bool *bad) {
        GpuLinkInfo *l = NULL;
        size_t n = 0, seen = 0;
        bool bad_here = false;
        int r;

        r = sd_bus_message_enter_container(msg, 'v', "a(ssy)");
        if (r < 0)
                return r;
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

int probe_gpu_properties_apply(sd_bus_message *msg, GpuInfo *info) {
        _cleanup_free_ char *id = NULL, *vendor = NULL, *driver = NULL, *card = NULL,
                *render = NULL, *health = NULL, *reason = NULL, *uuid = NULL, *product = NULL,
                *compute_mode = NULL, *mig_mode = NULL, *compute_capability = NULL,
                *mps_state = NULL, *mps_pipe = NULL;
        _cleanup_strv_free_ char **nodes = NULL, **by_path = NULL;
        MigDeviceInfo *mig = NULL;
        GpuLinkInfo *links = NULL;
        size_t n_mig = 0, n_links = 0;
        bool have_numa = false, have_device_id = false, have_index = false, have_memory = false,
                have_mig = false, have_links = false, bad = false;
        uint16_t device_id = 0;
        int32_t numa = -1, index = -1;
        uint64_t memory = 0;
        int r;

        /* The whole a{sv} is always consumed, so that a caller can go on reading after an
         * -EBADMSG; only errors of the message itself stop early. */
        r = sd_bus_message_enter_container(msg, 'a', "{sv}");
        if (r < 0)
                goto fail;
        for (;;) {
                const char *name, *contents;
                char **target = NULL;
                char type;

                r = sd_bus_message_enter_container(msg, 'e', "sv");
                if (r < 0)
                        goto fail;
                if (r == 0)
                        break;
                r = sd_bus_message_read(msg, "s", &name);
                if (r < 0)
                        goto fail;
                r = sd_bus_message_peek_type(msg, &type, &contents);
                if (r < 0)
                        goto fail;

                if (streq(name, "Id"))
                        target = &id;
                else if (streq(name, "Vendor"))
                        target = &vendor;
                else if (streq(name, "Driver"))
                        target = &driver;
                else if (streq(name, "CardNode"))
                        target = &card;
                else if (streq(name, "RenderNode"))
                        target = &render;
                else if (streq(name, "Health"))
                        target = &health;
                else if (streq(name, "HealthReason"))
                        target = &reason;
                else if (streq(name, "Uuid"))
                        target = &uuid;
                else if (streq(name, "Product"))
                        target = &product;
                else if (streq(name, "ComputeMode"))
                        target = &compute_mode;
                else if (streq(name, "MigMode"))
                        target = &mig_mode;
                else if (streq(name, "ComputeCapability"))
                        target = &compute_capability;
                else if (streq(name, "MpsState"))
                        target = &mps_state;
                else if (streq(name, "MpsPipeDirectory"))
                        target = &mps_pipe;

                if ((target && !streq(contents, "s")) ||
                    ((streq(name, "NumaNode") || streq(name, "Index")) && !streq(contents, "i")) ||
                    (streq(name, "DeviceId") && !streq(contents, "q")) ||
                    (streq(name, "MemoryBytes") && !streq(contents, "t")) ||
                    (streq(name, "MigDevices") && !streq(contents, "a(ussuuast)")) ||
                    (streq(name, "Links") && !streq(contents, "a(ssy)")) ||
                    ((streq(name, "DeviceNodes") || streq(name, "ByPathNodes")) && !streq(contents, "as"))) {
                        bad = true;
                        r = sd_bus_message_skip(msg, "v");
                        if (r < 0)
                                goto fail;
                } else if (target) {
                        const char *v;

                        r = sd_bus_message_read(msg, "v", "s", &v);
                        if (r < 0)
                                goto fail;
                        r = free_and_strdup(target, v);
                        if (r < 0)
                                goto fail;
                } else if (streq(name, "NumaNode")) {
                        r = sd_bus_message_read(msg, "v", "i", &numa);
                        if (r < 0)
                                goto fail;
                        have_numa = true;
                } else if (streq(name, "DeviceNodes") || streq(name, "ByPathNodes")) {
                        r = read_node_list(msg, streq(name, "DeviceNodes") ? &nodes : &by_path, &bad);
                        if (r < 0)
                                goto fail;
                } else if (streq(name, "DeviceId") && streq(contents, "q")) {
                        r = sd_bus_message_read(msg, "v", "q", &device_id);
                        if (r < 0)
                                goto fail;
                        have_device_id = true;
                } else if (streq(name, "Index")) {
                        r = sd_bus_message_read(msg, "v", "i", &index);
                        if (r < 0)
                                goto fail;
                        have_index = true;
                } else if (streq(name, "MemoryBytes")) {
                        r = sd_bus_message_read(msg, "v", "t", &memory);
                        if (r < 0)
                                goto fail;
                        have_memory = true;
                } else if (streq(name, "MigDevices")) {
                        r = read_mig_devices(msg, &mig, &n_mig, &bad);
                        if (r < 0)
                                goto fail;
                        have_mig = true;
                } else if (streq(name, "Links")) {
                        r = read_links(msg, &links, &n_links, &bad);
                        if (r < 0)
                                goto fail;
                        have_links = true;
                } else {
                        r = sd_bus_message_skip(msg, "v");
                        if (r < 0)
                                goto fail;
                }
                r = sd_bus_message_exit_container(msg);
                if (r < 0)
                        goto fail;
        }
        r = sd_bus_message_exit_container(msg);
        if (r < 0)
                goto fail;

        /* Validate everything before changing anything. */
        if (bad ||
            (id && !valid_bounded(id, RESOURCES_ID_MAX, false)) ||
            (vendor && !valid_bounded(vendor, PROBE_STRING_MAX, true)) ||
            (driver && !valid_bounded(driver, PROBE_STRING_MAX, true)) ||
            (health && !valid_bounded(health, PROBE_STRING_MAX, true)) ||
            (reason && !valid_bounded(reason, PROBE_STRING_MAX, true)) ||
            (card && !valid_dev_node(card)) ||
            (render && !valid_dev_node(render)) ||
            (uuid && !valid_bounded(uuid, RESOURCES_ID_MAX, true)) ||
            (product && !valid_bounded(product, PROBE_STRING_MAX, true)) ||
            (compute_mode && !valid_word(compute_mode, true)) ||
            (mig_mode && !valid_word(mig_mode, true)) ||
            (compute_capability && !valid_word(compute_capability, true)) ||
            (mps_state && !valid_word(mps_state, true)) ||
            (mps_pipe && !valid_abs_path(mps_pipe)) ||
            (have_index && (index < -1 || index > PROBE_INDEX_MAX)) ||
            (have_memory && memory > PROBE_MEMORY_MAX)) {
                r = -EBADMSG;
                goto fail;
        }

#define MOVE(field, v) if (v) { free(info->field); info->field = TAKE_PTR(v); }
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
        if (have_mig) {
                mig_devices_free(info->mig_devices, info->n_mig_devices);
                info->mig_devices = TAKE_PTR(mig);
                info->n_mig_devices = n_mig;
        }
        if (have_links) {
                links_free(info->links, info->n_links);
                info->links = TAKE_PTR(links);
                info->n_links = n_links;
        }
        if (have_index)
                info->index = index;
        if (have_memory)
                info->memory_bytes = memory;
        if (nodes) {
                strv_free(info->device_nodes);
                info->device_nodes = TAKE_PTR(nodes);
        }
        if (by_path) {
                strv_free(info->by_path_nodes);
                info->by_path_nodes = TAKE_PTR(by_path);
        }
        if (health)
                info->healthy = streq(health, "Healthy");
        if (have_device_id)
                info->device_id = device_id;
        if (have_numa)
                info->numa_node = numa >= 0 && numa < PROBE_NUMA_MAX ? numa : -1;
        return 0;
fail:
        mig_devices_free(mig, n_mig);
        links_free(links, n_links);
        return r;
}

static bool probe_message_from_owner(Manager *m, sd_bus_message *msg) {
        const char *sender = sd_bus_message_get_sender(msg);

        /* Before the first owner is known, a GetManagedObjects reply will replace whatever
         * a signal could say, so nothing is lost by dropping it. */
        return m->probe_owner && streq(sender, m->probe_owner);
}

static void probe_log_change(const GpuInfo *old, const GpuInfo *new, const char *resource) {
        if (!old) {
                log_struct(LOG_INFO, KGPU_MESSAGE_GPU_ADDED, "GPU %s (%s, %s) %s%s, %s.",
                           new->id, isempty(new->vendor) ? "unknown vendor" : new->vendor,
                           isempty(new->driver) ? "no driver" : new->driver,
                           resource ? "serves " : "is not served",
                           resource ?: "",
                           new->healthy ? "healthy" : "unhealthy");
                return;
        }
        if (old->healthy != new->healthy)
                log_struct(new->healthy ? LOG_INFO : LOG_WARNING, KGPU_MESSAGE_GPU_HEALTH,
                           "GPU %s is now %s%s%s%s.", new->id,
                           new->healthy ? "healthy" : "unhealthy",
                           isempty(new->health_reason) ? "" : " (",
                           isempty(new->health_reason) ? "" : new->health_reason,
                           isempty(new->health_reason) ? "" : ")");
        else if (!streq(old->driver, new->driver))
                log_info("GPU %s is now bound to %s.", new->id, isempty(new->driver) ? "no driver" : new->driver);
}

/* Stores a new state for the object at path; logs. changed collects resource names. */
static int probe_apply_gpu(Manager *m, const char *path, const GpuInfo *info, char ***changed) {
        const Gpu *g = resources_get_gpu(m->resources, path);
        GpuInfo old = {};
        bool had = g;
        int r;

        if (had) {
                r = gpu_info_copy(&g->info, &old);
                if (r < 0)
                        return log_oom();
        }

        r = resources_update_gpu(m->resources, path, info, changed);
        if (r == -EEXIST)
                log_warning("Probe object %s claims id '%s' of another object, ignoring it.", path, info->id);
        else if (r == -E2BIG)
                log_warning("More than %u GPU objects, ignoring %s.", RESOURCES_GPUS_MAX, path);
        else if (r == -EINVAL)
                log_warning("Probe object %s has no Id, ignoring it.", path);
        else if (r < 0)
                log_error_errno(r, "Failed to record GPU %s: %m", path);
        else
                probe_log_change(had ? &old : NULL, info, resources_name_for_gpu(m->resources, info));

        gpu_info_done(&old);
        return r == -ENOMEM ? r : 0;
}

static int probe_remove_gpu(Manager *m, const char *path, char ***changed) {
        const Gpu *g = resources_get_gpu(m->resources, path);

        if (!g)
                return 0;
        log_struct(LOG_NOTICE, KGPU_MESSAGE_GPU_REMOVED, "GPU %s is gone from the probe.", g->info.id);
        return resources_remove_gpu(m->resources, path, changed);
}

static void probe_emit(Manager *m, char **changed) {
        /* A new GPU, or one whose MPS plan changed (memory now known): SetMps where needed. */
        (void) mps_client_sync(m, false);
        manager_log_problem(m);
        if (strv_length(changed) == 0)
                return;
        inventory_save(m);      /* for a broker restarted while the probe is down */
        (void) broker_dbus_emit_resources_changed(m, changed);
        manager_update_status(m);
}

/* Reads a{sa{sv}} and returns the io.kgpu.Gpu1 properties applied over defaults.
 * Returns 1 if the interface was there, 0 if not. */
static int probe_read_interfaces(sd_bus_message *msg, GpuInfo *ret) {
        GpuInfo info = { .numa_node = -1, .index = -1 };
        bool found = false, bad = false;
        int r;

        r = sd_bus_message_enter_container(msg, 'a', "{sa{sv}}");
        if (r < 0)
                return r;
        for (;;) {
                const char *iface;

                r = sd_bus_message_enter_container(msg, 'e', "sa{sv}");
                if (r < 0)
                        goto fail;
                if (r == 0)
                        break;
                r = sd_bus_message_read(msg, "s", &iface);
                if (r < 0)
                        goto fail;
                if (streq(iface, KGPU_GPU_INTERFACE) && !found) {
                        r = probe_gpu_properties_apply(msg, &info);
                        found = true;
                        if (r == -EBADMSG) {
                                /* Consumed: go on, fail at the end. */
                                bad = true;
                                r = 0;
                        }
                } else
                        r = sd_bus_message_skip(msg, "a{sv}");
                if (r < 0)
                        goto fail;
                r = sd_bus_message_exit_container(msg);
                if (r < 0)
                        goto fail;
        }
        r = sd_bus_message_exit_container(msg);
        if (r < 0)
                goto fail;
        if (bad) {
                r = -EBADMSG;
                goto fail;
        }
        if (!found) {
                gpu_info_done(&info);
                return 0;
        }
        *ret = info;
        return 1;
fail:
        gpu_info_done(&info);
        return r;
}

static int on_get_managed_objects(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        _cleanup_strv_free_ char **changed = NULL, **paths = NULL, **gone = NULL;
        Manager *m = userdata;
        const sd_bus_error *e;
        size_t n_objects = 0;
        int r;

        m->probe_sync_slot = sd_bus_slot_unref(m->probe_sync_slot);

        e = sd_bus_message_get_error(reply);
        if (e) {
                if (sd_bus_error_has_names(e, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
                        log_info("Probe %s is not on the bus yet, waiting for it.", KGPU_PROBE_BUS_NAME);
                else
                        log_warning("GetManagedObjects on %s failed: %s: %s, keeping the last inventory.",
                                    KGPU_PROBE_BUS_NAME, e->name, e->message ?: "");
                return 0;
        }

        /* The reply tells us who the probe is if we did not know yet (at start). */
        if (!m->probe_owner) {
                r = free_and_strdup(&m->probe_owner, sd_bus_message_get_sender(reply));
                if (r < 0)
                        return log_oom();
        } else if (!probe_message_from_owner(m, reply)) {
                log_debug("Ignoring GetManagedObjects reply from a previous probe.");
                return 0;
        }

        r = sd_bus_message_enter_container(reply, 'a', "{oa{sa{sv}}}");
        if (r < 0)
                goto bad;
        for (;;) {
                const char *path;
                GpuInfo info = {};

                r = sd_bus_message_enter_container(reply, 'e', "oa{sa{sv}}");
                if (r < 0)
                        goto bad;
                if (r == 0)
                        break;
                r = sd_bus_message_read(reply, "o", &path);
                if (r < 0)
                        goto bad;
                if (!gpu_path_valid(path) || ++n_objects > RESOURCES_GPUS_MAX) {
                        r = sd_bus_message_skip(reply, "a{sa{sv}}");
                        if (r < 0)
                                goto bad;
                } else {
                        r = probe_read_interfaces(reply, &info);
                        if (r == -EBADMSG) {
                                /* Keep what we knew of it, if anything. */
                                log_warning("Probe object %s has invalid io.kgpu.Gpu1 properties, ignoring them.", path);
                                if (strv_extend(&paths, path) < 0)
                                        return log_oom();
                        } else if (r < 0)
                                goto bad;
                        else if (r > 0) {
                                r = strv_extend(&paths, path);
                                if (r >= 0)
                                        r = probe_apply_gpu(m, path, &info, &changed);
                                gpu_info_done(&info);
                                if (r < 0)
                                        return log_oom();
                        }
                }
                r = sd_bus_message_exit_container(reply);
                if (r < 0)
                        goto bad;
        }

        /* The reply is the whole truth: forget objects it does not list. */
        for (size_t i = 0; i < m->resources->n_gpus; i++)
                if (!strv_contains(paths, m->resources->gpus[i].path)) {
                        r = strv_extend(&gone, m->resources->gpus[i].path);
                        if (r < 0)
                                return log_oom();
                }
        for (char **p = gone; p && *p; p++)
                (void) probe_remove_gpu(m, *p, &changed);

        if (!m->probe_synced)
                log_info("Inventory from %s: %zu GPU object(s).", KGPU_PROBE_BUS_NAME, m->resources->n_gpus);
        m->probe_synced = true;
        /* The probe (re)appeared: it runs no MPS daemon until told (again). */
        (void) mps_client_sync(m, true);
        probe_emit(m, changed);
        return 0;

bad:
        log_warning_errno(r, "Malformed GetManagedObjects reply from %s, applying what was read: %m",
                          KGPU_PROBE_BUS_NAME);
        probe_emit(m, changed);
        return 0;
}

static int probe_sync(Manager *m) {
        int r;

        m->probe_sync_slot = sd_bus_slot_unref(m->probe_sync_slot);
        r = sd_bus_call_method_async(m->bus, &m->probe_sync_slot,
                                     m->probe_owner ?: KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH,
                                     "org.freedesktop.DBus.ObjectManager", "GetManagedObjects",
                                     on_get_managed_objects, m, NULL);
        if (r < 0)
                return log_error_errno(r, "Failed to call GetManagedObjects on %s: %m", KGPU_PROBE_BUS_NAME);
        return 0;
}

typedef struct GetAllCall {
        Manager *manager;
        char path[];
} GetAllCall;

static int on_get_all(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        _cleanup_strv_free_ char **changed = NULL;
        GetAllCall *c = userdata;
        Manager *m = c->manager;
        const Gpu *g;
        GpuInfo info = { .numa_node = -1, .index = -1 };
        int r;

        if (sd_bus_message_is_method_error(reply, NULL)) {
                log_debug("GetAll on %s failed: %s", c->path, sd_bus_message_get_error(reply)->name);
                return 0;
        }
        if (!probe_message_from_owner(m, reply))
                return 0;

        g = resources_get_gpu(m->resources, c->path);
        if (g) {
                r = gpu_info_copy(&g->info, &info);
                if (r < 0)
                        return log_oom();
        }
        r = probe_gpu_properties_apply(reply, &info);
        if (r < 0)
                log_warning_errno(r, "Invalid io.kgpu.Gpu1 properties of %s, ignoring them: %m", c->path);
        else
                (void) probe_apply_gpu(m, c->path, &info, &changed);
        gpu_info_done(&info);
        probe_emit(m, changed);
        return 0;
}

static int probe_refresh_object(Manager *m, const char *path) {
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        GetAllCall *c;
        int r;

        c = malloc(sizeof(GetAllCall) + strlen(path) + 1);
        if (!c)
                return log_oom();
        c->manager = m;
        strcpy(c->path, path);

        r = sd_bus_call_method_async(m->bus, &slot, m->probe_owner, path,
                                     "org.freedesktop.DBus.Properties", "GetAll",
                                     on_get_all, c, "s", KGPU_GPU_INTERFACE);
        if (r < 0) {
                free(c);
                return log_warning_errno(r, "Failed to ask %s for its properties, ignoring: %m", path);
        }
        (void) sd_bus_slot_set_destroy_callback(slot, free);
        (void) sd_bus_slot_set_floating(slot, 1);
        return 0;
}

static int on_name_owner_changed(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        const char *name, *old_owner, *new_owner;
        Manager *m = userdata;
        int r;

        r = sd_bus_message_read(msg, "sss", &name, &old_owner, &new_owner);
        if (r < 0 || !streq(name, KGPU_PROBE_BUS_NAME))
                return 0;

        if (isempty(new_owner)) {
                m->probe_owner = mfree(m->probe_owner);
                m->probe_sync_slot = sd_bus_slot_unref(m->probe_sync_slot);
                log_notice("Probe %s left the bus; keeping the last known inventory (%zu GPU objects).",
                           KGPU_PROBE_BUS_NAME, m->resources->n_gpus);
                return 0;
        }

        r = free_and_strdup(&m->probe_owner, new_owner);
        if (r < 0)
                return log_oom();
        log_info("Probe %s is on the bus as %s, synchronizing.", KGPU_PROBE_BUS_NAME, new_owner);
        (void) probe_sync(m);
        return 0;
}

static int on_interfaces_added(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        _cleanup_strv_free_ char **changed = NULL;
        Manager *m = userdata;
        GpuInfo info = {};
        const char *path;
        int r;

        if (!probe_message_from_owner(m, msg))
                return 0;
        if (!sd_bus_message_is_signal(msg, "org.freedesktop.DBus.ObjectManager", "InterfacesAdded")) {
                if (sd_bus_message_is_signal(msg, "org.freedesktop.DBus.ObjectManager", "InterfacesRemoved")) {
                        /* Same match: dispatch here. */
                        r = sd_bus_message_read(msg, "o", &path);
                        if (r < 0 || !gpu_path_valid(path))
                                return 0;
                        r = sd_bus_message_enter_container(msg, 'a', "s");
                        if (r < 0)
                                return 0;
                        for (;;) {
                                const char *iface;

                                r = sd_bus_message_read(msg, "s", &iface);
                                if (r <= 0)
                                        return 0;
                                if (streq(iface, KGPU_GPU_INTERFACE))
                                        break;
                        }
                        r = probe_remove_gpu(m, path, &changed);
                        if (r < 0)
                                return log_oom();
                        probe_emit(m, changed);
                }
                return 0;
        }

        r = sd_bus_message_read(msg, "o", &path);
        if (r < 0 || !gpu_path_valid(path))
                return 0;
        r = probe_read_interfaces(msg, &info);
        if (r < 0) {
                log_warning_errno(r, "Invalid InterfacesAdded for %s, ignoring it: %m", path);
                return 0;
        }
        if (r == 0)
                return 0;
        r = probe_apply_gpu(m, path, &info, &changed);
        gpu_info_done(&info);
        if (r < 0)
                return log_oom();
        probe_emit(m, changed);
        return 0;
}

static int on_properties_changed(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        _cleanup_strv_free_ char **changed = NULL;
        Manager *m = userdata;
        const char *path = sd_bus_message_get_path(msg), *iface;
        GpuInfo info = { .numa_node = -1, .index = -1 };
        const Gpu *g;
        bool invalidated = false;
        int r;

        if (!probe_message_from_owner(m, msg) || !gpu_path_valid(path))
                return 0;
        r = sd_bus_message_read(msg, "s", &iface);
        if (r < 0 || !streq(iface, KGPU_GPU_INTERFACE))
                return 0;

        g = resources_get_gpu(m->resources, path);
        if (g) {
                r = gpu_info_copy(&g->info, &info);
                if (r < 0)
                        return log_oom();
        }
        r = probe_gpu_properties_apply(msg, &info);
        if (r >= 0) {
                r = sd_bus_message_enter_container(msg, 'a', "s");
                if (r > 0) {
                        const char *name;

                        while (sd_bus_message_read(msg, "s", &name) > 0)
                                invalidated = true;
                }
                r = 0;
        }
        if (r < 0) {
                log_warning_errno(r, "Invalid PropertiesChanged for %s, ignoring it: %m", path);
                gpu_info_done(&info);
                return 0;
        }

        if (g) {
                r = probe_apply_gpu(m, path, &info, &changed);
                if (r < 0) {
                        gpu_info_done(&info);
                        return log_oom();
                }
        }
        gpu_info_done(&info);
        /* Not known yet (its InterfacesAdded was malformed or lost), or values not sent:
         * ask for all of them. */
        if (!g || invalidated)
                (void) probe_refresh_object(m, path);
        probe_emit(m, changed);
        return 0;
}

int probe_client_start(Manager *m) {
        int r;

        /* Matches first, then the call: every change after our snapshot is then seen. */
        r = sd_bus_add_match(m->bus, &m->probe_match_owner, match_owner, on_name_owner_changed, m);
        if (r < 0)
                return log_error_errno(r, "Failed to add match for %s owner changes: %m", KGPU_PROBE_BUS_NAME);
        r = sd_bus_add_match(m->bus, &m->probe_match_objects, match_objects, on_interfaces_added, m);
        if (r < 0)
                return log_error_errno(r, "Failed to add match for %s objects: %m", KGPU_PROBE_BUS_NAME);
        r = sd_bus_add_match(m->bus, &m->probe_match_properties, match_properties, on_properties_changed, m);
        if (r < 0)
                return log_error_errno(r, "Failed to add match for %s properties: %m", KGPU_PROBE_BUS_NAME);

        return probe_sync(m);
}

void probe_client_stop(Manager *m) {
        m->probe_sync_slot = sd_bus_slot_unref(m->probe_sync_slot);
        m->probe_match_owner = sd_bus_slot_unref(m->probe_match_owner);
        m->probe_match_objects = sd_bus_slot_unref(m->probe_match_objects);
        m->probe_match_properties = sd_bus_slot_unref(m->probe_match_properties);
        m->probe_owner = mfree(m->probe_owner);
}
