/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * main.c — kgpu-brokerd: the daemon skeleton's hooks around the Manager.
 *
 * Contract: the daemon skeleton (common/daemon.h) parses the command line and the
 * configuration and, started as root, becomes Config.broker_user before the bus or the
 * database is opened. Exits 0 after SIGTERM/SIGINT or --help/--version/--introspect, 1
 * on a configuration error, a failed privilege drop or a failure to serve the bus.
 * READY=1 follows the "started" line, once the bus name is taken and the state loaded.
 * SIGHUP reloads (reload.h).
 */

#include "common/bus-names.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/log.h"
#include "daemons/broker/broker-dbus.h"
#include "daemons/broker/manager.h"
#include "daemons/broker/reload.h"

static const DaemonInfo info = {
        .name = "kgpu-brokerd",
        .description = "Decides which GPUs are advertised to the kubelet and records every allocation.",
        .introspect = broker_dbus_introspect,
};

static const char *brokerd_user(const Config *c) {
        return c->broker_user;
}

static int brokerd_start(Daemon *d, Config *config) {
        Manager *m;
        int r;

        r = manager_new(config, &m);
        if (r < 0)
                return r;
        m->args = &d->args;
        d->state = m;
        return manager_start(m);
}

static void brokerd_started(Daemon *d) {
        Manager *m = d->state;

        log_struct(LOG_INFO, KGPU_MESSAGE_STARTED, "kgpu-brokerd %s started as %s, state %s.",
                   KGPU_VERSION, KGPU_BROKER_BUS_NAME,
                   m->store ? store_get_path(m->store) : "UNAVAILABLE (refusing allocations)");
        manager_update_status(m);
}

static void brokerd_on_reload(Daemon *d) {
        (void) broker_reload(d->state, NULL);   /* logs; a refused config leaves the old one */
}

static void brokerd_free(void *state) {
        manager_free(state);
}

static const DaemonHooks hooks = {
        .user = brokerd_user,
        .user_key = "broker.user",
        .start = brokerd_start,
        .started = brokerd_started,
        .reload = brokerd_on_reload,
        .free = brokerd_free,
};

DEFINE_DAEMON_MAIN(info, hooks)
