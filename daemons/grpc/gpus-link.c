/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gpus-link.c — kgpu-grpcd follows the probe's GPU objects (see gpus-link.h).
 *
 * One call is in flight at a time for the owner (GetNameOwner, then
 * GetConnectionUnixUser, then GetManagedObjects, each started from the previous one's
 * answer); a new owner replaces it. GetAll calls for single objects are floating and
 * check, when their answer comes, that it is still from the believed owner.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/bus-names.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/grpc/gpus-link.h"
#include "daemons/grpc/manager.h"
#include "daemons/grpc/probe-gpus.h"

static const char match_owner[] =
        "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',"
        "interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='" KGPU_PROBE_BUS_NAME "'";
static const char match_objects[] =
        "type='signal',sender='" KGPU_PROBE_BUS_NAME "',path='" KGPU_PROBE_PATH "',"
        "interface='org.freedesktop.DBus.ObjectManager'";
static const char match_properties[] =
        "type='signal',sender='" KGPU_PROBE_BUS_NAME "',interface='org.freedesktop.DBus.Properties',"
        "member='PropertiesChanged',arg0='" KGPU_GPU_INTERFACE "',path_namespace='" KGPU_GPU_PATH_PREFIX "'";

static bool from_owner(Manager *m, sd_bus_message *msg) {
        return m->gpus_owner && streq(sd_bus_message_get_sender(msg), m->gpus_owner);
}

static int on_get_managed_objects(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const sd_bus_error *e;
        size_t skipped = 0;
        bool first = !m->gpus->known;
        int r;

        m->gpus_call = sd_bus_slot_unref(m->gpus_call);
        e = sd_bus_message_get_error(reply);
        if (e) {
                log_warning("GetManagedObjects of kgpu-probed failed: %s; Allocate answers are checked against %s.",
                            e->message ?: e->name, first ? "nothing (refused)" : "its last inventory");
                return 0;
        }
        if (!m->gpus_candidate || !streq(sd_bus_message_get_sender(reply), m->gpus_candidate))
                return 0;

        r = probe_gpus_replace(m->gpus, reply, &skipped);
        if (r < 0) {
                log_warning_errno(r, "Malformed GetManagedObjects reply of kgpu-probed, keeping %s: %m",
                                  first ? "no inventory (Allocate answers are refused)" : "the last inventory");
                return 0;
        }
        m->gpus_owner = TAKE_PTR(m->gpus_candidate);
        if (skipped > 0)
                log_warning("kgpu-probed exports %zu GPU object(s) with invalid io.kgpu.Gpu1 properties or beyond "
                            "%u objects: they grant nothing in Allocate answers.", skipped, PROBE_GPUS_MAX);
        if (first)
                log_info("GPU inventory of kgpu-probed read (%zu GPU objects): Allocate answers are checked against it.",
                         m->gpus->n_gpus);
        else
                log_debug("GPU inventory of kgpu-probed read again (%zu GPU objects).", m->gpus->n_gpus);
        return 0;
}

static int on_owner_uid(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const sd_bus_error *e;
        uint32_t uid;
        int r;

        m->gpus_call = sd_bus_slot_unref(m->gpus_call);
        if (!m->gpus_candidate)
                return 0;
        e = sd_bus_message_get_error(reply);
        if (e) {
                /* Gone already: its NameOwnerChanged follows. */
                log_debug("GetConnectionUnixUser(%s) failed: %s", m->gpus_candidate, e->message ?: e->name);
                m->gpus_candidate = mfree(m->gpus_candidate);
                return 0;
        }
        r = sd_bus_message_read_basic(reply, 'u', &uid);
        if (r <= 0) {
                log_warning("Malformed GetConnectionUnixUser reply of the bus, not reading kgpu-probed's GPU objects.");
                m->gpus_candidate = mfree(m->gpus_candidate);
                return 0;
        }
        if (uid != 0 && uid != (uint32_t) geteuid()) {
                log_warning("%s is owned by %s with uid %u, neither root nor kgpu-grpcd's own: its GPU objects are not "
                            "believed; Allocate answers are checked against %s.", KGPU_PROBE_BUS_NAME,
                            m->gpus_candidate, uid, m->gpus->known ? "the last inventory" : "nothing (refused)");
                m->gpus_candidate = mfree(m->gpus_candidate);
                return 0;
        }
        r = sd_bus_call_method_async(m->bus, &m->gpus_call, m->gpus_candidate, KGPU_PROBE_PATH,
                                     "org.freedesktop.DBus.ObjectManager", "GetManagedObjects",
                                     on_get_managed_objects, m, NULL);
        if (r < 0)
                log_warning_errno(r, "Failed to ask kgpu-probed for its GPU objects, ignoring: %m");
        return 0;
}

/* A (new) owner of the probe's name: believed once its uid and its objects are read. */
static void gpus_new_owner(Manager *m, const char *owner) {
        int r;

        m->gpus_call = sd_bus_slot_unref(m->gpus_call);
        m->gpus_owner = mfree(m->gpus_owner);
        r = free_and_strdup(&m->gpus_candidate, owner);
        if (r < 0) {
                log_oom();
                return;
        }
        r = sd_bus_call_method_async(m->bus, &m->gpus_call, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                     "org.freedesktop.DBus", "GetConnectionUnixUser", on_owner_uid, m,
                                     "s", owner);
        if (r < 0)
                log_warning_errno(r, "Failed to ask the bus who owns %s, ignoring: %m", KGPU_PROBE_BUS_NAME);
}

static int on_name_owner_changed(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        const char *name, *old_owner, *new_owner;
        Manager *m = userdata;
        int r;

        r = sd_bus_message_read(msg, "sss", &name, &old_owner, &new_owner);
        if (r < 0 || !streq(name, KGPU_PROBE_BUS_NAME))
                return 0;
        if (isempty(new_owner)) {
                m->gpus_call = sd_bus_slot_unref(m->gpus_call);
                m->gpus_owner = mfree(m->gpus_owner);
                m->gpus_candidate = mfree(m->gpus_candidate);
                if (m->gpus->known)
                        log_notice("kgpu-probed left the bus: Allocate answers are checked against its last inventory "
                                   "(%zu GPU objects).", m->gpus->n_gpus);
                return 0;
        }
        gpus_new_owner(m, new_owner);
        return 0;
}

static int on_get_name_owner(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const char *owner;

        m->gpus_call = sd_bus_slot_unref(m->gpus_call);
        if (sd_bus_message_is_method_error(reply, NULL)) {
                log_notice("kgpu-probed is not on the bus: Allocate answers are refused until its GPU inventory is read.");
                return 0;
        }
        if (sd_bus_message_read_basic(reply, 's', &owner) <= 0 || isempty(owner))
                return 0;
        gpus_new_owner(m, owner);
        return 0;
}

static void gpus_drop(Manager *m, const char *path, const char *why) {
        int r;

        r = probe_gpus_remove(m->gpus, path);
        if (r < 0)
                log_oom();
        log_warning("kgpu-probed's GPU object %s %s: it grants nothing until it is valid.", path, why);
}

typedef struct GetAllCall {
        Manager *manager;
        char path[];
} GetAllCall;

static int on_get_all(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        _cleanup_(probe_gpu_freep) ProbeGpu *g = NULL;
        GetAllCall *c = userdata;
        Manager *m = c->manager;
        int r;

        if (sd_bus_message_is_method_error(reply, NULL)) {
                log_debug("GetAll of %s failed: %s", c->path, sd_bus_message_get_error(reply)->name);
                return 0;
        }
        if (!from_owner(m, reply))
                return 0;
        r = probe_gpu_new(c->path, &g);
        if (r >= 0)
                r = probe_gpu_apply_properties(g, reply);
        if (r >= 0 && isempty(g->id))
                r = -EBADMSG;
        if (r == -EBADMSG) {
                gpus_drop(m, c->path, "has invalid io.kgpu.Gpu1 properties");
                return 0;
        }
        if (r < 0)
                return log_warning_errno(r, "Failed to read GPU object %s of kgpu-probed, ignoring: %m", c->path);
        r = probe_gpus_put(m->gpus, TAKE_PTR(g));
        if (r < 0)
                log_warning_errno(r, "Failed to keep GPU object %s of kgpu-probed, ignoring: %m", c->path);
        return 0;
}

static void gpus_refresh_object(Manager *m, const char *path) {
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        GetAllCall *c;
        int r;

        c = malloc(sizeof(GetAllCall) + strlen(path) + 1);
        if (!c) {
                log_oom();
                return;
        }
        c->manager = m;
        strcpy(c->path, path);
        r = sd_bus_call_method_async(m->bus, &slot, m->gpus_owner, path, "org.freedesktop.DBus.Properties",
                                     "GetAll", on_get_all, c, "s", KGPU_GPU_INTERFACE);
        if (r < 0) {
                free(c);
                log_warning_errno(r, "Failed to ask kgpu-probed for the properties of %s, ignoring: %m", path);
                return;
        }
        (void) sd_bus_slot_set_destroy_callback(slot, free);
        (void) sd_bus_slot_set_floating(slot, true);
}

static int on_object_manager(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const char *path;
        int r;

        if (!from_owner(m, msg))
                return 0;
        r = sd_bus_message_read_basic(msg, 'o', &path);
        if (r <= 0 || !probe_gpus_object_path_valid(path))
                return 0;

        if (sd_bus_message_is_signal(msg, "org.freedesktop.DBus.ObjectManager", "InterfacesAdded")) {
                ProbeGpu *g = NULL;

                r = probe_gpus_read_interfaces(msg, path, &g);
                if (r == -EBADMSG) {
                        gpus_drop(m, path, "was added with invalid io.kgpu.Gpu1 properties");
                        return 0;
                }
                if (r < 0)
                        return log_warning_errno(r, "Malformed InterfacesAdded of kgpu-probed for %s, ignoring: %m", path);
                if (r == 0)
                        return 0;
                r = probe_gpus_put(m->gpus, g);
                if (r < 0)
                        log_warning_errno(r, "Failed to keep GPU object %s of kgpu-probed, ignoring: %m", path);
                return 0;
        }
        if (sd_bus_message_is_signal(msg, "org.freedesktop.DBus.ObjectManager", "InterfacesRemoved")) {
                r = sd_bus_message_enter_container(msg, 'a', "s");
                if (r <= 0)
                        return 0;
                for (;;) {
                        const char *iface;

                        r = sd_bus_message_read_basic(msg, 's', &iface);
                        if (r <= 0)
                                return 0;
                        if (streq(iface, KGPU_GPU_INTERFACE))
                                break;
                }
                if (probe_gpus_remove(m->gpus, path) > 0)
                        log_debug("GPU object %s of kgpu-probed removed.", path);
        }
        return 0;
}

static int on_properties_changed(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const char *path = sd_bus_message_get_path(msg), *iface;
        ProbeGpu *g;
        int r;

        if (!from_owner(m, msg) || !probe_gpus_object_path_valid(path))
                return 0;
        r = sd_bus_message_read_basic(msg, 's', &iface);
        if (r <= 0 || !streq(iface, KGPU_GPU_INTERFACE))
                return 0;
        g = probe_gpus_get(m->gpus, path);
        if (!g) {
                /* Not known (dropped, or its InterfacesAdded was lost): read it whole. */
                gpus_refresh_object(m, path);
                return 0;
        }
        r = probe_gpu_apply_properties(g, msg);
        if (r == -EBADMSG) {
                gpus_drop(m, path, "changed to invalid io.kgpu.Gpu1 properties");
                return 0;
        }
        if (r < 0)
                return log_warning_errno(r, "Malformed PropertiesChanged of kgpu-probed for %s, ignoring: %m", path);
        r = probe_gpus_reindex(m->gpus);
        if (r < 0)
                return log_oom();
        /* Invalidated properties come without their values: ask for them. */
        r = sd_bus_message_enter_container(msg, 'a', "s");
        if (r > 0) {
                const char *name;

                if (sd_bus_message_read_basic(msg, 's', &name) > 0)
                        gpus_refresh_object(m, path);
        }
        return 0;
}

int gpus_link_start(Manager *m) {
        int r;

        if (!m->gpus) {
                m->gpus = probe_gpus_new();
                if (!m->gpus)
                        return -ENOMEM;
        }
        r = sd_bus_add_match_async(m->bus, &m->gpus_owner_match, match_owner, on_name_owner_changed, NULL, m);
        if (r < 0)
                return r;
        r = sd_bus_add_match_async(m->bus, &m->gpus_objects_match, match_objects, on_object_manager, NULL, m);
        if (r < 0)
                return r;
        r = sd_bus_add_match_async(m->bus, &m->gpus_props_match, match_properties, on_properties_changed, NULL, m);
        if (r < 0)
                return r;
        /* Sent after the AddMatch calls on the same connection: no change falls between. */
        return sd_bus_call_method_async(m->bus, &m->gpus_call, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                        "org.freedesktop.DBus", "GetNameOwner", on_get_name_owner, m,
                                        "s", KGPU_PROBE_BUS_NAME);
}

void gpus_link_stop(Manager *m) {
        m->gpus_owner_match = sd_bus_slot_unref(m->gpus_owner_match);
        m->gpus_objects_match = sd_bus_slot_unref(m->gpus_objects_match);
        m->gpus_props_match = sd_bus_slot_unref(m->gpus_props_match);
        m->gpus_call = sd_bus_slot_unref(m->gpus_call);
        m->gpus_owner = mfree(m->gpus_owner);
        m->gpus_candidate = mfree(m->gpus_candidate);
}
