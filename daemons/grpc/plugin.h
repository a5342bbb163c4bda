/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * plugin.h — one device plugin gRPC server per advertised resource.
 *
 * Contract: a Plugin is owned by the Manager. It listens on
 * <device_plugin_path>/kgpu-<resource, '/' -> '-'>.sock once its first device list has
 * arrived (plugin_set_devices()), then registers with the kubelet (registration.c).
 * ListAndWatch streams get the current list at once and a new full list on every change
 * (latest only). Unary methods are forwarded to io.kgpu.Broker1 (broker-client.c).
 * plugin_free() cancels everything pending, closes the server and unlinks the socket if
 * it is still the one we bound.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "common/grpc-h2.h"
#include "daemons/grpc/convert.h"

typedef struct Manager Manager;

typedef struct Plugin {
        Manager *manager;
        char *resource;
        char *socket_name;
        char *socket_path;
        bool pre_start_required;
        bool get_preferred_allocation_available;

        GrpcServer *server;
        dev_t socket_dev;
        ino_t socket_ino;

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
/* (Re)creates the server and its socket; drops existing connections. */
int plugin_listen(Plugin *p);
/* True if our socket file is still in place (same inode as bound). */
bool plugin_socket_intact(Plugin *p);
bool plugin_is_listening(Plugin *p);
/* Removes the plugin (via the manager) after PLUGIN_REMOVE_GRACE_USEC unless cancelled. */
int plugin_schedule_removal(Plugin *p);
void plugin_cancel_removal(Plugin *p);
