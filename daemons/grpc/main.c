/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * main.c — kgpu-grpcd: the kubelet side of kgpu (device plugin servers, registration).
 *
 * Contract: the daemon skeleton (common/daemon.h) parses the command line and the
 * configuration, drops root to Config.grpc_user before any socket is opened, and runs
 * the Manager until SIGTERM/SIGINT (exit 0: servers closed, our sockets removed) or a
 * fatal error (exit 1). SIGHUP reloads (reload.h).
 */

#include <stdlib.h>
#include <sys/stat.h>

#include "common/bus-introspect.h"
#include "common/daemon.h"
#include "common/log.h"
#include "daemons/grpc/manager.h"
#include "daemons/grpc/reload.h"

/* No object on the bus: the node says so, and stays a valid (empty) document. */
static int grpcd_introspect(void) {
        return bus_introspect_print_none("kgpu-grpcd exports no D-Bus interface: it is a client of "
                                         "io.kgpu.Broker1 (kgpu-brokerd) and io.kgpu.Probe1 (kgpu-probed)");
}

static const DaemonInfo info = {
        .name = "kgpu-grpcd",
        .description = "Serves kgpu's resources to the kubelet (device plugin API v1beta1). It exports no D-Bus\n"
                       "interface of its own: --introspect prints an empty node that says so.",
        .introspect = grpcd_introspect,
};

static const char *grpcd_user(const Config *c) {
        return c->grpc_user;
}

static int grpcd_start(Daemon *d, Config *config) {
        Manager *m;
        int r;

        /* Sockets we create are 0660 via fchmod in the gRPC layer; nothing else is written. */
        umask(0022);

        r = manager_new(d->event, config, &m);
        if (r < 0)
                return log_error_errno(r, "Failed to set up: %m");
        d->state = m;
        return manager_start(m);
}

static void grpcd_started(Daemon *d) {
        log_struct(LOG_INFO, KGPU_MESSAGE_STARTED, "kgpu-grpcd %s started.", KGPU_VERSION);
}

static void grpcd_on_reload(Daemon *d) {
        (void) grpcd_reload(d->state, &d->args);
}

static int grpcd_exit_status(Daemon *d, int r) {
        if (r < 0)
                return EXIT_FAILURE;
        if (r != 0) {
                log_error_errno(-EIO, "Exiting after a fatal error.");
                return EXIT_FAILURE;
        }
        log_info("Exiting.");
        return EXIT_SUCCESS;
}

static void grpcd_free(void *state) {
        manager_free(state);
}

static const DaemonHooks hooks = {
        .user = grpcd_user,
        .user_key = "grpc.user",
        .start = grpcd_start,
        .started = grpcd_started,
        .reload = grpcd_on_reload,
        .exit_status = grpcd_exit_status,
        .free = grpcd_free,
};

DEFINE_DAEMON_MAIN(info, hooks)
