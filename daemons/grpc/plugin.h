/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * plugin.h — one device plugin gRPC server per advertised resource.
 *
 * Contract: a Plugin is owned by the Manager. Once its first device list has arrived
 * (plugin_set_devices()) it asks the probe for its listening socket
 * <device_plugin_path>/kgpu-<resource, '/' -> '-'>.sock (kubelet-link.c) and, when it
 * is there (plugin_socket_ready()), registers with the kubelet (registration.c); a
 * failure is logged and asked again with a backoff. ListAndWatch streams get the
 * current list at once and a new full list on every change (latest only). Unary
 * methods are forwarded to io.kgpu.Broker1 (broker-client.c). plugin_free() cancels
 * everything pending, closes the server and asks the probe to remove the socket if it
 * is still the one made for us.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "grpc/grpc-h2.h"
#include "daemons/grpc/convert.h"

typedef struct Manager Manager;

typedef struct Plugin {
        Manager *manager;
        char *resource;
        char *socket_name;
        bool pre_start_required;
        bool get_preferred_allocation_available;

        GrpcServer *server;
        uint64_t socket_inode;          /* of the socket file the probe made for the server */
        bool wants_socket;              /* devices arrived: serve */
        sd_bus_slot *listen_slot;       /* OpenPluginSocket in flight */
        sd_event_source *listen_retry;  /* after a failed OpenPluginSocket */
        uint64_t listen_backoff_usec;
        bool listen_after_kubelet;      /* the socket is made again for a (re)started kubelet */

        /* Latest device list and its encoded ListAndWatchResponse. */
        GrpcdDevice *devices;
        size_t n_devices;
        bool have_devices;
        uint8_t *law_msg;
        size_t law_len;

        /* Open ListAndWatch streams (referenced). */
        GrpcCall **streams;
        size_t n_streams;

        /* Pending GetDevices call. */
        sd_bus_slot *get_devices_slot;
        bool get_devices_again;
        sd_event_source *get_devices_retry;     /* after a failed GetDevices */

        /* Registration (registration.c). */
        sd_bus_slot *register_connect_slot;     /* ConnectKubelet in flight */
        GrpcClientCall *register_call;
        sd_event_source *register_timer;
        uint64_t register_backoff_usec;
        unsigned register_failures;
        bool registered;
        uint64_t register_after_usec;   /* kubelet appearance this registration follows, or 0 */
        bool seen;                      /* mark for ListResources sync */
        sd_event_source *remove_timer;  /* not listed by the broker: closes when it fires */
} Plugin;

/* How long a resource the broker stopped listing keeps its socket and registration. */
#define PLUGIN_REMOVE_GRACE_USEC (5 * 1000 * 1000ULL)

int plugin_new(Manager *m, const char *resource, Plugin **ret);
Plugin *plugin_free(Plugin *p);
DEFINE_CLEANUP_FUNC(Plugin, plugin_free);

/* Takes ownership of devices. Starts listening/registration on the first call. */
int plugin_set_devices(Plugin *p, GrpcdDevice *devices, size_t n);
/* Changes the options; re-registers if they changed while registered. */
int plugin_set_options(Plugin *p, bool pre_start_required, bool get_preferred_allocation_available);
/* Asks the probe for the socket (again); the answer replaces the server. */
int plugin_listen(Plugin *p);
/* The probe's answer: a listening socket (taken over) and its file's inode. Replaces the
 * server (existing connections are dropped) and registers. */
void plugin_socket_ready(Plugin *p, int fd, uint64_t inode);
/* The probe could not make the socket: logged, asked again after a backoff. */
void plugin_socket_failed(Plugin *p, int error, const char *message);
/* True if our socket file is still in place (the probe lists it with our inode). */
bool plugin_socket_intact(Plugin *p);
bool plugin_is_listening(Plugin *p);
/* Removes the plugin (via the manager) after PLUGIN_REMOVE_GRACE_USEC unless cancelled. */
int plugin_schedule_removal(Plugin *p);
void plugin_cancel_removal(Plugin *p);
