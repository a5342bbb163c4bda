/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * daemon.h — what every kgpu daemon's main() shares: the command line, loading the
 * configuration, and dropping root.
 *
 * daemon_parse_argv() handles --help, --version, --introspect, --config=FILE, every
 * configuration flag (config_getopt_options()), klog's logging flags (klog-flags.h:
 * -v N is --log-level, the others are kept in DaemonArgs.klog) and the daemon's
 * own verbs (a
 * DaemonInfo.verbs entry "remove-outputs" is the flag --remove-outputs: do that one job
 * with the configuration and exit, instead of running the daemon). It returns 1 to go
 * on, 0 when the process should exit successfully (help, version, introspection
 * printed), or a negative errno (already logged). The collected DaemonArgs are kept so a
 * reload can apply the same command line again (daemon_load_config()). Options follow
 * Go's flag package (opt-parse.h): one or two dashes, "-flag value" or "-flag=value",
 * exact names only (no abbreviation: "-v" is klog's verbosity, never --version);
 * an unknown option or any argument is an error.
 *
 * privileges_drop() turns a root process into `user` with libcap-ng: no supplementary
 * groups, no capabilities, bounding set cleared, and verifies there is no way back.
 * It is a no-op when not running as root.
 *
 * daemon_main() is the whole main() of a daemon (DEFINE_DAEMON_MAIN): it runs the steps
 * every daemon shares, in this order, and calls the daemon's DaemonHooks between them:
 * logging, the command line (a verb runs hooks->verb instead of the rest; -logtostderr
 * switches logging to stderr here, then the klog flags without effect are noted), the
 * configuration, the privilege drop (hooks->user; the probe stays root), the event loop,
 * SIGTERM/SIGINT (end the loop with 0) and SIGHUP (hooks->reload), hooks->start (builds
 * the daemon from the configuration and takes its bus name), the watchdog,
 * hooks->started, READY=1, the loop, STOPPING=1, hooks->exit_status and hooks->free.
 * It returns the process's exit status: 0 after help/version/introspection or a clean
 * stop, 1 on a failure (already logged), or what hooks->exit_status makes of the loop's
 * exit code. bus_open_attached() is the bus bring-up every daemon shares.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "common/cleanup.h"
#include "common/config.h"
#include "common/klog-flags.h"

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
        KlogFlags klog;                 /* klog's flags given (-v is also in overrides) */
} DaemonArgs;

void daemon_args_done(DaemonArgs *a);

int daemon_parse_argv(const DaemonInfo *info, int argc, char *argv[], DaemonArgs *ret);

/* config_load() with the arguments; logs a clear error ("Invalid configuration: FILE:LINE:
 * KEY: ...") on failure, applies logLevel on success. */
int daemon_load_config(const DaemonArgs *a, Config **ret);
/* The same load without logging or applying anything: on failure *ret_error is the
 * FILE:LINE:KEY message (or NULL). For a reload that answers the error to a caller. */
int daemon_config_load(const DaemonArgs *a, Config **ret, char **ret_error);

/* -ESRCH: user unknown; -EPERM: uid 0 or the drop could not be verified. Logs. */
int privileges_drop(const char *user, const char *config_key);

/* Connects to the system bus, names the connection, attaches it to event and makes a
 * lost connection end the event loop (the service manager restarts us). Logs. */
int bus_open_attached(sd_event *event, const char *description, sd_bus **ret);

typedef struct Daemon Daemon;

typedef struct DaemonHooks {
        /* Runs args->verb instead of the daemon; returns the exit status. */
        int (*verb)(const DaemonArgs *args);
        /* The user to become (privileges_drop()) and its key; NULL: stay as started. */
        const char *(*user)(const Config *c);
        const char *user_key;
        /* Builds the daemon from c (taken over, also on failure), sets Daemon.state and
         * takes the bus name. Returns 0 or a negative errno (logged); a positive value
         * is an exit code for hooks->exit_status. */
        int (*start)(Daemon *d, Config *c);
        /* Logs that the daemon started, just before READY=1. */
        void (*started)(Daemon *d);
        /* SIGHUP: reloads with daemon_load_config(&d->args); NULL: SIGHUP not handled. */
        void (*reload)(Daemon *d);
        /* The exit status for a loop exit code >= 0 or a start failure; NULL: 0 gives
         * 0, anything else 1. */
        int (*exit_status)(Daemon *d, int r);
        /* Frees Daemon.state, after the loop (or a failed start). */
        void (*free)(void *state);
} DaemonHooks;

struct Daemon {
        const DaemonInfo *info;
        const DaemonHooks *hooks;
        DaemonArgs args;                /* the command line, for reloads */
        sd_event *event;
        void *state;                    /* the daemon's Manager, set by hooks->start */
};

int daemon_main(const DaemonInfo *info, const DaemonHooks *hooks, int argc, char *argv[]);

#define DEFINE_DAEMON_MAIN(info, hooks)                                 \
        int main(int argc, char *argv[]) {                              \
                return daemon_main(&(info), &(hooks), argc, argv);      \
        }
