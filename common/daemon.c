/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* daemon.c — command line, configuration and privilege drop shared by the daemons. */

#include <errno.h>
#include <getopt.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cap-ng.h>

#include "common/bus-introspect.h"
#include "common/daemon.h"
#include "common/log.h"
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
               "  -h --help            Show this help\n"
               "     --version         Show the version\n"
               "     --introspect      Print the D-Bus interface XML generated from the vtables and exit\n"
               "     --config=FILE     Configuration file (default %s; also --config-file)\n",
               info->name, info->description, KGPU_CONFIG_FILE_DEFAULT);
        for (const DaemonVerb *v = info->verbs; v && v->name; v++)
                printf("     --%-16s%s\n", v->name, v->help);
        config_print_flags_help();
}

int daemon_parse_argv(const DaemonInfo *info, int argc, char *argv[], DaemonArgs *ret) {
        static const struct option own[] = {
                { "help",       no_argument,       NULL, 'h'            },
                { "version",    no_argument,       NULL, ARG_VERSION    },
                { "introspect", no_argument,       NULL, ARG_INTROSPECT },
                { "config",     required_argument, NULL, ARG_CONFIG     },
                { "config-file", required_argument, NULL, ARG_CONFIG    }, /* the NVIDIA plugin's name */
        };
        _cleanup_free_ struct option *options = NULL;
        _cleanup_free_ ConfigOverride *overrides = NULL;
        const struct option *cfg = config_getopt_options();
        const char *config_path = NULL, *verb = NULL;
        size_t n_cfg = 0, n_verbs = 0, n = 0;
        int c;

        while (cfg[n_cfg].name)
                n_cfg++;
        while (info->verbs && info->verbs[n_verbs].name)
                n_verbs++;
        if (n_verbs > DAEMON_VERBS_MAX)
                return log_error_errno(-E2BIG, "%s declares more than %d verbs.", info->name, DAEMON_VERBS_MAX);
        options = calloc(ELEMENTSOF(own) + n_verbs + n_cfg + 1, sizeof(struct option));
        overrides = calloc((size_t) MAX(argc, 1), sizeof(ConfigOverride));
        if (!options || !overrides)
                return log_oom();
        memcpy(options, own, sizeof(own));
        for (size_t i = 0; i < n_verbs; i++)
                options[ELEMENTSOF(own) + i] = (struct option) {
                        .name = info->verbs[i].name, .has_arg = no_argument, .val = ARG_VERB_BASE + (int) i,
                };
        memcpy(options + ELEMENTSOF(own) + n_verbs, cfg, n_cfg * sizeof(struct option));

        optind = 0;
        /* _only: the Intel plugin's single-dash Go flags (-shared-dev-num 2) work too. */
        while ((c = getopt_long_only(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
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
                        config_path = optarg;
                        break;
                case '?':
                        return -EINVAL;
                case ARG_VERB_BASE ... ARG_VERB_BASE + DAEMON_VERBS_MAX - 1:
                        if (verb && !streq(verb, info->verbs[c - ARG_VERB_BASE].name))
                                return log_error_errno(-EINVAL, "--%s and --%s exclude each other.",
                                                       verb, info->verbs[c - ARG_VERB_BASE].name);
                        verb = info->verbs[c - ARG_VERB_BASE].name;
                        break;
                default: {
                        const char *flag = config_flag_by_val(c);

                        if (!flag)
                                return log_error_errno(-EINVAL, "Unhandled option %d.", c);
                        overrides[n++] = (ConfigOverride) { .flag = flag, .value = optarg };
                }
                }
        if (optind < argc)
                return log_error_errno(-EINVAL, "%s takes no arguments (got '%s').", info->name, argv[optind]);

        *ret = (DaemonArgs) {
                .config_path = config_path,
                .overrides = TAKE_PTR(overrides),
                .n_overrides = n,
                .verb = verb,
        };
        return 1;
}

int daemon_load_config(const DaemonArgs *a, Config **ret) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *error = NULL;
        int r;

        r = config_load(a->config_path, a->overrides, a->n_overrides, &c, &error);
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
