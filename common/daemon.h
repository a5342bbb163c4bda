/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * daemon.h — what every kgpu daemon's main() shares: the command line, loading the
 * configuration, and dropping root.
 *
 * daemon_parse_argv() handles --help, --version, --introspect, --config=FILE, every
 * configuration flag (config_getopt_options()) and the daemon's own verbs (a
 * DaemonInfo.verbs entry "remove-outputs" is the flag --remove-outputs: do that one job
 * with the configuration and exit, instead of running the daemon). It returns 1 to go
 * on, 0 when the process should exit successfully (help, version, introspection
 * printed), or a negative errno (already logged). The collected DaemonArgs are kept so a
 * reload can apply the same command line again (daemon_load_config()).
 *
 * privileges_drop() turns a root process into `user` with libcap-ng: no supplementary
 * groups, no capabilities, bounding set cleared, and verifies there is no way back.
 * It is a no-op when not running as root.
 */
#pragma once

#include <stddef.h>

#include "common/cleanup.h"
#include "common/config.h"

typedef struct DaemonVerb {
        const char *name;               /* "remove-outputs": the flag --remove-outputs */
        const char *help;               /* one line for --help */
} DaemonVerb;

typedef struct DaemonInfo {
        const char *name;               /* "kgpu-brokerd" */
        const char *description;        /* one line for --help */
        int (*introspect)(void);        /* prints the XML; NULL: prints an empty node */
        const DaemonVerb *verbs;        /* ended by an entry with name NULL; NULL: none */
} DaemonInfo;

typedef struct DaemonArgs {
        const char *config_path;        /* --config, borrowed from argv */
        ConfigOverride *overrides;      /* values borrowed from argv */
        size_t n_overrides;
        const char *verb;               /* DaemonVerb.name given, NULL: run the daemon */
} DaemonArgs;

void daemon_args_done(DaemonArgs *a);

int daemon_parse_argv(const DaemonInfo *info, int argc, char *argv[], DaemonArgs *ret);

/* config_load() with the arguments; logs a clear error ("Invalid configuration: FILE:LINE:
 * KEY: ...") on failure, applies logLevel on success. */
int daemon_load_config(const DaemonArgs *a, Config **ret);

/* -ESRCH: user unknown; -EPERM: uid 0 or the drop could not be verified. Logs. */
int privileges_drop(const char *user, const char *config_key);
