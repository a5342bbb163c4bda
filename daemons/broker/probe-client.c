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
#include "common/bus-util.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/inventory.h"
#include "daemons/broker/broker-dbus.h"
#include "daemons/broker/manager.h"
#include "daemons/broker/mps-client.h"
#include "daemons/broker/probe-client.h"

static const char match_owner[] =
        "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',"
        "interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='" KGPU_PROBE_BUS_NAME "'";
static const char match_objects[] =
        "type='signal',sender='" KGPU_PROBE_BUS_NAME "',path='" KGPU_PROBE_PATH "',"
        "interface='org.freedesktop.DBus.ObjectManager'";
static const char match_properties[] =
        "type='signal',sender='" KGPU_PROBE_BUS_NAME "',interface='org.freedesktop.DBus.Properties',"
        "member='PropertiesChanged',arg0='" KGPU_GPU_INTERFACE "',path_namespace='" KGPU_PROBE_PATH "'";

typedef struct ProbeInterfaces {
        GpuInfo info;
        bool bad;                       /* io.kgpu.Gpu1 was there but invalid */
} ProbeInterfaces;

static bool gpu_path_valid(const char *path) {
        const char *p = startswith(path, KGPU_GPU_PATH_PREFIX "/");

        return p && *p && !strchr(p, '/') && strlen(path) <= 1024;
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

/* bus_read_interface_map()'s handler for io.kgpu.Gpu1: an invalid map is consumed and
 * remembered, so that the walk goes on and fails at the end. */
static int probe_read_gpu1(sd_bus_message *msg, void *userdata) {
        ProbeInterfaces *p = userdata;
        int r;

        r = probe_gpu_properties_apply(msg, &p->info);
        if (r == -EBADMSG) {
                p->bad = true;
                return 1;
        }
        return r < 0 ? r : 1;
}

/* Reads a{sa{sv}} and returns the io.kgpu.Gpu1 properties applied over defaults.
 * Returns 1 if the interface was there, 0 if not. */
static int probe_read_interfaces(sd_bus_message *msg, GpuInfo *ret) {
        ProbeInterfaces p = { .info = { .numa_node = -1, .index = -1 } };
        int r;

        r = bus_read_interface_map(msg, KGPU_GPU_INTERFACE, probe_read_gpu1, &p);
        if (r >= 0 && p.bad)
                r = -EBADMSG;
        if (r <= 0) {
                gpu_info_done(&p.info);
                return r;
        }
        *ret = p.info;
        return 1;
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
