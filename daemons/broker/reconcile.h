/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reconcile.h — release the allocations no live container holds (Broker1.Reconcile).
 *
 * Contract: grpcd sends what the kubelet's PodResources List reports: one entry per live
 * container and resource, with its device ids. reconcile_plan() is pure and decides,
 * store_reconcile() applies in one transaction:
 *  - an allocation is HELD when one of its (resource, device id) pairs is reported and
 *    not claimed by a newer allocation (the kubelet hands a device id to a new container
 *    only after the old one is gone, so the newest allocation of an id is the live one);
 *    its holder (namespace/pod/container) is recorded, which also marks it SEEN (in the
 *    database, so that this survives a restart of the broker);
 *  - an unheld allocation that was never seen, of this boot and younger than the grace
 *    period is KEPT: the kubelet calls Allocate before the container exists and reports
 *    the container only once it has been created;
 *  - every other allocation is RELEASED (deleted): in particular one that was seen and is
 *    no longer reported (its container is gone: the first successful List that leaves it
 *    out releases it, however young), and one made in another boot that the kubelet does
 *    not report.
 * After a reconcile the store holds exactly the live allocations plus the young unseen
 * ones, so "stored allocations of a device" is "live holders" for the sharing limit.
 * Errors: -ENOMEM, store errors (nothing changed then). No logging above debug except
 * reconcile_run(), which logs each release at info.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-bus.h>

#include "daemons/broker/store.h"

typedef struct Manager Manager;

/* Bounds of one Reconcile call. */
#define RECONCILE_CONTAINERS_MAX 16384u
#define RECONCILE_IDS_TOTAL_MAX 65536u
#define RECONCILE_NAME_MAX 253u         /* Kubernetes object names (DNS subdomain) */

typedef struct LiveContainer {
        char *resource;
        char **device_ids;
        char *pod_namespace;
        char *pod_name;
        char *container_name;
} LiveContainer;

void live_containers_free(LiveContainer *c, size_t n);

/* Strings borrowed (reconcile_run() points them into the store's copy). */
typedef struct ReconcileAllocation {
        uint64_t id;
        const char *resource;
        char * const *device_ids;
        uint64_t created_usec;
        const char *boot_id;
        bool seen;                      /* PodResources has reported it before */
} ReconcileAllocation;

typedef struct ReconcilePlan {
        uint64_t *release;              /* allocation ids to delete */
        size_t n_release;
        StoreHolder *holders;           /* strings borrowed from the LiveContainer array */
        size_t n_holders;
        size_t n_young;                 /* kept: never reported, within the grace period */
        size_t n_gone;                  /* of release: seen before, no longer reported */
} ReconcilePlan;

void reconcile_plan_done(ReconcilePlan *p);

/* Pure decision, see above. boot_id "" means unknown: every allocation counts as this
 * boot's. */
int reconcile_plan(const ReconcileAllocation *allocs, size_t n_allocs,
                   const LiveContainer *live, size_t n_live,
                   const char *boot_id, uint64_t now_usec, uint64_t grace_usec,
                   ReconcilePlan *ret);

/* Loads every allocation from m->store, plans and applies; logs. -ENXIO without store. */
int reconcile_run(Manager *m, const LiveContainer *live, size_t n_live, ReconcilePlan *ret_plan);

/* Broker1.HolderDependentResources: resources whose Allocate may be refused because of
 * the current holders (shared: a sharing limit above 1); informational (grpcd reconciles
 * after any Exhausted refusal). Changes come with ResourcesChanged. */
int reconcile_property_holder_dependent(sd_bus *bus, const char *path, const char *interface,
                                        const char *property, sd_bus_message *reply, void *userdata,
                                        sd_bus_error *error);

/* Broker1.Reconcile(a(sassss) containers) -> (at released). */
int reconcile_method(sd_bus_message *msg, void *userdata, sd_bus_error *error);
