/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cluster-dbus.c — io.kgpu.Cluster1: what kgpu-clusterd knows and how its link to the
 * API server stands (see cluster-dbus.h and dbus/io.kgpu.Cluster1.xml).
 *
 * Contract: see cluster-dbus.h. Only properties, all read-only; nothing here changes
 * state, so the interface needs no caller check.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-bus.h>

#include "common/bus-introspect.h"
#include "common/bus-names.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/cluster/cluster-dbus.h"
#include "daemons/cluster/manager.h"

static bool connected(const Manager *m) {
        return m->node.watching && m->pods.watching;
}

/* The newer of the two reflectors' errors. */
static const char *last_error(const Manager *m) {
        if (!m->node.last_error)
                return m->pods.last_error ?: "";
        if (!m->pods.last_error)
                return m->node.last_error;
        return m->node.last_error_realtime >= m->pods.last_error_realtime ? m->node.last_error : m->pods.last_error;
}

static uint64_t last_error_time(const Manager *m) {
        return MAX(m->node.last_error_realtime, m->pods.last_error_realtime);
}

static int property_get(sd_bus *bus, const char *path, const char *interface, const char *property,
                        sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;

        if (streq(property, "Version"))
                return sd_bus_message_append(reply, "s", KGPU_VERSION);
        if (streq(property, "StartTime"))
                return sd_bus_message_append(reply, "t", m->start_time);
        if (streq(property, "Server"))
                return sd_bus_message_append(reply, "s", m->creds ? m->creds->server : "");
        if (streq(property, "NodeName"))
                return sd_bus_message_append(reply, "s", m->node_name ?: "");
        if (streq(property, "ConfigLabel"))
                return sd_bus_message_append(reply, "s", m->config->cluster_config_label ?: "");
        if (streq(property, "Connected"))
                return sd_bus_message_append(reply, "b", connected(m));
        if (streq(property, "LastError"))
                return sd_bus_message_append(reply, "s", last_error(m));
        if (streq(property, "LastErrorTime"))
                return sd_bus_message_append(reply, "t", last_error_time(m));
        if (streq(property, "NodeSynced"))
                return sd_bus_message_append(reply, "b", m->node.synced);
        if (streq(property, "NodeFound"))
                return sd_bus_message_append(reply, "b", m->node_found);
        if (streq(property, "ConfigLabelValue"))
                return sd_bus_message_append(reply, "s", m->label_value ?: "");
        if (streq(property, "PodsSynced"))
                return sd_bus_message_append(reply, "b", m->pods.synced);
        if (streq(property, "GasPods"))
                return sd_bus_message_append(reply, "u", (uint32_t) m->pod_store.n_pods);
        if (streq(property, "NodeResourceVersion"))
                return sd_bus_message_append(reply, "s", m->node.rv ?: "");
        if (streq(property, "PodsResourceVersion"))
                return sd_bus_message_append(reply, "s", m->pods.rv ?: "");
        if (streq(property, "BrokerError"))
                return sd_bus_message_append(reply, "s", m->broker_error ?: "");
        if (streq(property, "Requests"))
                return sd_bus_message_append(reply, "t", m->node.lists + m->node.watches + m->pods.lists + m->pods.watches);
        return -ENOENT;
}

static const sd_bus_vtable cluster_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("StartTime", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Server", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("NodeName", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ConfigLabel", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Connected", "b", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LastError", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LastErrorTime", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("NodeSynced", "b", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("NodeFound", "b", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ConfigLabelValue", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("PodsSynced", "b", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("GasPods", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("NodeResourceVersion", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("PodsResourceVersion", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("BrokerError", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Requests", "t", property_get, 0, 0),
        SD_BUS_VTABLE_END
};

int cluster_dbus_register(Manager *m) {
        return sd_bus_add_object_vtable(m->bus, NULL, KGPU_CLUSTER_PATH, KGPU_CLUSTER_INTERFACE, cluster_vtable, m);
}

int cluster_dbus_introspect(void) {
        static const BusIntrospectEntry entries[] = {
                { KGPU_CLUSTER_PATH, KGPU_CLUSTER_INTERFACE, cluster_vtable, false },
        };

        return bus_introspect_print(entries, ELEMENTSOF(entries));
}

static bool update_string(char **slot, const char *now) {
        if (streq_ptr(*slot, now))
                return false;
        (void) free_and_strdup(slot, now);
        return true;
}

void manager_properties_changed(Manager *m) {
        ClusterSnapshot *s = &m->snapshot;
        char *names[16];
        size_t n = 0;
        int r;

        if (!m->bus)
                return;
        if (s->connected != connected(m)) {
                s->connected = connected(m);
                names[n++] = (char *) "Connected";
        }
        if (update_string(&s->last_error, last_error(m))) {
                names[n++] = (char *) "LastError";
                names[n++] = (char *) "LastErrorTime";
        }
        if (update_string(&s->config_label_value, m->label_value ?: ""))
                names[n++] = (char *) "ConfigLabelValue";
        if (s->gas_pods != (uint32_t) m->pod_store.n_pods) {
                s->gas_pods = (uint32_t) m->pod_store.n_pods;
                names[n++] = (char *) "GasPods";
        }
        if (update_string(&s->node_rv, m->node.rv ?: ""))
                names[n++] = (char *) "NodeResourceVersion";
        if (update_string(&s->pods_rv, m->pods.rv ?: ""))
                names[n++] = (char *) "PodsResourceVersion";
        if (s->node_synced != m->node.synced) {
                s->node_synced = m->node.synced;
                names[n++] = (char *) "NodeSynced";
        }
        if (s->node_found != m->node_found) {
                s->node_found = m->node_found;
                names[n++] = (char *) "NodeFound";
        }
        if (s->pods_synced != m->pods.synced) {
                s->pods_synced = m->pods.synced;
                names[n++] = (char *) "PodsSynced";
        }
        if (update_string(&s->broker_error, m->broker_error ?: ""))
                names[n++] = (char *) "BrokerError";
        if (update_string(&s->server, m->creds ? m->creds->server : ""))
                names[n++] = (char *) "Server";
        if (n == 0)
                return;
        names[n] = NULL;
        r = sd_bus_emit_properties_changed_strv(m->bus, KGPU_CLUSTER_PATH, KGPU_CLUSTER_INTERFACE, names);
        if (r < 0)
                log_debug_errno(r, "Failed to emit PropertiesChanged: %m");
}
