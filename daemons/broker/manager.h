/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * manager.h — the one Manager of kgpu-brokerd: event loop, bus, config, store, resources.
 *
 * Contract: the daemon skeleton (common/daemon.h, main.c's hooks) loads the config,
 * drops root, blocks and handles the signals, then calls manager_new() and
 * manager_start(); it turns the watchdog on, logs "started" and sends READY=1 after
 * manager_start() returned, i.e. once the bus name is taken and the state is loaded.
 * manager_start() logs its own errors and returns a negative errno only for failures
 * that make the broker useless (no bus, bus name taken); a state database that cannot
 * be used is logged and leaves the broker running in refuse-to-allocate mode
 * (m->store == NULL). manager_run() runs the loop (for callers without the skeleton).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "common/cleanup.h"
#include "common/config.h"
#include "common/daemon.h"
#include "daemons/broker/node-config.h"
#include "daemons/broker/resources.h"
#include "daemons/broker/store.h"

typedef struct Manager {
        sd_event *event;
        sd_bus *bus;
        Config *config;
        /* The command line config was loaded with, for reloads (reload.c): the daemon
         * skeleton's Daemon.args; NULL: the defaults (no --config, no overrides). */
        const DaemonArgs *args;

        Store *store;                   /* NULL: state unavailable, allocations refused */
        char *store_error;              /* why, for the error replies */
        sd_event_source *checkpoint_source; /* the store's WAL checkpoint, after the reply */

        Resources *resources;
        uint64_t start_time;            /* CLOCK_REALTIME usec */
        char *boot_id;                  /* "" if unknown */
        uid_t grpc_uid;                 /* (uid_t) -1 if Config.grpc_user does not exist */
        /* The uids of the last callers by unique bus name (broker-dbus.c): the bus never
         * gives a unique name to a second connection, so an answer stays true, and
         * Allocate does not wait for a GetConnectionCredentials round trip each time. */
        struct {
                char name[48];
                uid_t uid;
        } callers[8];
        unsigned callers_next;

        /* Probe client (probe-client.c). */
        char *probe_owner;              /* unique name of io.kgpu.Probe1, NULL if none */
        sd_bus_slot *probe_match_owner;
        sd_bus_slot *probe_match_objects;
        sd_bus_slot *probe_match_properties;
        sd_bus_slot *probe_sync_slot;   /* pending GetManagedObjects */
        bool probe_synced;              /* a GetManagedObjects reply was applied */

        NodeConfig node_config;         /* the named NVIDIA config in force (node-config.c) */

        struct MpsClient *mps;          /* SetMps calls sent to the probe (mps-client.c) */
        char *problem;                  /* last resources_problem() logged */
        const char *problem_label;      /* whose GPUs it was about (static) */

        /* Intel resource manager (gas-dbus.c): the pods kgpu-clusterd sent last. */
        struct GasSet *gas_pods;        /* NULL: none received since the start */
} Manager;

int manager_new(Config *config, Manager **ret);        /* takes config (also on failure); logs */
Manager *manager_free(Manager *m);
DEFINE_CLEANUP_FUNC(Manager, manager_free);

int manager_start(Manager *m);
int manager_run(Manager *m);

/* Sends STATUS= with the current resource count and store state. */
void manager_update_status(Manager *m);
/* Logs resources_problem() when it differs from the last one logged. */
void manager_log_problem(Manager *m);

/* When running as root, becomes user (all groups dropped, no capabilities, empty bounding
 * set); a no-op otherwise. Returns -ESRCH if the user does not exist, -EPERM if it is
 * root or the change fails. */

/* Reads /proc/sys/kernel/random/boot_id ("" on failure, logged at debug). */
int manager_read_boot_id(char **ret);
