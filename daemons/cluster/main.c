/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * main.c — kgpu-clusterd: the daemon skeleton's hooks around the Manager.
 *
 * Contract: the daemon skeleton (common/daemon.h) parses the command line and the
 * configuration and, started as root, becomes Config.cluster_user before anything is
 * read or opened. Exits 0 after SIGTERM/SIGINT or --help/--version/--introspect, and
 * also when there are no credentials at all (no cluster.kubeconfig, not in a pod): the
 * node works without kgpu-clusterd, and a unit with Restart=on-failure leaves it
 * stopped. Exits 1 on a configuration error, unusable credentials, a failed privilege
 * drop or a failure to serve the bus. SIGHUP reloads kgpu.yaml and the credentials.
 */

#include <stdlib.h>

#include <systemd/sd-daemon.h>

#include "common/bus-names.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/log.h"
#include "daemons/cluster/cluster-dbus.h"
#include "daemons/cluster/manager.h"

static const DaemonInfo info = {
        .name = "kgpu-clusterd",
        .description = "Watches this node and its pods in the Kubernetes API server and tells the broker.",
        .introspect = cluster_dbus_introspect,
};

static const char *clusterd_user(const Config *c) {
        return c->cluster_user;
}

static int clusterd_start(Daemon *d, Config *config) {
        Manager *m;
        int r;

        r = manager_new(config, &m);
        if (r < 0)
                return r;
        d->state = m;
        r = manager_start(m);
        if (r == MANAGER_NOT_CONFIGURED)
                /* Tell the service manager we are fine, just have nothing to do. */
                (void) sd_notify(false, "READY=1\nSTATUS=Not configured: no kubeconfig and not in a pod.");
        return r;
}

static void clusterd_started(Daemon *d) {
        Manager *m = d->state;

        log_struct(LOG_INFO, KGPU_MESSAGE_STARTED, "kgpu-clusterd %s started as %s, node %s.",
                   KGPU_VERSION, KGPU_CLUSTER_BUS_NAME, m->node_name);
}

static void clusterd_on_reload(Daemon *d) {
        Config *c = NULL;

        if (daemon_load_config(&d->args, &c) < 0) {
                log_error("Reloaded configuration refused, keeping the one in force.");
                return;
        }
        manager_reload(d->state, c);
}

static int clusterd_exit_status(Daemon *d, int r) {
        if (r == 0 || r == MANAGER_NOT_CONFIGURED)
                return EXIT_SUCCESS;
        return EXIT_FAILURE;
}

static void clusterd_free(void *state) {
        manager_free(state);
}

static const DaemonHooks hooks = {
        .user = clusterd_user,
        .user_key = "cluster.user",
        .start = clusterd_start,
        .started = clusterd_started,
        .reload = clusterd_on_reload,
        .exit_status = clusterd_exit_status,
        .free = clusterd_free,
};

DEFINE_DAEMON_MAIN(info, hooks)
