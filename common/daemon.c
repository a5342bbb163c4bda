/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* daemon.c — the steps of start-up and shutdown every daemon shares (see daemon.h). */

#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cap-ng.h>
#include <systemd/sd-daemon.h>

#include "common/bus-introspect.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/opt-parse.h"
#include "common/util.h"

enum {
        ARG_VERSION = 0x100,
        ARG_INTROSPECT,
        ARG_CONFIG,
        ARG_VERB_BASE = 0x200,          /* + index in DaemonInfo.verbs */
};

#define DAEMON_VERBS_MAX 16

void daemon_args_done(DaemonArgs *a) {
        a->overrides = mfree(a->overrides);
        a->n_overrides = 0;
}

static void help(const DaemonInfo *info) {
        printf("%s [OPTIONS...]\n\n"
               "%s\n\n"
               "Options take one or two dashes (-config FILE, --config=FILE) and are never\n"
               "abbreviated.\n\n"
               "  -h --help            Show this help\n"
               "     --version         Show the version\n"
               "     --introspect      Print the D-Bus interface XML generated from the vtables and exit\n"
               "     --config=FILE     Configuration file (default %s; also --config-file)\n",
               info->name, info->description, KGPU_CONFIG_FILE_DEFAULT);
        for (const DaemonVerb *v = info->verbs; v && v->name; v++)
                printf("     --%-16s%s\n", v->name, v->help);
        config_print_flags_help();
        klog_print_help();
}

/* Our own options, the verbs, klog's flags and the configuration flags in one table. */
static struct option *daemon_options(const DaemonInfo *info, size_t n_verbs) {
        static const struct option own[] = {
                { "help",       no_argument,       NULL, 'h'            },
                { "h",          no_argument,       NULL, 'h'            },
                { "version",    no_argument,       NULL, ARG_VERSION    },
                { "introspect", no_argument,       NULL, ARG_INTROSPECT },
                { "config",     required_argument, NULL, ARG_CONFIG     },
                { "config-file", required_argument, NULL, ARG_CONFIG    }, /* the NVIDIA plugin's name */
        };
        const struct option *cfg = config_getopt_options(), *klog = klog_getopt_options();
        size_t n_cfg = 0, n_klog = 0, n = ELEMENTSOF(own);
        struct option *options;

        while (cfg[n_cfg].name)
                n_cfg++;
        while (klog[n_klog].name)
                n_klog++;
        options = calloc(ELEMENTSOF(own) + n_verbs + n_klog + n_cfg + 1, sizeof(struct option));
        if (!options)
                return NULL;
        memcpy(options, own, sizeof(own));
        for (size_t i = 0; i < n_verbs; i++)
                options[n++] = (struct option) {
                        .name = info->verbs[i].name, .has_arg = no_argument, .val = ARG_VERB_BASE + (int) i,
                };
        memcpy(options + n, klog, n_klog * sizeof(struct option));
        memcpy(options + n + n_klog, cfg, n_cfg * sizeof(struct option));
        return options;
}

int daemon_parse_argv(const DaemonInfo *info, int argc, char *argv[], DaemonArgs *ret) {
        _cleanup_free_ struct option *options = NULL;
        _cleanup_free_ ConfigOverride *overrides = NULL;
        const char *config_path = NULL, *verb = NULL, *value;
        KlogFlags klog = {};
        size_t n_verbs = 0, n = 0;
        OptParser p;
        int c;

        while (info->verbs && info->verbs[n_verbs].name)
                n_verbs++;
        if (n_verbs > DAEMON_VERBS_MAX)
                return log_error_errno(-E2BIG, "%s declares more than %d verbs.", info->name, DAEMON_VERBS_MAX);
        options = daemon_options(info, n_verbs);
        overrides = calloc((size_t) MAX(argc, 1), sizeof(ConfigOverride));
        if (!options || !overrides)
                return log_oom();

        /* Go's flag package rules (opt-parse.h): the Intel plugin's single-dash flags
         * (-shared-dev-num 2) and klog's (-v 4) work, and nothing is abbreviated. */
        opt_parser_init(&p, argc, argv, options);
        while ((c = opt_next(&p, &value)) != 0)
                switch (c) {
                case -EINVAL:
                        return log_error_errno(c, "%s: %s; see %s --help.", p.arg, p.error, info->name);
                case 'h':
                        help(info);
                        return 0;
                case ARG_VERSION:
                        printf("%s %s\n", info->name, KGPU_VERSION);
                        return 0;
                case ARG_INTROSPECT:
                        if (info->introspect)
                                return info->introspect() < 0 ? -EIO : 0;
                        return bus_introspect_print(NULL, 0) < 0 ? -EIO : 0;
                case ARG_CONFIG:
                        config_path = value;
                        break;
                case ARG_VERB_BASE ... ARG_VERB_BASE + DAEMON_VERBS_MAX - 1:
                        if (verb && !streq(verb, info->verbs[c - ARG_VERB_BASE].name))
                                return log_error_errno(-EINVAL, "--%s and --%s exclude each other.",
                                                       verb, info->verbs[c - ARG_VERB_BASE].name);
                        verb = info->verbs[c - ARG_VERB_BASE].name;
                        break;
                default: {
                        const char *flag = config_flag_by_val(c), *why = NULL;

                        if (klog_option_val(c)) {
                                int r = klog_flag_apply(&klog, c, value, &why);

                                if (r < 0)
                                        return log_error_errno(r, "%s: %s, got '%s'.", p.arg, why, value ?: "");
                                /* -v N is --log-level, in its place among the flags: the later one wins. */
                                if (r > 0)
                                        overrides[n++] = (ConfigOverride) { .flag = "log-level", .value = klog.log_level };
                                break;
                        }
                        if (!flag)
                                return log_error_errno(-EINVAL, "Unhandled option %d.", c);
                        overrides[n++] = (ConfigOverride) { .flag = flag, .value = value };
                }
                }
        if (p.index < argc)
                return log_error_errno(-EINVAL, "%s takes no arguments (got '%s').", info->name, argv[p.index]);

        *ret = (DaemonArgs) {
                .config_path = config_path,
                .overrides = TAKE_PTR(overrides),
                .n_overrides = n,
                .verb = verb,
                .klog = klog,
        };
        return 1;
}

int daemon_config_load(const DaemonArgs *a, Config **ret, char **ret_error) {
        return config_load(a->config_path, a->overrides, a->n_overrides, ret, ret_error);
}

int daemon_load_config(const DaemonArgs *a, Config **ret) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *error = NULL;
        int r;

        r = daemon_config_load(a, &c, &error);
        if (r < 0)
                return log_error_errno(r, "Invalid configuration: %s", error ?: strerror(-r));
        if (!isempty(c->log_level)) {
                int level = log_level_from_string(c->log_level);

                if (level >= 0)
                        log_set_max_level(level);
        }
        *ret = TAKE_PTR(c);
        return 0;
}

int privileges_drop(const char *user, const char *config_key) {
        struct passwd *pw;
        uid_t uid;
        gid_t gid;

        if (geteuid() != 0 && getuid() != 0)
                return 0;
        if (isempty(user))
                return log_error_errno(-ESRCH, "Refusing to run as root: %s is empty.", config_key);

        errno = 0;
        pw = getpwnam(user);
        if (!pw)
                return log_error_errno(errno > 0 ? -errno : -ESRCH,
                                       "User '%s' (%s) does not exist, refusing to run as root.", user, config_key);
        if (pw->pw_uid == 0)
                return log_error_errno(-EPERM, "Refusing to run as root: %s '%s' is uid 0.", config_key, user);
        uid = pw->pw_uid;
        gid = pw->pw_gid;

        capng_clear(CAPNG_SELECT_BOTH);
        if (capng_change_id((int) uid, (int) gid, CAPNG_DROP_SUPP_GRP|CAPNG_CLEAR_BOUNDING) < 0)
                return log_error_errno(-EPERM, "Failed to drop privileges to user '%s', refusing to run as root.", user);

        /* Trust, but verify: no way back to root. */
        if (getuid() != uid || geteuid() != uid || getgid() != gid || getegid() != gid ||
            setuid(0) == 0 || seteuid(0) == 0 ||
            capng_have_capabilities(CAPNG_SELECT_CAPS) != CAPNG_NONE)
                return log_error_errno(-EPERM, "Privileges of user '%s' not as expected after the drop, refusing to run.",
                                       user);
        log_info("Dropped privileges to user '%s' (uid %u).", user, (unsigned) uid);
        return 0;
}

int bus_open_attached(sd_event *event, const char *description, sd_bus **ret) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        int r;

        r = sd_bus_open_system(&bus);
        if (r < 0)
                return log_error_errno(r, "Failed to connect to the system bus: %m");
        (void) sd_bus_set_description(bus, description);
        r = sd_bus_attach_event(bus, event, SD_EVENT_PRIORITY_NORMAL);
        if (r < 0)
                return log_error_errno(r, "Failed to attach the bus to the event loop: %m");
        /* Without the bus nobody can see us: exit and let the service manager restart us. */
        r = sd_bus_set_exit_on_disconnect(bus, true);
        if (r < 0)
                return log_error_errno(r, "Failed to set exit-on-disconnect: %m");
        *ret = TAKE_PTR(bus);
        return 0;
}

static int on_sighup(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Daemon *d = userdata;

        log_info("Received SIGHUP, reloading the configuration.");
        d->hooks->reload(d);
        return 0;
}

/* SIGTERM and SIGINT end the loop with 0 (sd-event's default handler). */
static int daemon_watch_signals(Daemon *d) {
        sigset_t mask;
        int r;

        if (sigemptyset(&mask) < 0 || sigaddset(&mask, SIGTERM) < 0 || sigaddset(&mask, SIGINT) < 0 ||
            (d->hooks->reload && sigaddset(&mask, SIGHUP) < 0) ||
            sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return log_error_errno(negative_errno(), "Failed to block signals: %m");
        r = sd_event_add_signal(d->event, NULL, SIGTERM, NULL, NULL);
        if (r >= 0)
                r = sd_event_add_signal(d->event, NULL, SIGINT, NULL, NULL);
        if (r < 0)
                return log_error_errno(r, "Failed to handle SIGTERM/SIGINT: %m");
        if (d->hooks->reload) {
                r = sd_event_add_signal(d->event, NULL, SIGHUP, on_sighup, d);
                if (r < 0)
                        return log_error_errno(r, "Failed to handle SIGHUP: %m");
        }
        return 0;
}

static int daemon_exit_status(Daemon *d, int r) {
        if (d->hooks->exit_status)
                return d->hooks->exit_status(d, r);
        return r == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

static int daemon_run(Daemon *d, int argc, char *argv[]) {
        _cleanup_(config_freep) Config *config = NULL;
        int r;

        log_setup(d->info->name);
        log_parse_environment();

        r = daemon_parse_argv(d->info, argc, argv, &d->args);
        if (r <= 0)
                return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
        if (klog_flags_log_to_stderr(&d->args.klog))
                log_set_target_stderr();        /* -logtostderr: the flag beats KGPU_LOG_TARGET */
        klog_flags_log_ignored(&d->args.klog);
        if (d->args.verb)
                return d->hooks->verb(&d->args);

        r = daemon_load_config(&d->args, &config);
        if (r < 0)
                return EXIT_FAILURE;

        /* Before any socket: the bus connection, the database, the plugin sockets. */
        if (d->hooks->user) {
                r = privileges_drop(d->hooks->user(config), d->hooks->user_key);
                if (r < 0)
                        return EXIT_FAILURE;
        }

        r = sd_event_default(&d->event);
        if (r < 0) {
                log_error_errno(r, "Failed to allocate the event loop: %m");
                return EXIT_FAILURE;
        }
        r = daemon_watch_signals(d);
        if (r < 0)
                return EXIT_FAILURE;

        r = d->hooks->start(d, TAKE_PTR(config));
        if (r != 0)
                return daemon_exit_status(d, r);
        /* WatchdogSec= in the unit: sd-event pings at half the interval, the first time now. */
        (void) sd_event_set_watchdog(d->event, true);

        if (d->hooks->started)
                d->hooks->started(d);
        (void) sd_notify(false, "READY=1");

        r = sd_event_loop(d->event);
        (void) sd_notify(false, "STOPPING=1");
        if (r < 0) {
                log_error_errno(r, "Event loop failed: %m");
                return EXIT_FAILURE;
        }
        return daemon_exit_status(d, r);
}

int daemon_main(const DaemonInfo *info, const DaemonHooks *hooks, int argc, char *argv[]) {
        Daemon d = { .info = info, .hooks = hooks };
        int r;

        r = daemon_run(&d, argc, argv);
        if (d.state && hooks->free)
                hooks->free(d.state);
        sd_event_unref(d.event);
        daemon_args_done(&d.args);
        return r;
}
