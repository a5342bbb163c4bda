/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * podresources.h — reconciliation: the kubelet's PodResources List, relayed to
 * Broker1.Reconcile.
 *
 * Contract: a round calls /v1.PodResourcesLister/List on Config.pod_resources_socket
 * (deadline Config.register_timeout_ms) and sends every reported (resource, device ids,
 * namespace, pod, container) to the broker, which releases what no live container
 * holds. A round runs when the broker appears on the bus, every
 * Config.reconcile_interval_sec (0: only then) and on demand (pod_resources_sync(): on
 * SIGHUP, and when the broker refuses an Allocate as over a sharing limit, before it is
 * asked once more; broker-client.c).
 * A round that cannot get a complete answer (kubelet unreachable, malformed reply,
 * more than the broker's bounds) sends nothing: releasing on partial data would lose
 * allocations. One round at a time; a request during a round queues one more.
 * Waiters get 0 after a successful Reconcile, a negative errno otherwise; they run
 * from the event loop, never from inside pod_resources_sync().
 */
#pragma once

#include <stdint.h>

typedef struct Manager Manager;
typedef struct PodResourcesClient PodResourcesClient;

typedef void (*PodResourcesDone)(int r, void *userdata);

int pod_resources_client_new(Manager *m, PodResourcesClient **ret);
/* Cancels the round in flight; pending waiters are called with -ECANCELED. */
PodResourcesClient *pod_resources_client_free(PodResourcesClient *c);

/* Starts the interval timer (if any). */
int pod_resources_client_start(PodResourcesClient *c);
/* Requests a round soon; done (may be NULL) is called when a round that started after
 * this call ends. */
int pod_resources_sync(PodResourcesClient *c, PodResourcesDone done, void *userdata);

/* Counters for tests and status. */
uint64_t pod_resources_rounds_ok(const PodResourcesClient *c);
uint64_t pod_resources_rounds_failed(const PodResourcesClient *c);
