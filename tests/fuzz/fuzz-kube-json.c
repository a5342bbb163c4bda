/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fuzz-kube-json.c — libFuzzer target for kgpu-clusterd's readers of the API server's
 * JSON (daemons/cluster/kube-json.c, pod-store.c).
 *
 * Contract: the input is one response body. It is parsed with the depth bound and handed
 * to every reader (List, Status, object resourceVersion, Node label, Pod GAS tuple,
 * watch event, and the pod store's List and event paths). Each either succeeds with
 * values inside the documented bounds or answers -EBADMSG with a reason; a crash, a
 * leak, a sanitizer report or a value beyond a bound is a bug.
 */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "common/log.h"
#include "daemons/cluster/kube-json.h"
#include "daemons/cluster/pod-store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_pod(const GasPod *p) {
        if (!p)
                return;
        if (strlen(p->uid) > KUBE_STRING_MAX || strlen(p->ts) > KUBE_STRING_MAX ||
            strlen(p->cards) > KUBE_STRING_MAX || strlen(p->tiles) > KUBE_STRING_MAX ||
            strlen(p->namespace) > KUBE_STRING_MAX || strlen(p->name) > KUBE_STRING_MAX ||
            p->n_containers > KUBE_CONTAINERS_MAX)
                abort();
        for (size_t i = 0; i < p->n_containers; i++) {
                if (p->containers[i].n_limits > KUBE_LIMITS_MAX)
                        abort();
                for (size_t j = 0; j < p->containers[i].n_limits; j++)
                        if (strncmp(p->containers[i].names[j], KUBE_GAS_PREFIX, strlen(KUBE_GAS_PREFIX)) != 0 ||
                            p->containers[i].counts[j] < 0)
                                abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        json_object *o = NULL, *items = NULL, *obj = NULL;
        const char *rv = NULL, *why = NULL, *name = NULL, *uid = NULL;
        KubeStatus st = {};
        KubeWatchType type;
        GasPod *pod = NULL;
        PodStore store = {};
        char *value = NULL;
        int r;

        log_set_max_level(LOG_CRIT);
        if (kube_json_parse((const char *) data, size, &o) < 0)
                return 0;

        r = kube_list_read(o, &rv, &items, &why);
        if (r == 0 && (!rv || !*rv))
                abort();
        if (r == 0)
                (void) pod_store_replace(&store, items, &why);
        if (kube_status_read(o, &st, &why) == 0) {
                if (st.code < 0 || st.code > 999 || strlen(st.reason) > KUBE_STRING_MAX)
                        abort();
                kube_status_done(&st);
        }
        (void) kube_object_rv(o, &rv, &why);
        if (kube_node_label(o, "nvidia.com/device-plugin.config", &name, &value, &why) == 0) {
                if (value && strlen(value) > 63)
                        abort();
                free(value);
        }
        if (kube_pod_uid(o, &uid, &why) == 0 && (!uid || !*uid))
                abort();
        if (kube_pod_gas_read(o, &pod, &why) == 0)
                check_pod(pod);
        gas_pod_free(pod);
        if (kube_watch_event_read(o, &type, &obj, &why) == 0 && type != KUBE_WATCH_BOOKMARK && type != KUBE_WATCH_ERROR)
                (void) pod_store_apply(&store, type, obj, &why);
        for (size_t i = 0; i < store.n_pods; i++)
                check_pod(store.pods[i]);
        if (store.n_pods > POD_STORE_MAX)
                abort();
        pod_store_done(&store);
        json_object_put(o);
        return 0;
}
