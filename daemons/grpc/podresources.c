/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * podresources.c — reconciliation: the kubelet's PodResources List, relayed to
 * Broker1.Reconcile.
 *
 * Contract: see podresources.h. The kubelet's reply is hostile input: it is decoded by
 * protobuf-c within the gRPC layer's message bound, every string is checked for length
 * and the counts against the broker's bounds before a D-Bus message is built.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "common/bus-names.h"
#include "daemons/grpc/broker-peer.h"
#include "grpc/grpc-h2.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/grpc/kubelet-link.h"
#include "daemons/grpc/manager.h"
#include "daemons/grpc/podresources.h"
#include "podresources.pb-c.h"

#define POD_RESOURCES_LIST_PATH "/v1.PodResourcesLister/List"
/* The broker's bounds (daemons/broker/reconcile.h, resources.h). */
#define RECONCILE_CONTAINERS_MAX 16384u
#define RECONCILE_IDS_TOTAL_MAX 65536u
#define RECONCILE_NAME_MAX 253u
#define RECONCILE_ID_MAX 256u
#define WAITERS_MAX 1024u

typedef struct Waiter {
        PodResourcesDone done;
        void *userdata;
} Waiter;

struct PodResourcesClient {
        Manager *manager;
        sd_event_source *timer;         /* interval */
        sd_event_source *kick;          /* defer: start a round */
        sd_bus_slot *connect_slot;      /* phase 0: the probe connects us to the kubelet */
        GrpcClientCall *list_call;      /* phase 1 */
        sd_bus_slot *reconcile_slot;    /* phase 2 */
        bool again;                     /* a round was requested during this one */

        Waiter *current, *next;         /* waiters of the round in flight, of the next one */
        size_t n_current, n_next;

        uint64_t rounds_ok, rounds_failed;
        bool unreachable_logged;
};

static void waiters_run(Waiter *w, size_t n, int r) {
        for (size_t i = 0; i < n; i++)
                if (w[i].done)
                        w[i].done(r, w[i].userdata);
        free(w);
}

static void round_finish(PodResourcesClient *c, int r) {
        Waiter *w = TAKE_PTR(c->current);
        size_t n = c->n_current;

        c->n_current = 0;
        if (r < 0)
                c->rounds_failed++;
        else
                c->rounds_ok++;
        if (c->again || c->n_next > 0) {
                c->again = false;
                (void) sd_event_source_set_enabled(c->kick, SD_EVENT_ONESHOT);
        }
        waiters_run(w, n, r);
}

static bool name_ok(const char *s, bool allow_empty) {
        return s && (allow_empty || *s) && strnlen(s, RECONCILE_NAME_MAX + 1) <= RECONCILE_NAME_MAX;
}

static int on_reconcile_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        PodResourcesClient *c = userdata;
        const sd_bus_error *e;
        const void *ids = NULL;
        size_t size = 0;
        int r;

        c->reconcile_slot = sd_bus_slot_unref(c->reconcile_slot);

        e = sd_bus_message_get_error(reply);
        if (e) {
                log_warning("Broker1.Reconcile failed, nothing released: %s", e->message ?: e->name);
                round_finish(c, -sd_bus_error_get_errno(e) ?: -EIO);
                return 0;
        }
        r = sd_bus_message_read_array(reply, 't', &ids, &size);
        if (r < 0) {
                log_warning_errno(r, "Malformed Broker1.Reconcile reply, ignoring: %m");
                round_finish(c, r);
                return 0;
        }
        if (size > 0)
                log_info("Reconciled with the kubelet: the broker released %zu allocation(s) no live "
                         "container holds.", size / sizeof(uint64_t));
        else
                log_debug("Reconciled with the kubelet: nothing released.");
        round_finish(c, 0);
        return 0;
}

/* Builds Broker1.Reconcile from the kubelet's reply; -E2BIG/-EBADMSG if it must not be
 * sent (logged by the caller). */
static int build_reconcile(PodResourcesClient *c, const V1__ListPodResourcesResponse *resp,
                           sd_bus_message **ret) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *req = NULL;
        Manager *m = c->manager;
        size_t n_containers = 0, n_ids = 0;
        int r;

        sd_bus *bus = broker_client_bus(m);

        r = sd_bus_message_new_method_call(bus, &req, broker_peer_is(m, bus) ? NULL : KGPU_BROKER_BUS_NAME,
                                           KGPU_BROKER_PATH, KGPU_BROKER_INTERFACE, "Reconcile");
        if (r < 0)
                return r;
        r = sd_bus_message_set_auto_start(req, false);
        if (r < 0)
                return r;
        r = sd_bus_message_open_container(req, 'a', "(sassss)");
        if (r < 0)
                return r;

        for (size_t i = 0; i < resp->n_pod_resources; i++) {
                const V1__PodResources *pod = resp->pod_resources[i];

                if (!pod || !name_ok(pod->name, false) || !name_ok(pod->namespace_, false))
                        return -EBADMSG;
                for (size_t j = 0; j < pod->n_containers; j++) {
                        const V1__ContainerResources *ctr = pod->containers[j];

                        if (!ctr || !name_ok(ctr->name, true))
                                return -EBADMSG;
                        for (size_t k = 0; k < ctr->n_devices; k++) {
                                const V1__ContainerDevices *d = ctr->devices[k];

                                if (!d || !name_ok(d->resource_name, false))
                                        return -EBADMSG;
                                if (d->n_device_ids == 0)
                                        continue;
                                if (++n_containers > RECONCILE_CONTAINERS_MAX)
                                        return -E2BIG;
                                n_ids += d->n_device_ids;
                                if (n_ids > RECONCILE_IDS_TOTAL_MAX)
                                        return -E2BIG;
                                for (size_t l = 0; l < d->n_device_ids; l++)
                                        if (isempty(d->device_ids[l]) ||
                                            strnlen(d->device_ids[l], RECONCILE_ID_MAX + 1) > RECONCILE_ID_MAX)
                                                return -EBADMSG;

                                r = sd_bus_message_open_container(req, 'r', "sassss");
                                if (r < 0)
                                        return r;
                                r = sd_bus_message_append(req, "s", d->resource_name);
                                if (r < 0)
                                        return r;
                                r = sd_bus_message_open_container(req, 'a', "s");
                                if (r < 0)
                                        return r;
                                for (size_t l = 0; l < d->n_device_ids; l++) {
                                        r = sd_bus_message_append(req, "s", d->device_ids[l]);
                                        if (r < 0)
                                                return r;
                                }
                                r = sd_bus_message_close_container(req);
                                if (r < 0)
                                        return r;
                                r = sd_bus_message_append(req, "sss", pod->namespace_, pod->name, ctr->name);
                                if (r < 0)
                                        return r;
                                r = sd_bus_message_close_container(req);
                                if (r < 0)
                                        return r;
                        }
                }
        }
        r = sd_bus_message_close_container(req);
        if (r < 0)
                return r;
        log_debug("PodResources: %zu container resource(s), %zu device id(s) live.", n_containers, n_ids);
        *ret = TAKE_PTR(req);
        return 0;
}

static void on_list_reply(GrpcStatus status, const char *message, const uint8_t *msg, size_t len,
                          void *userdata) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *req = NULL;
        PodResourcesClient *c = userdata;
        Manager *m = c->manager;
        V1__ListPodResourcesResponse *resp;
        uint64_t timeout;
        int r;

        c->list_call = NULL;    /* freed by the layer after we return */

        if (status != GRPC_STATUS_OK) {
                _cleanup_free_ char *what = NULL, *why = NULL;

                if (asprintf(&what, "PodResources List on %s (not reconciling until it answers)",
                             m->pod_resources_socket ?: "") >= 0 &&
                    asprintf(&why, "status %d: %s", (int) status, message ?: "n/a") >= 0)
                        kubelet_link_log_failure(m, what, why);
                c->unreachable_logged = true;
                round_finish(c, -EHOSTDOWN);
                return;
        }
        if (c->unreachable_logged)
                log_info("PodResources List on %s answers again.", m->pod_resources_socket ?: "");
        c->unreachable_logged = false;

        resp = v1__list_pod_resources_response__unpack(NULL, len, msg);
        if (!resp) {
                log_warning("Malformed PodResources List reply (%zu bytes), not reconciling.", len);
                round_finish(c, -EBADMSG);
                return;
        }
        r = build_reconcile(c, resp, &req);
        v1__list_pod_resources_response__free_unpacked(resp, NULL);
        if (r == -E2BIG || r == -EBADMSG) {
                log_warning("PodResources List reply %s, not reconciling.",
                            r == -E2BIG ? "exceeds the broker's bounds" : "has an invalid name or device id");
                round_finish(c, r);
                return;
        }
        if (r < 0) {
                log_warning_errno(r, "Failed to build Broker1.Reconcile, not reconciling: %m");
                round_finish(c, r);
                return;
        }
        if (!m->broker_present) {
                round_finish(c, -ENOTCONN);
                return;
        }
        timeout = (uint64_t) (m->config->broker_timeout_ms ?: 2000) * 1000ULL;
        r = sd_bus_call_async(sd_bus_message_get_bus(req), &c->reconcile_slot, req, on_reconcile_reply, c, timeout);
        if (r < 0) {
                log_warning_errno(r, "Failed to call Broker1.Reconcile: %m");
                round_finish(c, r);
        }
}

static void on_connected(int fd, const char *message, void *userdata) {
        PodResourcesClient *c = userdata;
        Manager *m = c->manager;
        uint64_t timeout = (uint64_t) (m->config->register_timeout_ms ?: 5000) * 1000ULL;
        int r;

        c->connect_slot = sd_bus_slot_unref(c->connect_slot);
        if (fd < 0) {
                /* Reported as the kubelet being unreachable, as a failed List is. */
                on_list_reply(GRPC_STATUS_UNAVAILABLE, message, NULL, 0, c);
                return;
        }
        r = grpc_client_call_unary_fd(m->event, fd, POD_RESOURCES_LIST_PATH, NULL, 0, timeout, on_list_reply, c,
                                      &c->list_call);
        if (r < 0) {
                log_warning_errno(r, "Failed to call PodResources List: %m");
                round_finish(c, r);
        }
}

static int round_start(PodResourcesClient *c) {
        Manager *m = c->manager;
        int r;

        if (c->connect_slot || c->list_call || c->reconcile_slot) {
                c->again = true;
                return 0;
        }
        c->current = TAKE_PTR(c->next);
        c->n_current = c->n_next;
        c->n_next = 0;

        /* No broker to tell, no probe to reach the kubelet through, or no socket configured. */
        if (!m->broker_present || !m->probe_present || isempty(m->pod_resources_socket)) {
                round_finish(c, -ENOTCONN);
                return 0;
        }
        r = kubelet_link_connect(m, KUBELET_LINK_POD_RESOURCES, on_connected, c, &c->connect_slot);
        if (r < 0) {
                log_warning_errno(r, "Failed to call PodResources List: %m");
                round_finish(c, r);
                return r;
        }
        return 0;
}

static int on_kick(sd_event_source *s, void *userdata) {
        (void) round_start(userdata);
        return 0;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        PodResourcesClient *c = userdata;
        uint64_t interval = (uint64_t) c->manager->config->reconcile_interval_sec * 1000000ULL;

        (void) sd_event_source_set_time(s, usec + interval);
        (void) round_start(c);
        return 0;
}

int pod_resources_client_new(Manager *m, PodResourcesClient **ret) {
        PodResourcesClient *c;
        int r;

        c = calloc(1, sizeof(PodResourcesClient));
        if (!c)
                return -ENOMEM;
        c->manager = m;
        r = sd_event_add_defer(m->event, &c->kick, on_kick, c);
        if (r >= 0)
                r = sd_event_source_set_enabled(c->kick, SD_EVENT_OFF);
        if (r < 0) {
                pod_resources_client_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

PodResourcesClient *pod_resources_client_free(PodResourcesClient *c) {
        if (!c)
                return NULL;
        c->connect_slot = sd_bus_slot_unref(c->connect_slot);
        c->list_call = grpc_client_call_cancel(c->list_call);
        c->reconcile_slot = sd_bus_slot_unref(c->reconcile_slot);
        c->timer = sd_event_source_disable_unref(c->timer);
        c->kick = sd_event_source_disable_unref(c->kick);
        waiters_run(TAKE_PTR(c->current), c->n_current, -ECANCELED);
        waiters_run(TAKE_PTR(c->next), c->n_next, -ECANCELED);
        return mfree(c);
}

int pod_resources_client_start(PodResourcesClient *c) {
        uint32_t sec = c->manager->config->reconcile_interval_sec;
        int r;

        c->timer = sd_event_source_disable_unref(c->timer);
        if (sec == 0)
                return 0;
        r = sd_event_add_time_relative(c->manager->event, &c->timer, CLOCK_MONOTONIC,
                                       (uint64_t) sec * 1000000ULL, 0, on_timer, c);
        if (r < 0)
                return r;
        return sd_event_source_set_enabled(c->timer, SD_EVENT_ON);
}

int pod_resources_sync(PodResourcesClient *c, PodResourcesDone done, void *userdata) {
        if (done) {
                Waiter *w;

                if (c->n_next >= WAITERS_MAX)
                        return -EBUSY;
                w = reallocarray(c->next, c->n_next + 1, sizeof(Waiter));
                if (!w)
                        return -ENOMEM;
                c->next = w;
                c->next[c->n_next++] = (Waiter) { done, userdata };
        }
        if (c->connect_slot || c->list_call || c->reconcile_slot)
                c->again = true;
        else
                (void) sd_event_source_set_enabled(c->kick, SD_EVENT_ONESHOT);
        return 0;
}

uint64_t pod_resources_rounds_ok(const PodResourcesClient *c) {
        return c->rounds_ok;
}

uint64_t pod_resources_rounds_failed(const PodResourcesClient *c) {
        return c->rounds_failed;
}

