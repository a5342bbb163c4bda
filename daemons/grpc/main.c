/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * main.c — kgpu-grpcd: the kubelet side of kgpu (device plugin servers, registration).
 *
 * Contract: parses the command line and the configuration, drops root to
 * Config.grpc_user before any socket is opened, runs the Manager until SIGTERM/SIGINT
 * (exit 0: servers closed, our sockets removed) or a fatal error (exit 1).
 */

#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cap-ng.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>

#include "common/bus-introspect.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/grpc/manager.h"

enum {
        ARG_VERSION = 0x100,
        ARG_INTROSPECT,
        ARG_CONFIG,
};

static void help(void) {
        printf("kgpu-grpcd [OPTIONS...]\n\n"
               "Serves kgpu's resources to the kubelet (device plugin API v1beta1).\n\n"
               "  -h --help            Show this help\n"
               "     --version         Show the version\n"
               "     --introspect      Print the D-Bus interfaces exported (none) and exit\n"
               "     --config=FILE     Configuration file (default " KGPU_CONFIG_FILE_DEFAULT ")\n"
               "\n");
        config_print_flags_help();
}

static int drop_privileges(const char *user) {
        _cleanup_free_ char *buf = NULL;
        struct passwd pw, *result = NULL;
        long sz;
        int r;

        if (geteuid() != 0 && getuid() != 0)
                return 0;
        if (isempty(user))
                return log_error_errno(-EINVAL, "Refusing to run as root: grpc.user is empty.");

        sz = sysconf(_SC_GETPW_R_SIZE_MAX);
        if (sz <= 0)
                sz = 16384;
        buf = malloc(sz);
        if (!buf)
                return log_oom();
        r = getpwnam_r(user, &pw, buf, sz, &result);
        if (r != 0 || !result)
                return log_error_errno(r > 0 ? -r : -ESRCH, "Failed to look up user '%s': %m", user);
        if (pw.pw_uid == 0)
                return log_error_errno(-EINVAL, "Refusing to run as root: grpc.user '%s' is uid 0.", user);

        capng_clear(CAPNG_SELECT_BOTH);
        r = capng_change_id(pw.pw_uid, pw.pw_gid, CAPNG_DROP_SUPP_GRP|CAPNG_CLEAR_BOUNDING);
        if (r < 0)
                return log_error_errno(-EPERM, "Failed to drop privileges to user '%s' (capng_change_id: %d).",
                                       user, r);
        if (geteuid() == 0 || getuid() == 0)
                return log_error_errno(-EPERM, "Still root after dropping privileges, refusing to run.");
        log_debug("Dropped privileges to %s (uid %u).", user, (unsigned) pw.pw_uid);
        return 0;
}

static int introspect(void) {
        /* grpcd exports no io.kgpu.* interface; the flag exists for uniformity. */
        return bus_introspect_print(NULL, 0);
}

static int run(int argc, char *argv[]) {
        _cleanup_free_ struct option *options = NULL;
        _cleanup_free_ ConfigOverride *overrides = NULL;
        _cleanup_(config_freep) Config *config = NULL;
        _cleanup_(manager_freep) Manager *m = NULL;
        _cleanup_(sd_event_unrefp) sd_event *event = NULL;
        _cleanup_free_ char *error = NULL;
        const struct option *config_options;
        static const struct option own[] = {
                { "help",       no_argument,       NULL, 'h'            },
                { "version",    no_argument,       NULL, ARG_VERSION    },
                { "introspect", no_argument,       NULL, ARG_INTROSPECT },
                { "config",     required_argument, NULL, ARG_CONFIG     },
        };
        const char *config_path = NULL;
        size_t n_config = 0, n_overrides = 0;
        sigset_t mask;
        int c, r;

        config_options = config_getopt_options();
        while (config_options[n_config].name)
                n_config++;
        options = calloc(ELEMENTSOF(own) + n_config + 1, sizeof(struct option));
        overrides = calloc(argc > 0 ? argc : 1, sizeof(ConfigOverride));
        if (!options || !overrides)
                return log_oom();
        memcpy(options, own, sizeof(own));
        memcpy(options + ELEMENTSOF(own), config_options, n_config * sizeof(struct option));

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("kgpu-grpcd %s\n", KGPU_VERSION);
                        return 0;
                case ARG_INTROSPECT:
                        return introspect() < 0 ? -EIO : 0;
                case ARG_CONFIG:
                        config_path = optarg;
                        break;
                case '?':
                        return -EINVAL;
                default: {
                        const char *flag = config_flag_by_val(c);

                        if (!flag)
                                return log_error_errno(-EINVAL, "Unhandled option %d.", c);
                        overrides[n_overrides++] = (ConfigOverride) { .flag = flag, .value = optarg };
                }
                }
        if (optind < argc)
                return log_error_errno(-EINVAL, "%s takes no arguments.", program_invocation_short_name);

        r = config_load(config_path, overrides, n_overrides, &config, &error);
        if (r < 0)
                return log_error_errno(r, "%s", error ?: "Failed to load the configuration.");
        if (!isempty(config->log_level)) {
                int l = log_level_from_string(config->log_level);

                if (l >= 0)
                        log_set_max_level(l);
        }

        /* Before any socket: the bus connection, the plugin sockets, the kubelet. */
        r = drop_privileges(config->grpc_user);
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
