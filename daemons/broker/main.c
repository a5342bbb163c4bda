/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * main.c — kgpu-brokerd: command line, configuration, privilege drop, then the Manager.
 *
 * Contract: exits 0 after SIGTERM/SIGINT or --help/--version/--introspect, 1 on a
 * configuration error, a failed privilege drop or a failure to serve the bus. Started
 * as root it becomes Config.broker_user before it opens the bus or the database.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/broker-dbus.h"
#include "daemons/broker/manager.h"

static const DaemonInfo info = {
        .name = "kgpu-brokerd",
        .description = "Decides which GPUs are advertised to the kubelet and records every allocation.",
        .introspect = broker_dbus_introspect,
};

int main(int argc, char *argv[]) {
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_(config_freep) Config *config = NULL;
        _cleanup_(daemon_args_done) DaemonArgs args = {};
        int r;

        log_setup("kgpu-brokerd");
        log_parse_environment();

        r = daemon_parse_argv(&info, argc, argv, &args);
        if (r <= 0)
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;

        r = daemon_load_config(&args, &config);
        if (r < 0)
                return EXIT_FAILURE;

        /* Before the bus or the database is opened. */
        r = privileges_drop(config->broker_user, "broker.user");
        if (r < 0)
                return EXIT_FAILURE;

        r = manager_new(TAKE_PTR(config), &m);
        if (r < 0)
                return EXIT_FAILURE;
        m->config_path = args.config_path;
        m->config_overrides = args.overrides;
        m->n_config_overrides = args.n_overrides;
        r = manager_start(m);
        if (r < 0)
                return EXIT_FAILURE;
        r = manager_run(m);
        return r == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
