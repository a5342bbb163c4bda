/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * main.c — kgpu-probed: command line, configuration and the event loop.
 *
 * Exit status 0 on SIGTERM/SIGINT or after --help/--version/--introspect, 1 on any
 * startup failure or when the bus connection is lost (already logged), 75 when the
 * kubelet's directory is read-only in the unit's mount namespace and a restart by the
 * service manager fixes it (kubelet.h).
 * --remove-outputs (the packages' removal scripts) removes the node labels and CDI specs
 * kgpu wrote, at the configured and at the default places, and exits: 0 when none of
 * kgpu's files is left there, 1 otherwise.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-introspect.h"
#include "common/config.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/probe/kubelet.h"
#include "daemons/probe/reload.h"
#include "daemons/probe/manager.h"
#include "daemons/probe/node-config.h"
#include "daemons/probe/outputs.h"
#include "daemons/probe/probe-dbus.h"

static int introspect(void) {
        const BusIntrospectEntry *e;
        size_t n;

        e = probe_dbus_introspect_entries(&n);
        return bus_introspect_print(e, n);
}

static const DaemonVerb verbs[] = {
        { "remove-outputs", "Remove the node labels and CDI specs kgpu wrote, then exit" },
        {}
};

static const DaemonInfo info = {
        .name = "kgpu-probed",
        .description = "Discovers the node's GPUs and exports them on the system bus as io.kgpu.Probe1.",
        .introspect = introspect,
        .verbs = verbs,
};

/* The files may be where the configuration says or, written under an earlier
 * configuration, at the defaults: both places are cleared. */
static int remove_outputs(const DaemonArgs *args) {
        _cleanup_(config_freep) Config *c = NULL;
        const char *files[2] = { OUTPUTS_FEATURE_FILE_DEFAULT }, *dirs[2] = { OUTPUTS_CDI_DIRECTORY_DEFAULT };
        int r, ret = 0;

        r = daemon_load_config(args, &c);       /* logs file:line:key */
        if (r < 0)
                log_warning("Removing the files at the default places only.");
        else {
                if (c->labels_feature_file && !streq(c->labels_feature_file, files[0]))
                        files[1] = c->labels_feature_file;
                if (c->cdi_spec_directory && !streq(c->cdi_spec_directory, dirs[0]))
                        dirs[1] = c->cdi_spec_directory;
        }

        for (size_t i = 0; i < ELEMENTSOF(files) && files[i]; i++) {
                r = outputs_remove_feature_file(files[i]);
                if (r == -EEXIST)
                        log_notice("%s holds lines kgpu does not write, leaving it.", files[i]);
                else if (r < 0)
                        ret = log_error_errno(r, "Failed to remove the node labels %s: %m", files[i]);
                else if (r > 0)
                        log_info("Removed the node labels %s.", files[i]);
        }
        for (size_t i = 0; i < ELEMENTSOF(dirs) && dirs[i]; i++) {
                r = outputs_remove_cdi_specs(dirs[i]);
                if (r < 0)
                        ret = log_error_errno(r, "Failed to remove kgpu's CDI specs from %s: %m", dirs[i]);
                else if (r > 0)
                        log_info("Removed %d CDI spec(s) of kgpu from %s.", r, dirs[i]);
        }
        return ret;
}

static int probe_verb(const DaemonArgs *args) {
        /* The only verb: remove-outputs. */
        return remove_outputs(args) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}

static int probe_start(Daemon *d, Config *c) {
        _cleanup_(config_freep) Config *config = c;
        Manager *m;
        const char *key = NULL;
        int r;

        r = manager_new(&m);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate manager: %m");
        d->state = m;

        r = manager_configure(m, config, &key);
        if (r == -EINVAL)
                return log_error_errno(r, "Invalid configuration: %s.", key);
        if (r < 0)
                return log_oom();

        r = manager_set_broker_user(m, config->broker_user);
        if (r < 0)
                log_notice_errno(r, "Broker user '%s' not found, only root may call Rescan: %m",
                                 config->broker_user);
        r = manager_set_grpc_user(m, config->grpc_user);
        if (r < 0)
                log_notice_errno(r, "Front end user '%s' not found, only root may use io.kgpu.Kubelet1: %m",
                                 config->grpc_user);

        r = manager_start(m);
        if (r < 0)
                return r;
        return probe_node_config_start(m, &d->args);
}

static void probe_started(Daemon *d) {
        Manager *m = d->state;

        log_struct(LOG_INFO, KGPU_MESSAGE_STARTED, "kgpu-probed %s started, %zu GPUs.",
                   KGPU_VERSION, m->n_gpus);
}

static void probe_on_reload(Daemon *d) {
        (void) probe_reload(&(ProbeReload) { .manager = d->state, .args = &d->args });
}

static int probe_exit_status(Daemon *d, int r) {
        if (r == KUBELET_EXIT_RESTART)  /* logged by kubelet.c */
                return r;
        if (r < 0)
                return EXIT_FAILURE;
        if (r > 0) {    /* sd-bus exit-on-disconnect */
                log_error_errno(-ECONNRESET, "Disconnected from the bus, exiting.");
                return EXIT_FAILURE;
        }
        return EXIT_SUCCESS;
}

static void probe_free(void *state) {
        manager_free(state);
}

/* The probe stays root (its unit drops every capability): no .user. */
static const DaemonHooks hooks = {
        .verb = probe_verb,
        .start = probe_start,
        .started = probe_started,
        .reload = probe_on_reload,
        .exit_status = probe_exit_status,
        .free = probe_free,
};

DEFINE_DAEMON_MAIN(info, hooks)
