/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * node-config.c — the probe follows io.kgpu.Broker1's NodeConfig; see node-config.h.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-bus.h>

#include "common/bus-names.h"
#include "common/config-overlay.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/node-config.h"
#include "daemons/probe/reload.h"

struct ProbeNodeConfig {
        Manager *manager;
        const DaemonArgs *args;
        char *name;                     /* in force here, "" : kgpu.yaml's own */
        sd_bus_slot *match_owner;
        sd_bus_slot *match_properties;
        sd_bus_slot *get_slot;
};

static const char match_owner[] =
        "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',"
        "interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='" KGPU_BROKER_BUS_NAME "'";
static const char match_properties[] =
        "type='signal',sender='" KGPU_BROKER_BUS_NAME "',path='" KGPU_BROKER_PATH "',"
        "interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',arg0='" KGPU_BROKER_INTERFACE "'";

ProbeNodeConfig *probe_node_config_free(ProbeNodeConfig *p) {
        if (!p)
                return NULL;
        sd_bus_slot_unref(p->match_owner);
        sd_bus_slot_unref(p->match_properties);
        sd_bus_slot_unref(p->get_slot);
        free(p->name);
        return mfree(p);
}

const char *probe_node_config_name(const Manager *m) {
        return m->node_config && m->node_config->name ? m->node_config->name : "";
}

static void take(ProbeNodeConfig *p, const char *value) {
        _cleanup_free_ char *old = NULL;

        if (!isempty(value) && !config_name_valid(value)) {
                log_warning("The broker's NodeConfig is not a valid config name, ignored.");
                return;
        }
        if (streq(value, p->name ?: ""))
                return;
        old = TAKE_PTR(p->name);
        p->name = strdup(value);
        if (!p->name) {
                p->name = TAKE_PTR(old);
                log_oom();
                return;
        }
        log_info("The broker has the named NVIDIA config '%s' in force, reloading with it.", value);
        if (probe_reload(&(ProbeReload) { .manager = p->manager, .args = p->args }) < 0) {
                log_warning("Keeping the NVIDIA config '%s'.", old ?: "");
                free(p->name);
                p->name = TAKE_PTR(old);
        }
}

static int on_get(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        ProbeNodeConfig *p = userdata;
        const char *value;
        int r;

        p->get_slot = sd_bus_slot_unref(p->get_slot);
        if (sd_bus_message_is_method_error(reply, NULL)) {
                log_debug("Cannot read the broker's NodeConfig: %s", sd_bus_message_get_error(reply)->message);
                return 0;
        }
        r = sd_bus_message_read(reply, "v", "s", &value);
        if (r < 0) {
                log_warning_errno(r, "The broker's NodeConfig is not a string, ignored: %m");
                return 0;
        }
        take(p, value);
        return 0;
}

static int ask(ProbeNodeConfig *p) {
        int r;

        p->get_slot = sd_bus_slot_unref(p->get_slot);
        r = sd_bus_call_method_async(p->manager->bus, &p->get_slot, KGPU_BROKER_BUS_NAME, KGPU_BROKER_PATH,
                                     "org.freedesktop.DBus.Properties", "Get", on_get, p, "ss",
                                     KGPU_BROKER_INTERFACE, "NodeConfig");
        if (r < 0)
                log_debug_errno(r, "Cannot ask the broker for its NodeConfig: %m");
        return 0;
}

static int on_owner(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        ProbeNodeConfig *p = userdata;
        const char *name, *old_owner, *new_owner;

        if (sd_bus_message_read(msg, "sss", &name, &old_owner, &new_owner) < 0 || isempty(new_owner))
                return 0;
        return ask(p);
}

static int on_properties(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        ProbeNodeConfig *p = userdata;
        const char *iface;
        int r;

        r = sd_bus_message_read(msg, "s", &iface);
        if (r < 0 || !streq(iface, KGPU_BROKER_INTERFACE))
                return 0;
        r = sd_bus_message_enter_container(msg, 'a', "{sv}");
        if (r < 0)
                return 0;
        for (;;) {
                const char *prop, *value;

                r = sd_bus_message_enter_container(msg, 'e', "sv");
                if (r <= 0)
                        return 0;
                if (sd_bus_message_read(msg, "s", &prop) < 0)
                        return 0;
                if (streq(prop, "NodeConfig")) {
                        if (sd_bus_message_read(msg, "v", "s", &value) < 0) {
                                log_warning("The broker's NodeConfig is not a string, ignored.");
                                return 0;
                        }
                        take(p, value);
                        return 0;
                }
                if (sd_bus_message_skip(msg, "v") < 0 || sd_bus_message_exit_container(msg) < 0)
                        return 0;
        }
}

int probe_node_config_start(Manager *m, const DaemonArgs *args) {
        ProbeNodeConfig *p;
        int r;

        p = calloc(1, sizeof(ProbeNodeConfig));
        if (!p)
                return log_oom();
        p->manager = m;
        p->args = args;
        m->node_config = p;
        r = sd_bus_add_match(m->bus, &p->match_owner, match_owner, on_owner, p);
        if (r < 0)
                return log_error_errno(r, "Failed to add a match for %s owner changes: %m", KGPU_BROKER_BUS_NAME);
        r = sd_bus_add_match(m->bus, &p->match_properties, match_properties, on_properties, p);
        if (r < 0)
                return log_error_errno(r, "Failed to add a match for %s properties: %m", KGPU_BROKER_BUS_NAME);
        return ask(p);
}
