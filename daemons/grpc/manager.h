/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * manager.h — kgpu-grpcd's one Manager: the event loop, the bus, the plugins and the
 * watch on the kubelet's device-plugins directory.
 *
 * Contract: manager_new() takes ownership of the Config. manager_start() connects to
 * the system bus, starts following io.kgpu.Broker1 and watching the directory; it
 * returns a negative errno if any of that fails (logged by the caller). Plugins (one
 * per advertised resource) are created and freed only by the manager.
 * manager_free() closes every plugin server and removes its socket.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "common/cleanup.h"
#include "common/config.h"

typedef struct Plugin Plugin;

typedef struct Manager {
        sd_event *event;
        sd_bus *bus;
        Config *config;

        /* Broker following (broker-client.c). */
        sd_bus_slot *name_owner_slot;
        sd_bus_slot *resources_changed_slot;
        sd_bus_slot *get_name_owner_slot;
        sd_bus_slot *list_resources_slot;
        sd_event_source *list_resources_retry;  /* after a failed ListResources */
        bool broker_present;
        bool broker_wait_logged;

        /* Plugins, one per resource, in the broker's order. */
        Plugin **plugins;
        size_t n_plugins;

        /* Kubelet directory watch. */
        char *kubelet_socket;           /* resolved path */
        char *kubelet_socket_name;      /* its file name */
        int inotify_fd;
        int plugins_wd;                 /* watch on device_plugin_path */
        int kubelet_wd;                 /* watch on the kubelet socket's directory */
        sd_event_source *inotify_source;
        sd_event_source *kubelet_probe_source; /* retry timer: kubelet socket not accepting yet */
        uint64_t kubelet_probe_delay_usec;
        uint64_t kubelet_appeared_usec; /* CLOCK_MONOTONIC when kubelet.sock appeared */

        /* Reconciliation with the kubelet's PodResources (podresources.c). */
        struct PodResourcesClient *pod_resources;
        /* The command line of the start, for SIGHUP reloads (reload.c); NULL in tests. */
        const struct DaemonArgs *args;

        unsigned last_status_registered;
        bool status_sent;
} Manager;

int manager_new(sd_event *event, Config *config, Manager **ret);
Manager *manager_free(Manager *m);
DEFINE_CLEANUP_FUNC(Manager, manager_free);

int manager_start(Manager *m);
/* The directory watch alone (manager_start() calls it; tests use it without a bus). */
int manager_watch_start(Manager *m);

Plugin *manager_find_plugin(Manager *m, const char *resource);
int manager_add_plugin(Manager *m, const char *resource, Plugin **ret);
void manager_remove_plugin(Manager *m, Plugin *p);

/* True if the kubelet socket exists and accepts a connection now. */
bool manager_kubelet_accepting(Manager *m);
bool manager_kubelet_socket_exists(Manager *m);
/* Sends STATUS= with the number of registered resources (only when it changed). */
void manager_update_status(Manager *m);
