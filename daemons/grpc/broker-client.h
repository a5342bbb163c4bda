/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * broker-client.h — kgpu-grpcd's side of io.kgpu.Broker1.
 *
 * Contract: broker_client_start() installs the NameOwnerChanged and ResourcesChanged
 * matches and asks whether the broker is on the bus; from then on the plugin set
 * follows ListResources and each plugin's device list follows GetDevices, all with
 * async calls. The broker's absence is normal (logged once).
 * Every call goes over broker_client_bus() (broker-peer.h): the broker's peer socket
 * when connected, else the system bus.
 * broker_client_forward() answers one gRPC call through the broker: it always finishes
 * the call, at once (UNAVAILABLE when the broker is not on the bus, INVALID_ARGUMENT for
 * a bad request) or when the reply or Config.broker_timeout_ms comes.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "grpc/grpc-h2.h"
#include "daemons/grpc/manager.h"
#include "daemons/grpc/plugin.h"

typedef enum BrokerForwardKind {
        BROKER_FORWARD_ALLOCATE,
        BROKER_FORWARD_PREFERRED,
        BROKER_FORWARD_PRESTART,
} BrokerForwardKind;

int broker_client_start(Manager *m);
void broker_client_stop(Manager *m);
/* Calls ListResources again (after a reload): options that changed re-register. */
int broker_client_relist(Manager *m);
/* Asks for the plugin's devices again (coalesced while one call is pending). */
int broker_client_get_devices(Plugin *p);
/* Handler of ResourcesChanged, from the bus or the peer connection (broker-peer.c). */
int broker_client_on_resources_changed(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error);
int broker_client_forward(Plugin *p, GrpcCall *call, BrokerForwardKind kind,
                          const uint8_t *msg, size_t len);
