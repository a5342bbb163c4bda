/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * gas-dbus.c — Broker1.SetGasPods and the GAS choice of Allocate and
 * GetPreferredAllocation in the Intel resource manager mode. Contract: see gas-dbus.h.
 */

#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/bus-names.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/gas-dbus.h"
#include "daemons/broker/manager.h"

static int check_cluster_caller(Manager *m, sd_bus_message *msg, sd_bus_error *error) {
        _cleanup_(sd_bus_creds_unrefp) sd_bus_creds *creds = NULL;
        const char *user = m->config->cluster_user;
        uid_t uid = (uid_t) -1;
        int r;

        r = sd_bus_query_sender_creds(msg, SD_BUS_CREDS_EUID|SD_BUS_CREDS_UID, &creds);
        /* Credentials from the bus daemon only, never from racy /proc reads. */
        if (r >= 0 && (sd_bus_creds_get_augmented_mask(creds) & (SD_BUS_CREDS_EUID|SD_BUS_CREDS_UID)) != 0)
                r = -EPERM;
        if (r >= 0) {
                r = sd_bus_creds_get_euid(creds, &uid);
                if (r < 0)
                        r = sd_bus_creds_get_uid(creds, &uid);
        }
        if (r >= 0) {
                const struct passwd *pw = isempty(user) ? NULL : getpwnam(user);

                /* The broker's own uid is the same principal (unprivileged test set-ups). */
                if (uid == 0 || uid == geteuid() || (pw && pw->pw_uid == uid))
                        return 0;
                log_warning("Refusing SetGasPods from %s (uid %u): only root and %s may call it.",
                            sd_bus_message_get_sender(msg) ?: "n/a", (unsigned) uid, user ?: "n/a");
        } else
                log_warning_errno(r, "Refusing SetGasPods from %s: cannot get its uid: %m",
                                  sd_bus_message_get_sender(msg) ?: "n/a");
        return sd_bus_error_setf(error, KGPU_ERROR_ACCESS_DENIED, "SetGasPods is only allowed to root and user '%s'",
                                 user ?: "n/a");
}

typedef struct Args {
        GasPodArgs *pods;
        GasContainer *containers;       /* every pod's, one array */
        GasLimit *limits;               /* every container's, one array */
        size_t n_pods, n_containers, n_limits;
} Args;

static void args_done(Args *a) {
        free(a->pods);
        free(a->containers);
        free(a->limits);
}

static int invalid(sd_bus_error *error, const char *what, unsigned max) {
        return sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS, "SetGasPods: more than %u %s", max, what);
}

/* Reads a(ssssssaa{sx}) into a, bounded while reading; strings point into msg. Limits of
 * container c are a->limits[first[c]..]; fixed up once the arrays stop moving. */
static int read_pods(sd_bus_message *msg, Args *a, sd_bus_error *error) {
        _cleanup_free_ size_t *pod_first = NULL, *cont_first = NULL;
        int r;

        a->pods = calloc(GAS_PODS_MAX, sizeof(GasPodArgs));
        pod_first = calloc(GAS_PODS_MAX, sizeof(size_t));
        if (!a->pods || !pod_first)
                return -ENOMEM;
        r = sd_bus_message_enter_container(msg, 'a', "(ssssssaa{sx})");
        if (r < 0)
                return r;
        for (;;) {
                GasPodArgs *p;

                r = sd_bus_message_enter_container(msg, 'r', "ssssssaa{sx}");
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                if (a->n_pods >= GAS_PODS_MAX)
                        return invalid(error, "pods", GAS_PODS_MAX);
                p = &a->pods[a->n_pods];
                pod_first[a->n_pods++] = a->n_containers;
                r = sd_bus_message_read(msg, "ssssss", &p->uid, &p->namespace, &p->name, &p->ts, &p->cards,
                                        &p->tiles);
                if (r < 0)
                        return r;
                r = sd_bus_message_enter_container(msg, 'a', "a{sx}");
                if (r < 0)
                        return r;
                for (;;) {
                        GasContainer *grown;
                        size_t *first;

                        r = sd_bus_message_enter_container(msg, 'a', "{sx}");
                        if (r < 0)
                                return r;
                        if (r == 0)
                                break;
                        if (++p->n_containers > GAS_CONTAINERS_MAX)
                                return invalid(error, "containers in a pod", GAS_CONTAINERS_MAX);
                        grown = reallocarray(a->containers, a->n_containers + 1, sizeof(GasContainer));
                        if (!grown)
                                return -ENOMEM;
                        a->containers = grown;
                        first = reallocarray(cont_first, a->n_containers + 1, sizeof(size_t));
                        if (!first)
                                return -ENOMEM;
                        cont_first = first;
                        a->containers[a->n_containers] = (GasContainer) {};
                        cont_first[a->n_containers] = a->n_limits;
                        for (;;) {
                                const char *name;
                                int64_t count;
                                GasLimit *l;

                                r = sd_bus_message_read(msg, "{sx}", &name, &count);
                                if (r < 0)
                                        return r;
                                if (r == 0)
                                        break;
                                if (++a->containers[a->n_containers].n_limits > GAS_LIMITS_MAX)
                                        return invalid(error, "limits in a container", GAS_LIMITS_MAX);
                                l = reallocarray(a->limits, a->n_limits + 1, sizeof(GasLimit));
                                if (!l)
                                        return -ENOMEM;
                                a->limits = l;
                                a->limits[a->n_limits++] = (GasLimit) { .name = (char *) name, .count = count };
                        }
                        a->n_containers++;
                        r = sd_bus_message_exit_container(msg);
                        if (r < 0)
                                return r;
                }
                r = sd_bus_message_exit_container(msg);
                if (r < 0)
                        return r;
                r = sd_bus_message_exit_container(msg);
                if (r < 0)
                        return r;
        }
        r = sd_bus_message_exit_container(msg);
        if (r < 0)
                return r;

        for (size_t c = 0; c < a->n_containers; c++)
                a->containers[c].limits = a->limits ? a->limits + cont_first[c] : NULL;
        for (size_t i = 0; i < a->n_pods; i++)
                a->pods[i].containers = a->containers ? a->containers + pod_first[i] : NULL;
        return 0;
}

int gas_method_set_pods(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        _cleanup_(args_done) Args a = {};
        _cleanup_(gas_set_freep) GasSet *set = NULL;
        _cleanup_free_ char *why = NULL;
        Manager *m = userdata;
        int r;

        r = check_cluster_caller(m, msg, error);
        if (r < 0)
                return r;
        r = read_pods(msg, &a, error);
        if (r < 0 && !sd_bus_error_is_set(error) && r != -ENOMEM)
                return sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS, "SetGasPods: malformed argument: %s",
                                         strerror(-r));
        if (r < 0)
                return r;
        r = gas_set_new(a.pods, a.n_pods, &set, &why);
        if (r == -EINVAL) {
                log_notice("Refusing SetGasPods from %s: %s; the %zu pods sent before stay in force.",
                           sd_bus_message_get_sender(msg) ?: "n/a", why, m->gas_pods ? m->gas_pods->n_pods : 0);
                return sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS, "SetGasPods: %s", why);
        }
        if (r < 0)
                return r;
        gas_set_carry(set, m->gas_pods);
        gas_set_free(m->gas_pods);
        m->gas_pods = TAKE_PTR(set);
        log_info("GPU Aware Scheduling: %zu pending pods with %s on this node%s.", m->gas_pods->n_pods,
                 GAS_TS_ANNOTATION, m->config->intel_resource_manager ? "" :
                 " (intel.resourceManager is off: not used)");
        return sd_bus_reply_method_return(msg, NULL);
}

bool gas_applies(const Manager *m, const char *resource) {
        return m->config->intel_resource_manager &&
               (streq(resource, GAS_RESOURCE_PREFIX "i915") || streq(resource, GAS_RESOURCE_PREFIX "xe"));
}

/* The GPU of resource whose DRM card node is /dev/dri/<card>, NULL if none. */
static const Gpu *card_gpu(const Manager *m, const char *resource, const char *card) {
        for (size_t i = 0; i < m->resources->n_gpus; i++) {
                const Gpu *g = &m->resources->gpus[i];
                const char *slash = strrchr(g->info.card_node ?: "", '/');

                if (slash && streq(slash + 1, card) && streq_ptr(resources_name_for_gpu(m->resources, &g->info),
                                                                 resource))
                        return g;
        }
        return NULL;
}

/* The holders of one resource's recorded allocations, as the kubelet's PodResources
 * reported them (the Intel plugin's rule; this is what survives a broker restart), built
 * once per Allocate or GetPreferredAllocation and sorted, so that each candidate pod costs a
 * binary search instead of a pass over every allocation. */
typedef struct Holder {
        char *pod_namespace, *pod_name, *container_name;
} Holder;

typedef struct ServedIndex {
        Manager *m;
        const char *resource;
        bool built;
        Holder *h;
        size_t n;
} ServedIndex;

static void served_index_done(ServedIndex *x) {
        for (size_t i = 0; i < x->n; i++) {
                free(x->h[i].pod_namespace);
                free(x->h[i].pod_name);
                free(x->h[i].container_name);
        }
        free(x->h);
}

static int holder_cmp(const void *a, const void *b) {
        const Holder *x = a, *y = b;
        int c = strcmp(x->pod_namespace, y->pod_namespace);

        if (c == 0)
                c = strcmp(x->pod_name, y->pod_name);
        return c != 0 ? c : strcmp(x->container_name, y->container_name);
}

static int served_cb(uint64_t id, const char *resource, char * const *device_ids, uint64_t created_usec,
                     const char *boot_id, bool seen, void *userdata) {
        ServedIndex *x = userdata;
        StoreHolder h = {};
        uint64_t seen_usec;
        Holder *grown;

        if (!seen || !streq(resource, x->resource) || store_get_holder(x->m->store, id, &h, &seen_usec) < 0)
                return 0;
        if (!h.pod_namespace || !h.pod_name || !h.container_name) {
                store_holder_done(&h);
                return 0;
        }
        grown = reallocarray(x->h, x->n + 1, sizeof(Holder));
        if (!grown) {
                store_holder_done(&h);
                return -ENOMEM;
        }
        x->h = grown;
        x->h[x->n++] = (Holder) { h.pod_namespace, h.pod_name, h.container_name };
        return 0;
}

/* How many containers of p hold the resource (distinct container names). */
static size_t served(const GasPod *p, const char *resource, void *userdata) {
        ServedIndex *x = userdata;
        size_t lo = 0, hi, n = 0;

        if (!x->built) {
                x->built = true;
                /* Out of memory midway: what was read counts (never more than is true). */
                if (x->m->store)
                        (void) store_foreach_allocation(x->m->store, 0, served_cb, x);
                if (x->n > 1)
                        qsort(x->h, x->n, sizeof(Holder), holder_cmp);
        }
        /* First holder of (namespace, name). */
        hi = x->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(x->h[mid].pod_namespace, p->namespace);

                if (c == 0)
                        c = strcmp(x->h[mid].pod_name, p->name);
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        for (size_t i = lo; i < x->n && streq(x->h[i].pod_namespace, p->namespace) &&
                            streq(x->h[i].pod_name, p->name); i++)
                if (i == lo || !streq(x->h[i].container_name, x->h[i - 1].container_name))
                        n++;
        return n;
}

static int no_pod(sd_bus_error *error, const char *resource, size_t count, bool received) {
        log_notice("Refusing Allocate of %zu %s: resource manager: no pending pod with GAS annotations fits%s.",
                   count, resource, received ? "" : " (no pod list from kgpu-clusterd yet)");
        return sd_bus_error_setf(error, KGPU_ERROR_NO_GAS_POD,
                                 "resource manager: no pending pod on this node has GAS annotations for a container "
                                 "requesting %zu %s%s; is kgpu-clusterd running?", count, resource,
                                 received ? "" : " (the broker has received no pod list from kgpu-clusterd)");
}

int gas_allocate_choose(Manager *m, const char *resource, char ** const *lists, size_t n, GasChoice *ret,
                        sd_bus_error *error) {
        _cleanup_(served_index_done) ServedIndex idx = { .m = m, .resource = resource };
        _cleanup_free_ const Gpu **want = NULL;
        _cleanup_free_ Device *owned = NULL;
        const GasPod *p;
        const Device *d;
        size_t container, nd, count, n_cards;
        char **cards;
        int r;

        if (n != 1)
                return sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS,
                                         "resource manager: one container request per Allocate (the kubelet's way), "
                                         "got %zu", n);
        count = strv_length(lists[0]);
        r = gas_pick(m->gas_pods, resource, count, served, &idx, &p, &container);
        if (r < 0)
                return no_pod(error, resource, count, m->gas_pods != NULL);

        cards = p->cards[container];
        n_cards = strv_length(cards);
        if (n_cards != count)
                return sd_bus_error_setf(error, KGPU_ERROR_NO_GAS_POD,
                                         "resource manager: GAS chose %zu cards for container %zu of pod %s/%s, "
                                         "which requests %zu %s", n_cards, container, p->namespace, p->name,
                                         count, resource);
        want = calloc(n_cards, sizeof(Gpu *));
        if (!want)
                return -ENOMEM;
        for (size_t i = 0; i < n_cards; i++) {
                want[i] = card_gpu(m, resource, cards[i]);
                if (!want[i])
                        return sd_bus_error_setf(error, KGPU_ERROR_NO_GAS_POD,
                                                 "resource manager: GAS chose %s for pod %s/%s, which is no GPU of "
                                                 "%s on this node", cards[i], p->namespace, p->name, resource);
                for (size_t j = 0; j < i; j++)
                        if (want[j] == want[i])
                                return sd_bus_error_setf(error, KGPU_ERROR_NO_GAS_POD,
                                                         "resource manager: GAS named %s twice for pod %s/%s",
                                                         cards[i], p->namespace, p->name);
        }

        /* The answer is built from the request's ids (grpcd lets through only the nodes of
         * the devices the kubelet allocated): they must be one device on each chosen GPU. */
        r = resources_devices(m->resources, resource, &owned, &d, &nd);
        if (r < 0)
                return r;
        for (size_t i = 0; i < count; i++) {
                const Device *dev = resources_find_device(d, nd, lists[0][i]);
                _cleanup_free_ char *chosen = NULL;
                bool ok = false;

                for (size_t j = 0; dev && j < n_cards && !ok; j++)
                        if (want[j] == dev->gpu) {
                                ok = true;
                                want[j] = NULL;         /* one device per card */
                        }
                if (!ok && !(chosen = strv_join(cards, ",")))
                        return -ENOMEM;
                if (!ok)
                        return sd_bus_error_setf(error, KGPU_ERROR_NO_GAS_POD,
                                                 "resource manager: the kubelet chose device %s, but GAS chose %s "
                                                 "for container %zu of pod %s/%s (the kubelet follows "
                                                 "GetPreferredAllocation, which names them)", lists[0][i],
                                                 chosen, container, p->namespace,
                                                 p->name);
        }

        *ret = (GasChoice) {
                .pod = p,
                .container = container,
                .mask = container < p->n_masks && !isempty(p->masks[container]) ? p->masks[container] : NULL,
        };
        return 0;
}

void gas_allocate_done(Manager *m, const GasChoice *c) {
        _cleanup_free_ char *cards = NULL;

        if (!c->pod)
                return;
        cards = strv_join(c->pod->cards[c->container], ",");
        log_info("Resource manager: container %zu of pod %s/%s (%s %s) got %s%s%s.", c->container,
                 c->pod->namespace, c->pod->name, GAS_TS_ANNOTATION, c->pod->ts, cards ?: "its cards",
                 c->mask ? ", " GAS_AFFINITY_ENV "=" : "", c->mask ?: "");
        gas_consume(m->gas_pods, c->pod, c->container);
}

int gas_preferred(Manager *m, const char *resource, char * const *available, char * const *must,
                  int32_t size, char ***ret) {
        _cleanup_(served_index_done) ServedIndex idx = { .m = m, .resource = resource };
        _cleanup_strv_free_ char **result = NULL;
        _cleanup_free_ Device *owned = NULL;
        const GasPod *p;
        const Device *d;
        size_t container, nd;
        int r;

        result = calloc(1, sizeof(char *));
        if (!result)
                return -ENOMEM;
        if (size <= 0 || gas_pick(m->gas_pods, resource, (size_t) size, served, &idx, &p, &container) < 0) {
                *ret = TAKE_PTR(result);
                return 0;
        }
        r = resources_devices(m->resources, resource, &owned, &d, &nd);
        if (r < 0)
                return r;
        for (char **c = p->cards[container]; c && *c; c++) {
                const Gpu *g = card_gpu(m, resource, *c);
                const char *pick = NULL;

                for (int pass = 0; g && pass < 2 && !pick; pass++)
                        for (char * const *i = pass == 0 ? must : available; i && *i && !pick; i++) {
                                const Device *dev = resources_find_device(d, nd, *i);

                                if (dev && dev->gpu == g && (pass == 0 || dev->healthy) &&
                                    !strv_contains(result, dev->id))
                                        pick = dev->id;
                        }
                if (pick) {
                        r = strv_extend(&result, pick);
                        if (r < 0)
                                return r;
                }
        }
        *ret = TAKE_PTR(result);
        return 0;
}
