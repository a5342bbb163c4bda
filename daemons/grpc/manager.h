/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * manager.h — kgpu-grpcd's one Manager: the event loop, the bus, the plugins and the
 * watch on the kubelet's device-plugins directory.
 *
 * Contract: manager_new() takes ownership of the Config. manager_start() connects to
 * the system bus, starts following io.kgpu.Broker1, the probe's GPU objects (the
 * reference of every Allocate answer, gpus-link.c) and, for everything on the
 * kubelet's side, io.kgpu.Probe1's io.kgpu.Kubelet1 (kubelet-link.c): grpcd has no
 * access to the kubelet's directories. It returns a negative errno if any of that fails
 * (logged by the caller). Plugins (one per advertised resource) are created and freed
 * only by the manager. manager_free() closes every plugin server; the probe removes
 * their sockets when grpcd leaves the bus.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "common/cleanup.h"
#include "common/config.h"

typedef struct Plugin Plugin;

typedef struct KubeletLinkEntry {
        char *name;
        uint64_t inode;
} KubeletLinkEntry;

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
        /* The direct connection to the broker's peer socket (broker-peer.c). */
        sd_bus *broker_peer;            /* NULL: none, calls go over the bus */
        bool broker_peer_done;          /* its Disconnected came: calls on it were failed */
        sd_bus *broker_peer_retired[4]; /* no longer used, until their Disconnected comes */
        bool broker_peer_retired_done[4];
        size_t n_broker_peer_retired;
        sd_event_source *broker_peer_close;     /* frees a closed one */
        sd_event_source *broker_peer_retry;     /* connects again after the broker shed us */
        bool broker_peer_fallback_logged;
        bool broker_peer_up;            /* the current one authenticated and was used */

        /* Plugins, one per resource, in the broker's order. */
        Plugin **plugins;
        size_t n_plugins;

        /* The kubelet, as the probe reports it (kubelet-link.c). */
        sd_bus_slot *probe_owner_slot;
        sd_bus_slot *probe_props_slot;
        sd_bus_slot *probe_get_slot;
        bool probe_present;             /* properties of the current probe read */
        bool probe_wait_logged;
        uint64_t kubelet_inode;         /* of the registration socket, 0: absent or refused */
        char *kubelet_state;
        char *device_plugin_path;
        char *registration_socket;
        char *pod_resources_socket;     /* "" when none is configured */
        char *probe_last_error;
        KubeletLinkEntry *plugin_sockets; /* kgpu-*.sock in the directory */
        size_t n_plugin_sockets;
        char *last_failure;             /* rate limit of kubelet_link_log_failure() */
        uint64_t last_failure_usec;

        uint64_t kubelet_appeared_usec; /* CLOCK_MONOTONIC when kubelet.sock appeared */

        /* The probe's GPU objects, what every Allocate answer is checked against
         * (gpus-link.c, gate.c). */
        struct ProbeGpus *gpus;
        char *gpus_owner;               /* unique name of io.kgpu.Probe1 believed, NULL: none */
        char *gpus_candidate;           /* its owner being checked */
        sd_bus_slot *gpus_owner_match;
        sd_bus_slot *gpus_objects_match;
        sd_bus_slot *gpus_props_match;
        sd_bus_slot *gpus_call;         /* GetNameOwner, GetConnectionUnixUser or GetManagedObjects */
        unsigned gate_warnings;         /* refusals logged at warning since gate_window_usec */
        uint64_t gate_window_usec;

        /* Reconciliation with the kubelet's PodResources (podresources.c). */
        struct PodResourcesClient *pod_resources;

        unsigned last_status_registered;
        bool status_sent;
} Manager;

int manager_new(sd_event *event, Config *config, Manager **ret);
Manager *manager_free(Manager *m);
DEFINE_CLEANUP_FUNC(Manager, manager_free);

int manager_start(Manager *m);

Plugin *manager_find_plugin(Manager *m, const char *resource);
int manager_add_plugin(Manager *m, const char *resource, Plugin **ret);
void manager_remove_plugin(Manager *m, Plugin *p);

/* True while the probe reports the kubelet's registration socket in place. */
bool manager_kubelet_present(Manager *m);
/* Called after the probe's Kubelet1 properties were applied (kubelet-link.c): a new
 * registration socket inode is a kubelet (re)start, removed sockets are made again,
 * unregistered plugins register. */
void manager_kubelet_update(Manager *m, uint64_t old_inode);
/* Sends STATUS= with the number of registered resources (only when it changed). */
void manager_update_status(Manager *m);
