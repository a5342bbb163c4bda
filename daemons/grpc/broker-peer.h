/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * broker-peer.h — kgpu-grpcd's direct D-Bus connection to the broker's peer socket
 * (Config.broker_socket), the hot path that does not go through the bus daemon.
 *
 * Contract: broker_peer_connect() drops any peer connection and opens a new one; it is
 * called whenever io.kgpu.Broker1 gets an owner on the system bus (a restarted broker
 * is a new socket), and again 1 s after a connection the broker closed while it stays
 * on the bus. broker_client_bus() is the connection every call to the broker goes
 * over: the peer once it is authenticated, else the system bus; a socket that is
 * absent or refuses is a fallback to the bus, logged once (at notice) until a
 * connection works again. A lost connection fails the calls pending on it (as the bus
 * does when the broker dies); it never holds later calls: they go over the bus until
 * the next connection is up. ResourcesChanged arrives on both; while the peer is up,
 * only its copy is acted on.
 */
#pragma once

#include <stdbool.h>

#include <systemd/sd-bus.h>

#include "daemons/grpc/manager.h"

int broker_peer_connect(Manager *m);
/* Stops using the connection; it lives on until the calls pending on it are answered. */
void broker_peer_close(Manager *m);
/* At exit: closes both at once. */
void broker_peer_free(Manager *m);
/* The peer connection when it is authenticated and open, else the system bus. */
sd_bus *broker_client_bus(Manager *m);
/* True when bus is the peer connection (no destination, no bus name on it). */
bool broker_peer_is(Manager *m, sd_bus *bus);
