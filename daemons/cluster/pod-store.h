/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * pod-store.h — the GAS tuples of this node's Pending pods, keyed by pod uid.
 *
 * Contract: pure, in memory. pod_store_replace() takes a List's items, pod_store_apply()
 * one watch event; both return 1 when the set changed, 0 when not, or -EBADMSG (with a
 * reason) for an object that is not a Pod at all, leaving the store as it was. A pod
 * whose GAS fields break a bound is left out (and counted in `skipped`, its reason
 * logged at debug by the caller's choice): it is not the broker's to see. At most
 * POD_STORE_MAX pods are kept (the broker's bound); more are left out the same way.
 * Pods are kept in arrival order; `generation` grows with every change.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "daemons/cluster/kube-json.h"

#define POD_STORE_MAX 4096

typedef struct PodStore {
        GasPod **pods;
        size_t n_pods, allocated;
        uint64_t generation;
        size_t skipped;                 /* in the last List plus events since */
} PodStore;

void pod_store_done(PodStore *s);
int pod_store_replace(PodStore *s, json_object *items, const char **ret_reason);
int pod_store_apply(PodStore *s, KubeWatchType type, json_object *pod, const char **ret_reason);
