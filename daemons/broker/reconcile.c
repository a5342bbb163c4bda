/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * reconcile.c — release the allocations no live container holds (Broker1.Reconcile).
 *
 * Contract: see reconcile.h. The D-Bus arguments come from grpcd, which relays the
 * kubelet: every list and string is bounded before anything is allocated for it.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bus-names.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/broker-dbus.h"
#include "daemons/broker/manager.h"
#include "daemons/broker/reconcile.h"

void live_containers_free(LiveContainer *c, size_t n) {
        if (!c)
                return;
        for (size_t i = 0; i < n; i++) {
                free(c[i].resource);
                strv_free(c[i].device_ids);
                free(c[i].pod_namespace);
                free(c[i].pod_name);
                free(c[i].container_name);
        }
        free(c);
}

void reconcile_plan_done(ReconcilePlan *p) {
        p->release = mfree(p->release);
        p->holders = mfree(p->holders);
        *p = (ReconcilePlan) {};
}

/* One reported (resource, device id) pair. */
typedef struct LiveKey {
        const char *resource;
        const char *device_id;
        size_t container;
        bool claimed;
} LiveKey;

static int live_key_cmp_parts(const char *ra, const char *da, const char *rb, const char *db) {
        int c = strcmp(ra, rb);

        return c != 0 ? c : strcmp(da, db);
}

static int live_key_cmp(const void *a, const void *b) {
        const LiveKey *x = a, *y = b;
        int c = live_key_cmp_parts(x->resource, x->device_id, y->resource, y->device_id);

        if (c != 0)
                return c;
        /* Same pair reported twice (should not happen): earlier container first. */
        return x->container < y->container ? -1 : x->container > y->container;
}

/* First index whose key is >= (resource, id). */
static size_t live_key_lower_bound(const LiveKey *k, size_t n, const char *resource, const char *id) {
        size_t lo = 0, hi = n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (live_key_cmp_parts(k[mid].resource, k[mid].device_id, resource, id) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

static int id_cmp_desc(const void *a, const void *b) {
        const ReconcileAllocation *x = *(const ReconcileAllocation * const *) a,
                                  *y = *(const ReconcileAllocation * const *) b;

        return x->id > y->id ? -1 : x->id < y->id;
}

int reconcile_plan(const ReconcileAllocation *allocs, size_t n_allocs,
                   const LiveContainer *live, size_t n_live,
                   const char *boot_id, uint64_t now_usec, uint64_t grace_usec,
                   ReconcilePlan *ret) {
        _cleanup_free_ LiveKey *keys = NULL;
        _cleanup_free_ const ReconcileAllocation **order = NULL;
        _cleanup_(reconcile_plan_done) ReconcilePlan p = {};
        size_t n_keys = 0, k = 0;

        for (size_t i = 0; i < n_live; i++)
                n_keys += strv_length(live[i].device_ids);

        keys = calloc(n_keys ?: 1, sizeof(LiveKey));
        order = calloc(n_allocs ?: 1, sizeof(ReconcileAllocation *));
        p.release = calloc(n_allocs ?: 1, sizeof(uint64_t));
        p.holders = calloc(n_allocs ?: 1, sizeof(StoreHolder));
        if (!keys || !order || !p.release || !p.holders)
                return -ENOMEM;

        for (size_t i = 0; i < n_live; i++)
                for (char **d = live[i].device_ids; d && *d; d++)
                        keys[k++] = (LiveKey) {
                                .resource = live[i].resource,
                                .device_id = *d,
                                .container = i,
                        };
        qsort(keys, n_keys, sizeof(LiveKey), live_key_cmp);

        /* Newest first, so the newest allocation of a reported id claims it. The store
         * lists them oldest first: then reversing is enough. */
        bool ascending = true;
        for (size_t i = 0; i < n_allocs; i++) {
                order[i] = &allocs[n_allocs - 1 - i];
                ascending = ascending && (i == 0 || allocs[i - 1].id < allocs[i].id);
        }
        if (!ascending)
                qsort(order, n_allocs, sizeof(ReconcileAllocation *), id_cmp_desc);

        for (size_t i = 0; i < n_allocs; i++) {
                const ReconcileAllocation *a = order[i];
                const LiveContainer *holder = NULL;
                bool this_boot = isempty(boot_id) || streq_ptr(a->boot_id, boot_id);

                for (char * const *d = a->device_ids; d && *d; d++) {
                        size_t j = live_key_lower_bound(keys, n_keys, a->resource, *d);

                        for (; j < n_keys && live_key_cmp_parts(keys[j].resource, keys[j].device_id,
                                                                a->resource, *d) == 0; j++) {
                                if (keys[j].claimed)
                                        continue;
                                keys[j].claimed = true;
                                if (!holder)
                                        holder = &live[keys[j].container];
                                break;
                        }
                }

                if (holder)
                        p.holders[p.n_holders++] = (StoreHolder) {
                                .id = a->id,
                                .pod_namespace = holder->pod_namespace,
                                .pod_name = holder->pod_name,
                                .container_name = holder->container_name,
                        };
                else if (!a->seen && this_boot && a->created_usec + grace_usec > now_usec)
                        p.n_young++;
                else {
                        /* Seen and no longer reported: its container is gone, the grace
                         * (for containers not created yet) does not apply. */
                        if (a->seen)
                                p.n_gone++;
                        p.release[p.n_release++] = a->id;
                }
        }

        *ret = p;
        p = (ReconcilePlan) {};
        return 0;
}

typedef struct Collect {
        ReconcileAllocation *a;
        size_t n, allocated;
} Collect;

/* Borrows the store's strings: they stay valid until the store changes, which happens
 * only in store_reconcile() below, after the plan is made. */
static int collect_allocation(uint64_t id, const char *resource, char * const *device_ids,
                              uint64_t created_usec, const char *boot_id, bool seen, void *userdata) {
        Collect *c = userdata;

        if (array_reserve((void **) &c->a, &c->allocated, c->n + 1, sizeof(ReconcileAllocation)) < 0)
                return -ENOMEM;
        c->a[c->n++] = (ReconcileAllocation) {
                .id = id,
                .created_usec = created_usec,
                .resource = resource,
                .boot_id = boot_id ?: "",
                .device_ids = device_ids,
                .seen = seen,
        };
        return 0;
}

/* The allocation with this id in allocs (ascending ids, as the store lists them). */
static const ReconcileAllocation *find_allocation(const ReconcileAllocation *allocs, size_t n, uint64_t id) {
        size_t lo = 0, hi = n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (allocs[mid].id < id)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo < n && allocs[lo].id == id ? &allocs[lo] : NULL;
}

int reconcile_run(Manager *m, const LiveContainer *live, size_t n_live, ReconcilePlan *ret_plan) {
        _cleanup_(reconcile_plan_done) ReconcilePlan p = {};
        _cleanup_strv_free_ char **released = NULL;
        _cleanup_free_ ReconcileAllocation *a = NULL;
        Collect c = {};
        uint64_t now = now_usec(CLOCK_REALTIME);
        int r;

        if (!m->store)
                return -ENXIO;

        r = store_foreach_allocation(m->store, 0, collect_allocation, &c);
        a = c.a;
        if (r >= 0)
                r = reconcile_plan(c.a, c.n, live, n_live, m->boot_id, now,
                                   (uint64_t) m->config->reconcile_grace_sec * UINT64_C(1000000), &p);
        /* What is released, said once the commit made it true (the rows are gone then). */
        for (size_t i = 0; r >= 0 && i < p.n_release; i++) {
                const ReconcileAllocation *x = find_allocation(c.a, c.n, p.release[i]);
                _cleanup_free_ char *ids = x ? strv_join(x->device_ids, ",") : NULL;
                char *line = NULL;

                if (!x)
                        continue;
                if (!ids || asprintf(&line, "Released allocation %" PRIu64 " (%s %s): no live container holds it%s.",
                                     x->id, x->resource, ids,
                                     !isempty(m->boot_id) && !streq(x->boot_id, m->boot_id) ?
                                     " (made in another boot)" :
                                     x->seen ? " (PodResources reported it before, no longer)" :
                                     " (never reported within broker.reconcileGraceSec)") < 0)
                        r = -ENOMEM;
                else
                        r = strv_consume(&released, line);
        }
        if (r >= 0)
                r = store_reconcile(m->store, p.release, p.n_release, p.holders, p.n_holders, now);
        if (r < 0)
                return r;
        for (char **l = released; l && *l; l++)
                log_info("%s", *l);

        log_debug("Reconciled %zu live container(s): %zu held, %zu young, %zu released (%zu of them gone "
                  "since they were reported).", n_live, p.n_holders, p.n_young, p.n_release, p.n_gone);
        if (ret_plan) {
                *ret_plan = p;
                p = (ReconcilePlan) {};
        }
        return 0;
}

static int read_name(sd_bus_message *msg, const char *what, bool allow_empty, char **ret, sd_bus_error *error) {
        const char *s;
        int r;

        r = sd_bus_message_read(msg, "s", &s);
        if (r < 0)
                return r;
        if ((!allow_empty && isempty(s)) || strnlen(s, RECONCILE_NAME_MAX + 1) > RECONCILE_NAME_MAX)
                return sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS, "%s is empty or longer than %u bytes",
                                         what, RECONCILE_NAME_MAX);
        *ret = strdup(s);
        return *ret ? 0 : -ENOMEM;
}

static int read_live(sd_bus_message *msg, LiveContainer **ret, size_t *ret_n, sd_bus_error *error) {
        LiveContainer *live = NULL;
        size_t n = 0, allocated = 0, total = 0;
        int r;

        r = sd_bus_message_enter_container(msg, 'a', "(sassss)");
        if (r < 0)
                goto fail;
        for (;;) {
                LiveContainer *c;

                r = sd_bus_message_enter_container(msg, 'r', "sassss");
                if (r < 0)
                        goto fail;
                if (r == 0)
                        break;
                if (n >= RECONCILE_CONTAINERS_MAX) {
                        r = sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS,
                                              "More than %u containers in one Reconcile", RECONCILE_CONTAINERS_MAX);
                        goto fail;
                }
                if (n >= allocated) {
                        size_t na = MAX(allocated * 2, (size_t) 16);
                        LiveContainer *p = reallocarray(live, na, sizeof(LiveContainer));

                        if (!p) {
                                r = -ENOMEM;
                                goto fail;
                        }
                        live = p;
                        allocated = na;
                }
                c = &live[n++];
                *c = (LiveContainer) {};

                r = read_name(msg, "Resource name", false, &c->resource, error);
                if (r < 0)
                        goto fail;
                r = sd_bus_message_enter_container(msg, 'a', "s");
                if (r < 0)
                        goto fail;
                c->device_ids = calloc(1, sizeof(char *));
                if (!c->device_ids) {
                        r = -ENOMEM;
                        goto fail;
                }
                for (size_t k = 0;; k++) {
                        const char *id;
                        char **p;

                        r = sd_bus_message_read(msg, "s", &id);
                        if (r < 0)
                                goto fail;
                        if (r == 0)
                                break;
                        if (++total > RECONCILE_IDS_TOTAL_MAX) {
                                r = sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS,
                                                      "More than %u device ids in one Reconcile",
                                                      RECONCILE_IDS_TOTAL_MAX);
                                goto fail;
                        }
                        if (isempty(id) || strnlen(id, RESOURCES_ID_MAX + 1) > RESOURCES_ID_MAX) {
                                r = sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS,
                                                      "Device id empty or longer than %u bytes", RESOURCES_ID_MAX);
                                goto fail;
                        }
                        p = reallocarray(c->device_ids, k + 2, sizeof(char *));
                        if (!p) {
                                r = -ENOMEM;
                                goto fail;
                        }
                        c->device_ids = p;
                        p[k] = strdup(id);
                        p[k + 1] = NULL;
                        if (!p[k]) {
                                r = -ENOMEM;
                                goto fail;
                        }
                }
                r = sd_bus_message_exit_container(msg);
                if (r < 0)
                        goto fail;
                r = read_name(msg, "Pod namespace", false, &c->pod_namespace, error);
                if (r < 0)
                        goto fail;
                r = read_name(msg, "Pod name", false, &c->pod_name, error);
                if (r < 0)
                        goto fail;
                r = read_name(msg, "Container name", true, &c->container_name, error);
                if (r < 0)
                        goto fail;
                r = sd_bus_message_exit_container(msg);
                if (r < 0)
                        goto fail;
        }
        r = sd_bus_message_exit_container(msg);
        if (r < 0)
                goto fail;
        *ret = live;
        *ret_n = n;
        return 0;

fail:
        live_containers_free(live, n);
        return r;
}

int reconcile_method(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_(reconcile_plan_done) ReconcilePlan p = {};
        LiveContainer *live = NULL;
        Manager *m = userdata;
        size_t n = 0;
        int r;

        r = broker_dbus_check_caller(m, msg, "Reconcile", error);
        if (r < 0)
                return r;
        r = read_live(msg, &live, &n, error);
        if (r < 0)
                return r;
        if (!m->store) {
                live_containers_free(live, n);
                return sd_bus_error_setf(error, KGPU_ERROR_STATE,
                                         "State database unavailable, cannot reconcile: %s",
                                         m->store_error ?: "not open");
        }

        r = reconcile_run(m, live, n, &p);
        if (r < 0) {
                live_containers_free(live, n);
                log_struct(LOG_ERR, KGPU_MESSAGE_STATE_ERROR,
                           "Failed to apply a reconciliation to %s, nothing released: %s",
                           store_get_path(m->store), strerror(-r));
                return sd_bus_error_setf(error, KGPU_ERROR_STATE, "Failed to reconcile: %s", strerror(-r));
        }
        live_containers_free(live, n);
        /* The borrowed holder strings are gone with live; only ids are used below. */

        r = sd_bus_message_new_method_return(msg, &reply);
        if (r < 0)
                return r;
        r = sd_bus_message_append_array(reply, 't', p.release, p.n_release * sizeof(uint64_t));
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

int reconcile_property_holder_dependent(sd_bus *bus, const char *path, const char *interface,
                                        const char *property, sd_bus_message *reply, void *userdata,
                                        sd_bus_error *error) {
        Manager *m = userdata;
        int r;

        r = sd_bus_message_open_container(reply, 'a', "s");
        if (r < 0)
                return r;
        for (char **i = m->resources->seen; i && *i; i++)
                if (resources_share_limit(m->resources, *i) > 1) {
                        r = sd_bus_message_append(reply, "s", *i);
                        if (r < 0)
                                return r;
                }
        return sd_bus_message_close_container(reply);
}
