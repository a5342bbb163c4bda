/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * main.c — kgpu-brokerd: command line, configuration, privilege drop, then the Manager.
 *
 * Contract: exits 0 after SIGTERM/SIGINT or --help/--version/--introspect, 1 on a
 * configuration error, a failed privilege drop or a failure to serve the bus. Started
 * as root it becomes Config.broker_user before it opens the bus or the database.
 */

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/broker-dbus.h"
#include "daemons/broker/manager.h"

#define ARG_OVERRIDES_MAX 64

enum {
        ARG_VERSION = 0x100,
        ARG_INTROSPECT,
        ARG_CONFIG,
};

static const char *arg_config = NULL;
static ConfigOverride arg_overrides[ARG_OVERRIDES_MAX];
static size_t arg_n_overrides = 0;

static void help(void) {
        printf("kgpu-brokerd [OPTIONS...]\n\n"
               "Decides which GPUs are advertised to the kubelet and records every allocation.\n\n"
               "  -h --help          Show this help\n"
               "     --version       Show the version\n"
               "     --introspect    Print the D-Bus interface XML and exit\n"
               "     --config=FILE   Configuration file (default %s)\n",
               KGPU_CONFIG_FILE_DEFAULT);
        config_print_flags_help();
}

/* Returns 1 to go on, 0 to exit successfully, negative errno on error (logged). */
static int parse_argv(int argc, char *argv[]) {
        static const struct option own[] = {
                { "help",       no_argument,       NULL, 'h'            },
                { "version",    no_argument,       NULL, ARG_VERSION    },
                { "introspect", no_argument,       NULL, ARG_INTROSPECT },
                { "config",     required_argument, NULL, ARG_CONFIG     },
        };
        _cleanup_free_ struct option *options = NULL;
        const struct option *cfg = config_getopt_options();
        size_t n_cfg = 0;
        int c;

        while (cfg[n_cfg].name)
                n_cfg++;
        options = calloc(ELEMENTSOF(own) + n_cfg + 1, sizeof(struct option));
        if (!options)
                return log_oom();
        memcpy(options, own, sizeof(own));
        memcpy(options + ELEMENTSOF(own), cfg, n_cfg * sizeof(struct option));

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("kgpu-brokerd %s\n", KGPU_VERSION);
                        return 0;
                case ARG_INTROSPECT:
                        return broker_dbus_introspect() < 0 ? -EIO : 0;
                case ARG_CONFIG:
                        arg_config = optarg;
                        break;
                case '?':
                        return -EINVAL;
                default:
                        if (!config_flag_by_val(c))
                                return log_error_errno(-EINVAL, "Unknown option code 0x%x.", c);
                        if (arg_n_overrides >= ARG_OVERRIDES_MAX)
                                return log_error_errno(-E2BIG, "Too many options.");
                        arg_overrides[arg_n_overrides++] = (ConfigOverride) {
                                .flag = config_flag_by_val(c),
                                .value = optarg,
                        };
                }

        if (optind < argc)
                return log_error_errno(-EINVAL, "%s takes no arguments.", program_invocation_short_name);
        return 1;
}

int main(int argc, char *argv[]) {
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_(config_freep) Config *config = NULL;
        _cleanup_free_ char *error = NULL;
        int r;

        log_setup("kgpu-brokerd");
        log_parse_environment();

        r = parse_argv(argc, argv);
        if (r <= 0)
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;

        r = config_load(arg_config, arg_overrides, arg_n_overrides, &config, &error);
        if (r < 0) {
                log_error_errno(r, "Invalid configuration: %s", error ?: strerror(-r));
                return EXIT_FAILURE;
        }
        if (config->log_level) {
                int level = log_level_from_string(config->log_level);

                if (level >= 0)
                        log_set_max_level(level);
        }

        if (geteuid() == 0) {
                r = manager_drop_privileges(config->broker_user);
                if (r == -ESRCH) {
                        log_error("User '%s' (broker.user) does not exist, refusing to run as root.",
                                  config->broker_user);
                        return EXIT_FAILURE;
                }
                if (r < 0) {
                        log_error_errno(r, "Failed to drop privileges to user '%s', refusing to run as root: %m",
                                        config->broker_user);
                        return EXIT_FAILURE;
                }
                log_info("Dropped privileges to user '%s'.", config->broker_user);
        }

        r = manager_new(TAKE_PTR(config), &m);
        if (r < 0)
                return EXIT_FAILURE;
        r = manager_start(m);
        if (r < 0)
                return EXIT_FAILURE;
        r = manager_run(m);
        return r == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
