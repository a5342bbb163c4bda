/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * main.c — kgpu-grpcd: the kubelet side of kgpu (device plugin servers, registration).
 *
 * Contract: parses the command line and the configuration, drops root to
 * Config.grpc_user before any socket is opened, runs the Manager until SIGTERM/SIGINT
 * (exit 0: servers closed, our sockets removed) or a fatal error (exit 1).
 */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>

#include "common/bus-introspect.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/grpc/manager.h"

static const DaemonInfo info = {
        .name = "kgpu-grpcd",
        .description = "Serves kgpu's resources to the kubelet (device plugin API v1beta1). It exports no D-Bus\n"
                       "interface of its own: --introspect prints an empty node.",
        .introspect = NULL,
};

static int run(int argc, char *argv[]) {
        _cleanup_(config_freep) Config *config = NULL;
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_(sd_event_unrefp) sd_event *event = NULL;
        _cleanup_(daemon_args_done) DaemonArgs args = {};
        sigset_t mask;
        int r;

        r = daemon_parse_argv(&info, argc, argv, &args);
        if (r <= 0)
                return r;

        r = daemon_load_config(&args, &config);
        if (r < 0)
                return r;

        /* Before any socket: the bus connection, the plugin sockets, the kubelet. */
        r = privileges_drop(config->grpc_user, "grpc.user");
        if (r < 0)
                return r;

        r = sd_event_default(&event);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate the event loop: %m");
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return log_error_errno(errno, "Failed to block signals: %m");
        r = sd_event_add_signal(event, NULL, SIGTERM, NULL, NULL);
        if (r >= 0)
                r = sd_event_add_signal(event, NULL, SIGINT, NULL, NULL);
        if (r < 0)
                return log_error_errno(r, "Failed to handle SIGTERM/SIGINT: %m");
        (void) sd_event_set_watchdog(event, true);

        r = manager_new(event, TAKE_PTR(config), &m);
        if (r < 0)
                return log_error_errno(r, "Failed to set up: %m");
        m->args = &args;
        r = manager_start(m);
        if (r < 0)
                return r;

        log_struct(LOG_INFO, KGPU_MESSAGE_STARTED, "kgpu-grpcd %s started.", KGPU_VERSION);
        (void) sd_notify(false, "READY=1");

        r = sd_event_loop(event);
        (void) sd_notify(false, "STOPPING=1");
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m");
        if (r != 0)
                return log_error_errno(-EIO, "Exiting after a fatal error.");
        log_info("Exiting.");
        return 0;
}

int main(int argc, char *argv[]) {
        int r;

        log_setup("kgpu-grpcd");
        log_parse_environment();
        /* Sockets we create are 0660 via fchmod in the gRPC layer; nothing else is written. */
        umask(0022);

        r = run(argc, argv);
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
