/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * peer.h — the broker's peer socket: io.kgpu.Broker1 over direct D-Bus connections, no
 * bus daemon in between (kgpu-grpcd's hot path: Allocate without the relay).
 *
 * Contract: broker_peer_listen() binds Config.broker_socket (mode 0666 in a directory
 * of its own; a stale socket left by a killed broker is replaced, anything else at the
 * path is refused) before the bus name is requested, so a client that sees the name
 * appear finds the socket ready. Each accepted connection is an sd-bus server
 * connection carrying the same object, vtable and signals as the system bus
 * (broker_dbus_register_on(), broker_dbus_emit_*()). Who may connect and call: the uid
 * the kernel gives at accept (SO_PEERCRED). A uid that may call nothing but reads
 * (access.h) is refused at accept: everything it may do it does on the system bus, and
 * it cannot make the broker read or queue unbounded messages here (sd-bus takes
 * messages up to 128 MiB; the bus daemon's limits guard the bus). The others (root,
 * the broker's own uid, grpc.user, cluster.user) pass every method call through
 * broker_access_allowed() before it is dispatched (AccessDenied otherwise), and each
 * method checks again (broker_dbus_check_caller()). Bounds: PEER_MAX connections,
 * PEER_PER_UID_MAX per uid; a peer with PEER_WQUEUE_MAX messages waiting to be written
 * (it does not read) is closed; a closed connection is freed from the event loop.
 * Failure to listen is logged and leaves the broker on the bus alone (returns 0); so
 * does a user namespace that does not map grpc.user's uid (its peers would all read as
 * 65534).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <systemd/sd-bus.h>

typedef struct Manager Manager;

#define PEER_MAX 32
#define PEER_PER_UID_MAX 8
#define PEER_WQUEUE_MAX 64

typedef struct BrokerPeer {
        Manager *manager;
        sd_bus *bus;
        uid_t uid;
        pid_t pid;
        uint64_t calls;         /* method calls dispatched */
        bool dead;              /* closed, freed by the next run of the collector */
        bool running;           /* authenticated, its buffered input processed */
        bool refusal_logged;
} BrokerPeer;

int broker_peer_listen(Manager *m);
/* Closes every peer and the listening socket, and removes the socket if it is ours. */
void broker_peer_stop(Manager *m);
/* The uid of the peer on bus; -ENXIO if bus is no peer connection. */
int broker_peer_uid(Manager *m, sd_bus *bus, uid_t *ret);
/* Whether uid is mapped by a /proc/PID/uid_map text (for the check that grpc.user's uid
 * is visible to the broker: PrivateUsers= would make every peer uid 65534). */
bool broker_peer_uid_mapped(const char *uid_map, uid_t uid);
/* After a send to p (r its result): a failed send or a full queue closes p. Returns r. */
int broker_peer_check_sent(BrokerPeer *p, int r);
