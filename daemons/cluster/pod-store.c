/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * pod-store.c — this node's GAS pods (see pod-store.h).
 *
 * Contract: see pod-store.h. A linear search is enough: a node runs at most a few
 * hundred pods (the kubelet's maxPods defaults to 110).
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/cluster/pod-store.h"

static void pods_free(GasPod **pods, size_t n) {
        for (size_t i = 0; i < n; i++)
                gas_pod_free(pods[i]);
        free(pods);
}

void pod_store_done(PodStore *s) {
        pods_free(s->pods, s->n_pods);
        *s = (PodStore) {};
}

static ssize_t find(const PodStore *s, const char *uid) {
        for (size_t i = 0; i < s->n_pods; i++)
                if (streq(s->pods[i]->uid, uid))
                        return (ssize_t) i;
        return -1;
}

static void remove_at(PodStore *s, size_t i) {
        gas_pod_free(s->pods[i]);
        memmove(s->pods + i, s->pods + i + 1, (s->n_pods - i - 1) * sizeof(GasPod *));
        s->n_pods--;
}

int pod_store_replace(PodStore *s, json_object *items, const char **ret_reason) {
        GasPod **pods = NULL;
        size_t n = 0, allocated = 0, total = items ? json_object_array_length(items) : 0, skipped = 0;
        bool changed;
        int r;

        /* Check every item is a Pod before changing anything. */
        for (size_t i = 0; i < total; i++) {
                const char *uid;

                r = kube_pod_uid(json_object_array_get_idx(items, i), &uid, ret_reason);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < total; i++) {
                const char *why = NULL;
                GasPod *p = NULL;

                r = kube_pod_gas_read(json_object_array_get_idx(items, i), &p, &why);
                if (r == -ENOMEM) {
                        pods_free(pods, n);
                        return r;
                }
                if (r < 0) {
                        log_debug("Pod left out: %s", why);
                        skipped++;
                        continue;
                }
                if (!p)
                        continue;
                if (n >= POD_STORE_MAX) {
                        gas_pod_free(p);
                        skipped++;
                        continue;
                }
                r = array_reserve((void **) &pods, &allocated, n + 1, sizeof(GasPod *));
                if (r < 0) {
                        gas_pod_free(p);
                        pods_free(pods, n);
                        return r;
                }
                pods[n++] = p;
        }
        changed = n != s->n_pods;
        for (size_t i = 0; !changed && i < n; i++)
                changed = !gas_pod_equal(pods[i], s->pods[i]);
        pods_free(s->pods, s->n_pods);
        s->pods = pods;
        s->n_pods = n;
        s->allocated = allocated;
        s->skipped = skipped;
        if (changed)
                s->generation++;
        return changed;
}

int pod_store_apply(PodStore *s, KubeWatchType type, json_object *pod, const char **ret_reason) {
        _cleanup_(gas_pod_freep) GasPod *p = NULL;
        const char *uid, *why = NULL;
        ssize_t i;
        int r;

        r = kube_pod_uid(pod, &uid, ret_reason);
        if (r < 0)
                return r;
        i = find(s, uid);
        if (type == KUBE_WATCH_DELETED) {
                if (i < 0)
                        return 0;
                remove_at(s, (size_t) i);
                s->generation++;
                return 1;
        }
        r = kube_pod_gas_read(pod, &p, &why);
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                log_debug("Pod %s left out: %s", uid, why);
                s->skipped++;
        }
        if (!p) {
                /* Not (or no longer) a Pending GAS pod. */
                if (i < 0)
                        return 0;
                remove_at(s, (size_t) i);
                s->generation++;
                return 1;
        }
        if (i >= 0) {
                if (gas_pod_equal(s->pods[i], p))
                        return 0;
                gas_pod_free(s->pods[i]);
                s->pods[i] = TAKE_PTR(p);
                s->generation++;
                return 1;
        }
        if (s->n_pods >= POD_STORE_MAX) {
                s->skipped++;
                return 0;
        }
        r = array_reserve((void **) &s->pods, &s->allocated, s->n_pods + 1, sizeof(GasPod *));
        if (r < 0)
                return r;
        s->pods[s->n_pods++] = TAKE_PTR(p);
        s->generation++;
        return 1;
}
