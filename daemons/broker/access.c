/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * access.c — who may call what on /io/kgpu/Broker1 (see access.h).
 */

#include <string.h>
#include <unistd.h>

#include "common/bus-names.h"
#include "common/util.h"
#include "daemons/broker/access.h"
#include "daemons/broker/manager.h"

/* The members of io.kgpu.Broker1 open to everyone, as the default policy of
 * dbus/io.kgpu.Broker1.conf lists them. */
static const char *const broker_reads[] = {
        "ListResources", "GetDevices", "GetPreferredAllocation", "ListAllocations",
};

/* What the API server says of this node: kgpu-clusterd's. */
static const char *const broker_cluster_members[] = {
        "SetNodeConfig", "SetGasPods",
};

static bool in_list(const char *const *l, size_t n, const char *s) {
        for (size_t i = 0; s && i < n; i++)
                if (streq(l[i], s))
                        return true;
        return false;
}

BrokerCallers broker_access_callers(const char *interface, const char *member) {
        if (!interface)
                return BROKER_CALLERS_GRPC;
        if (streq(interface, KGPU_BROKER_INTERFACE)) {
                if (in_list(broker_reads, ELEMENTSOF(broker_reads), member))
                        return BROKER_CALLERS_ANYONE;
                if (in_list(broker_cluster_members, ELEMENTSOF(broker_cluster_members), member))
                        return BROKER_CALLERS_CLUSTER;
                return BROKER_CALLERS_GRPC;
        }
        if (streq(interface, "org.freedesktop.DBus.Introspectable") ||
            streq(interface, "org.freedesktop.DBus.Peer"))
                return BROKER_CALLERS_ANYONE;
        if (streq(interface, "org.freedesktop.DBus.Properties") &&
            (streq_ptr(member, "Get") || streq_ptr(member, "GetAll")))
                return BROKER_CALLERS_ANYONE;
        return BROKER_CALLERS_GRPC;
}

bool broker_access_allowed(const Manager *m, uid_t uid, BrokerCallers callers) {
        if (uid == (uid_t) -1)
                return false;
        switch (callers) {
        case BROKER_CALLERS_ANYONE:
                return true;
        case BROKER_CALLERS_GRPC:
                return uid == 0 || uid == geteuid() || (m->grpc_uid != (uid_t) -1 && uid == m->grpc_uid);
        case BROKER_CALLERS_CLUSTER:
                return uid == 0 || uid == geteuid() || (m->cluster_uid != (uid_t) -1 && uid == m->cluster_uid);
        }
        return false;
}

const char *broker_access_user(const Manager *m, BrokerCallers callers) {
        const char *u = callers == BROKER_CALLERS_CLUSTER ? m->config->cluster_user : m->config->grpc_user;

        return u ?: "(none)";
}

bool broker_access_trusted(const Manager *m, uid_t uid) {
        return broker_access_allowed(m, uid, BROKER_CALLERS_GRPC) ||
               broker_access_allowed(m, uid, BROKER_CALLERS_CLUSTER);
}
