/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * manager.h — kgpu-clusterd's state: the credentials, the two reflectors (this Node,
 * the pods bound to it), what was last told to the broker, the bus.
 *
 * Contract: manager_new() takes the Config; manager_start() loads the credentials
 * (returns MANAGER_NOT_CONFIGURED, a positive value, when there is neither a kubeconfig
 * nor a pod's service account), connects to the bus, takes io.kgpu.Cluster1, follows
 * io.kgpu.Broker1 and starts listing. Errors are logged where they happen.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "common/config.h"
#include "daemons/cluster/kube-http.h"
#include "daemons/cluster/kubeconfig.h"
#include "daemons/cluster/pod-store.h"
#include "daemons/cluster/reflector.h"

#define MANAGER_NOT_CONFIGURED 2

/* What io.kgpu.Cluster1 last announced, to send PropertiesChanged only for changes. */
typedef struct ClusterSnapshot {
        bool connected;
        char *last_error;
        char *config_label_value;
        uint32_t gas_pods;
        char *node_rv, *pods_rv;
        bool node_synced, pods_synced, node_found;
        char *broker_error;
        char *server;
} ClusterSnapshot;

typedef struct Manager {
        Config *config;
        sd_event *event;
        sd_bus *bus;
        char *node_name;
        KubeCreds *creds;
        KubeHttp *http;
        Reflector node, pods;

        /* What the API server says. */
        bool node_found;
        char *label_value;              /* NULL: the label is unset */
        PodStore pod_store;

        /* The broker. */
        sd_bus_slot *broker_owner_slot;
        sd_bus_slot *node_config_call, *gas_pods_call;
        sd_event_source *send_defer;
        sd_event_source *node_config_retry, *gas_pods_retry;
        bool sent_node_config;          /* what we sent is what the broker holds */
        char *sent_label_value;
        bool sent_gas_pods;
        uint64_t sent_generation;
        char *broker_error;
        uint64_t node_config_calls, gas_pods_calls;

        ClusterSnapshot snapshot;
        uint64_t start_time;
} Manager;

int manager_new(Config *config, Manager **ret);
Manager *manager_free(Manager *m);
int manager_start(Manager *m);
/* Something io.kgpu.Cluster1 shows may have changed: emit PropertiesChanged for what did. */
void manager_properties_changed(Manager *m);
/* The node name to use: cluster.nodeName, else the host name in lower case. Checked to
 * be a DNS subdomain (RFC 1123, at most 253 characters). */
int manager_node_name(const Config *c, char **ret);
/* SIGHUP: reload kgpu.yaml and the credentials, then list again. */
void manager_reload(Manager *m, Config *config);
