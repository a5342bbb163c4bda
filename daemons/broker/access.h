/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * access.h — who may call what on /io/kgpu/Broker1, one rule for both transports.
 *
 * Contract: broker_access_callers() classifies a method call by interface and member;
 * broker_access_allowed() says whether a uid may make it. The same two functions answer
 * for the system bus (where the bus policy, dbus/io.kgpu.Broker1.conf, filters first and
 * the methods that mutate check the sender again through broker_dbus_check_caller()) and
 * for the peer socket (peer.c, which has no bus daemon in front of it and filters every
 * call here before it is dispatched). Reads are for everyone; Allocate,
 * PreStartContainer, Reconcile, Reload and anything not named below for root and
 * grpc.user; SetNodeConfig and SetGasPods for root and cluster.user. The broker's own
 * uid counts as root's (it could write the database itself; an unprivileged test setup
 * runs everything as one user).
 */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

typedef struct Manager Manager;

typedef enum BrokerCallers {
        BROKER_CALLERS_ANYONE,          /* reads */
        BROKER_CALLERS_GRPC,            /* root and grpc.user */
        BROKER_CALLERS_CLUSTER,         /* root and cluster.user */
} BrokerCallers;

/* interface may be NULL (a call without one: privileged only). */
BrokerCallers broker_access_callers(const char *interface, const char *member);
bool broker_access_allowed(const Manager *m, uid_t uid, BrokerCallers callers);
/* The user named in refusals ("kgpu", "kgpu-cluster"); never NULL. */
const char *broker_access_user(const Manager *m, BrokerCallers callers);
/* True for a uid that may make some call not open to everyone (root, the broker's own
 * uid, grpc.user, cluster.user): peer.c keeps connection slots for them. */
bool broker_access_trusted(const Manager *m, uid_t uid);
