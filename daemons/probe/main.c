/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * main.c — kgpu-probed: command line, configuration and the event loop.
 *
 * Exit status 0 on SIGTERM/SIGINT or after --help/--version/--introspect, 1 on any
 * startup failure or when the bus connection is lost (already logged).
 */

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "common/bus-introspect.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/probe-dbus.h"

static const char *arg_config = NULL;
static ConfigOverride *arg_overrides = NULL;
static size_t arg_n_overrides = 0;

static void help(void) {
        printf("kgpu-probed [OPTIONS...]\n\n"
               "Discovers the node's GPUs and exports them on the system bus as %s.\n\n"
               "  -h --help             Show this help\n"
               "     --version          Show the version\n"
               "     --introspect       Print the D-Bus introspection XML and exit\n"
               "     --config=FILE      Read this configuration file\n",
               "io.kgpu.Probe1");
        config_print_flags_help();
}

enum {
        ARG_VERSION = 0x100,
        ARG_INTROSPECT,
        ARG_CONFIG,
};

/* Returns 1 to continue, 0 to exit successfully, <0 on error. */
static int parse_argv(int argc, char *argv[]) {
        static const struct option own[] = {
                { "help",       no_argument,       NULL, 'h' },
                { "version",    no_argument,       NULL, ARG_VERSION },
                { "introspect", no_argument,       NULL, ARG_INTROSPECT },
                { "config",     required_argument, NULL, ARG_CONFIG },
        };
        _cleanup_free_ struct option *options = NULL;
        const struct option *cfg = config_getopt_options();
        size_t n_cfg = 0;
        int c;

        while (cfg[n_cfg].name)
                n_cfg++;
        options = calloc(ELEMENTSOF(own) + n_cfg + 1, sizeof(struct option));
        arg_overrides = calloc((size_t) argc + 1, sizeof(ConfigOverride));
        if (!options || !arg_overrides)
                return log_oom();
        memcpy(options, own, sizeof(own));
        memcpy(options + ELEMENTSOF(own), cfg, n_cfg * sizeof(struct option));

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0) {
                const char *flag;

                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("kgpu-probed %s\n", KGPU_VERSION);
                        return 0;
                case ARG_INTROSPECT: {
                        const BusIntrospectEntry *e;
                        size_t n;
                        int r;

                        e = probe_dbus_introspect_entries(&n);
                        r = bus_introspect_print(e, n);
                        return r < 0 ? r : 0;
                }
                case ARG_CONFIG:
                        arg_config = optarg;
                        break;
                case '?':
                        return -EINVAL;
                default:
                        flag = config_flag_by_val(c);
                        if (!flag)
                                return log_error_errno(-EINVAL, "Unhandled option %d.", c);
                        arg_overrides[arg_n_overrides++] = (ConfigOverride) { flag, optarg };
                }
        }
        if (optind < argc)
                return log_error_errno(-EINVAL, "%s takes no arguments.", program_invocation_short_name);
        return 1;
}

static int run(int argc, char *argv[]) {
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_(config_freep) Config *config = NULL;
        _cleanup_free_ char *error = NULL;
        sigset_t ss;
        int r;

        log_setup("kgpu-probed");
        log_parse_environment();

        r = parse_argv(argc, argv);
        if (r <= 0)
                return r;

        r = config_load(arg_config, arg_overrides, arg_n_overrides, &config, &error);
        if (r < 0)
                return log_error_errno(r, "Invalid configuration: %s", error ?: strerror(-r));
        if (config->log_level) {
                int level = log_level_from_string(config->log_level);

                if (level >= 0)
                        log_set_max_level(level);
        }

        r = manager_new(&m);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate manager: %m");

        r = manager_set_broker_user(m, config->broker_user);
        if (r < 0)
                log_notice_errno(r, "Broker user '%s' not found, only root may call Rescan: %m",
                                 config->broker_user);

        if (sigemptyset(&ss) < 0 || sigaddset(&ss, SIGTERM) < 0 || sigaddset(&ss, SIGINT) < 0 ||
            sigprocmask(SIG_BLOCK, &ss, NULL) < 0)
                return log_error_errno(negative_errno(), "Failed to block signals: %m");
        r = sd_event_add_signal(m->event, NULL, SIGTERM, NULL, NULL);
        if (r >= 0)
                r = sd_event_add_signal(m->event, NULL, SIGINT, NULL, NULL);
        if (r < 0)
                return log_error_errno(r, "Failed to watch signals: %m");

        r = manager_start(m);
        if (r < 0)
                return r;

        log_struct(LOG_INFO, KGPU_MESSAGE_STARTED, "kgpu-probed %s started, %zu GPUs.",
                   KGPU_VERSION, m->n_gpus);
        (void) sd_notify(false, "READY=1");

        r = sd_event_loop(m->event);
        (void) sd_notify(false, "STOPPING=1");
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m");
        if (r > 0)      /* sd-bus exit-on-disconnect */
                return log_error_errno(-ECONNRESET, "Disconnected from the bus, exiting.");
        return 0;
}

int main(int argc, char *argv[]) {
        int r = run(argc, argv);

        free(arg_overrides);
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
