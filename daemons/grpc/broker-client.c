/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * broker-client.c — kgpu-grpcd's side of io.kgpu.Broker1.
 *
 * Contract: see broker-client.h. Every call to the broker is asynchronous, never
 * auto-starts it and carries a timeout of Config.broker_timeout_ms. Forwarded gRPC calls
 * hold a reference on their GrpcCall in a floating bus slot whose destroy callback drops
 * it, so closing the bus releases everything still pending.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bus-names.h"
#include "common/resource-name.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/grpc/broker-client.h"
#include "daemons/grpc/broker-peer.h"
#include "daemons/grpc/convert.h"
#include "daemons/grpc/gate.h"
#include "daemons/grpc/podresources.h"

static uint64_t broker_timeout_usec(Manager *m) {
        uint32_t ms = m->config->broker_timeout_ms;

        return (uint64_t) (ms > 0 ? ms : 2000) * 1000ULL;
}

static int broker_new_call(Manager *m, const char *member, sd_bus_message **ret) {
        sd_bus_message *req = NULL;
        int r;

        sd_bus *bus = broker_client_bus(m);

        /* On the peer connection there is no bus daemon and no name: no destination. */
        r = sd_bus_message_new_method_call(bus, &req, broker_peer_is(m, bus) ? NULL : KGPU_BROKER_BUS_NAME,
                                           KGPU_BROKER_PATH, KGPU_BROKER_INTERFACE, member);
        if (r < 0)
                return r;
        /* Never activate the broker from here: its absence must be answered at once. */
        r = sd_bus_message_set_auto_start(req, false);
        if (r < 0) {
                sd_bus_message_unref(req);
                return r;
        }
        *ret = req;
        return 0;
}

/* A failed read (broker busy, timeout) is tried again after this; its absence is not
 * a failure (NameOwnerChanged brings it back). */
#define BROKER_RETRY_USEC (1000 * 1000ULL)

static int broker_list_resources(Manager *m);

static int on_list_resources_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        int r;

        m->list_resources_retry = sd_event_source_disable_unref(m->list_resources_retry);
        if (!m->broker_present)
                return 0;
        r = broker_list_resources(m);
        if (r < 0)
                log_warning_errno(r, "Failed to call ListResources, ignoring: %m");
        return 0;
}

static void broker_list_resources_retry(Manager *m) {
        int r;

        if (m->list_resources_retry || !m->broker_present)
                return;
        r = sd_event_add_time_relative(m->event, &m->list_resources_retry, CLOCK_MONOTONIC,
                                       BROKER_RETRY_USEC, 10 * 1000, on_list_resources_retry, m);
        if (r < 0)
                log_warning_errno(r, "Failed to schedule another ListResources, ignoring: %m");
}

static int on_list_resources_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const sd_bus_error *e;
        unsigned n = 0;
        int r;

        m->list_resources_slot = sd_bus_slot_unref(m->list_resources_slot);

        e = sd_bus_message_get_error(reply);
        if (e) {
                /* The broker going away is reported by NameOwnerChanged; stay quiet. */
                if (grpcd_status_from_bus_error(e->name) == GRPC_STATUS_UNAVAILABLE)
                        log_debug("ListResources failed: %s", e->message ?: e->name);
                else
                        log_warning("io.kgpu.Broker1.ListResources failed: %s, trying again in 1 s.",
                                    e->message ?: e->name);
                broker_list_resources_retry(m);
                return 0;
        }

        for (size_t i = 0; i < m->n_plugins; i++)
                m->plugins[i]->seen = false;

        r = sd_bus_message_enter_container(reply, 'a', "(sbb)");
        if (r <= 0)
                goto bad;
        for (;;) {
                const char *name;
                int pre_start, preferred;
                Plugin *p;

                r = sd_bus_message_read(reply, "(sbb)", &name, &pre_start, &preferred);
                if (r < 0)
                        goto bad;
                if (r == 0)
                        break;
                if (++n > GRPCD_RESOURCES_MAX) {
                        log_warning("io.kgpu.Broker1 advertises more than %u resources, ignoring the rest.",
                                    GRPCD_RESOURCES_MAX);
                        break;
                }
                if (!resource_name_valid(name)) {
                        log_warning("io.kgpu.Broker1 advertises an invalid resource name '%s', ignoring.", name);
                        continue;
                }

                p = manager_find_plugin(m, name);
                if (!p) {
                        r = manager_add_plugin(m, name, &p);
                        if (r < 0) {
                                log_error_errno(r, "Failed to set up resource %s: %m", name);
                                continue;
                        }
                }
                p->seen = true;
                (void) plugin_set_options(p, pre_start, preferred);
                r = broker_client_get_devices(p);
                if (r < 0)
                        log_warning_errno(r, "Failed to ask for the devices of %s, ignoring: %m", name);
        }

        /* A restarted broker may list nothing until it has heard from the probe: close
         * a resource only when it stays away (plugin_schedule_removal()). */
        for (size_t i = m->n_plugins; i > 0; i--) {
                Plugin *p = m->plugins[i - 1];

                if (p->seen)
                        plugin_cancel_removal(p);
                else
                        (void) plugin_schedule_removal(p);
        }
        manager_update_status(m);
        return 0;

bad:
        log_warning("io.kgpu.Broker1.ListResources sent a malformed reply, trying again in 1 s.");
        broker_list_resources_retry(m);
        return 0;
}

static int broker_list_resources(Manager *m) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *req = NULL;
        int r;

        /* A newer answer supersedes any pending one. */
        m->list_resources_slot = sd_bus_slot_unref(m->list_resources_slot);
        m->list_resources_retry = sd_event_source_disable_unref(m->list_resources_retry);

        r = broker_new_call(m, "ListResources", &req);
        if (r < 0)
                return r;
        return sd_bus_call_async(sd_bus_message_get_bus(req), &m->list_resources_slot, req, on_list_resources_reply, m,
                                 broker_timeout_usec(m));
}

int broker_client_relist(Manager *m) {
        return broker_list_resources(m);
}

static void broker_set_present(Manager *m, bool present) {
        int r;

        if (present) {
                if (!m->broker_present)
                        log_info("%s is on the bus.", KGPU_BROKER_BUS_NAME);
                m->broker_present = true;
                m->broker_wait_logged = false;
                /* A new owner is a new broker, with a new socket. */
                (void) broker_peer_connect(m);
                /* Reconcile whenever a broker appears: a new one may hold stale records. */
                if (m->pod_resources)
                        (void) pod_resources_sync(m->pod_resources, NULL, NULL);
                r = broker_list_resources(m);
                if (r < 0)
                        log_warning_errno(r, "Failed to call ListResources, ignoring: %m");
                return;
        }

        m->broker_present = false;
        broker_peer_close(m);
        m->list_resources_slot = sd_bus_slot_unref(m->list_resources_slot);
        m->list_resources_retry = sd_event_source_disable_unref(m->list_resources_retry);
        if (!m->broker_wait_logged) {
                log_notice("Waiting for %s to appear on the bus; kubelet calls get UNAVAILABLE meanwhile.",
                           KGPU_BROKER_BUS_NAME);
                m->broker_wait_logged = true;
        }
}

static int on_name_owner_changed(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const char *name, *old_owner, *new_owner;
        int r;

        r = sd_bus_message_read(msg, "sss", &name, &old_owner, &new_owner);
        if (r < 0) {
                log_debug_errno(r, "Malformed NameOwnerChanged signal, ignoring: %m");
                return 0;
        }
        if (!streq(name, KGPU_BROKER_BUS_NAME))
                return 0;

        broker_set_present(m, !isempty(new_owner));
        return 0;
}

static int on_get_name_owner_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const sd_bus_error *e;

        m->get_name_owner_slot = sd_bus_slot_unref(m->get_name_owner_slot);

        e = sd_bus_message_get_error(reply);
        if (e && !sd_bus_error_has_name(e, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
                log_warning("GetNameOwner(%s) failed: %s, assuming it is absent.",
                            KGPU_BROKER_BUS_NAME, e->message ?: e->name);
        /* NameOwnerChanged may have told us already; don't go back on it. */
        if (!e)
                broker_set_present(m, true);
        else if (!m->broker_present)
                broker_set_present(m, false);
        return 0;
}

int broker_client_on_resources_changed(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        bool unknown = false;
        unsigned n = 0;
        int r;

        r = sd_bus_message_enter_container(msg, 'a', "s");
        if (r <= 0)
                goto relist;
        for (;;) {
                const char *name;
                Plugin *p;

                r = sd_bus_message_read_basic(msg, 's', &name);
                if (r < 0)
                        goto relist;
                if (r == 0)
                        break;
                if (++n > GRPCD_RESOURCES_MAX)
                        goto relist;
                p = manager_find_plugin(m, name);
                if (!p) {
                        /* A resource appeared (or one we never knew went away). */
                        unknown = true;
                        continue;
                }
                r = broker_client_get_devices(p);
                if (r < 0)
                        log_warning_errno(r, "Failed to ask for the devices of %s, ignoring: %m", name);
        }
        if (!unknown)
                return 0;

relist:
        m->broker_present = true;
        r = broker_list_resources(m);
        if (r < 0)
                log_warning_errno(r, "Failed to call ListResources, ignoring: %m");
        return 0;
}

/* The bus's copy; the peer connection carries the same signal (broker-peer.h). */
static int on_bus_resources_changed(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;

        if (broker_peer_is(m, broker_client_bus(m)))
                return 0;
        return broker_client_on_resources_changed(msg, userdata, ret_error);
}

int broker_client_start(Manager *m) {
        int r;

        r = sd_bus_add_match_async(m->bus, &m->name_owner_slot,
                                   "type='signal',"
                                   "sender='org.freedesktop.DBus',"
                                   "path='/org/freedesktop/DBus',"
                                   "interface='org.freedesktop.DBus',"
                                   "member='NameOwnerChanged',"
                                   "arg0='" KGPU_BROKER_BUS_NAME "'",
                                   on_name_owner_changed, NULL, m);
        if (r < 0)
                return r;

        r = sd_bus_match_signal_async(m->bus, &m->resources_changed_slot, KGPU_BROKER_BUS_NAME,
                                      KGPU_BROKER_PATH, KGPU_BROKER_INTERFACE, "ResourcesChanged",
                                      on_bus_resources_changed, NULL, m);
        if (r < 0)
                return r;

        /* Sent after AddMatch on the same connection, so no owner change falls between. */
        return sd_bus_call_method_async(m->bus, &m->get_name_owner_slot, "org.freedesktop.DBus",
                                        "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                        "GetNameOwner", on_get_name_owner_reply, m,
                                        "s", KGPU_BROKER_BUS_NAME);
}

void broker_client_stop(Manager *m) {
        broker_peer_free(m);
        m->name_owner_slot = sd_bus_slot_unref(m->name_owner_slot);
        m->resources_changed_slot = sd_bus_slot_unref(m->resources_changed_slot);
        m->get_name_owner_slot = sd_bus_slot_unref(m->get_name_owner_slot);
        m->list_resources_slot = sd_bus_slot_unref(m->list_resources_slot);
        m->list_resources_retry = sd_event_source_disable_unref(m->list_resources_retry);
        for (size_t i = 0; i < m->n_plugins; i++) {
                m->plugins[i]->get_devices_slot = sd_bus_slot_unref(m->plugins[i]->get_devices_slot);
                m->plugins[i]->get_devices_retry = sd_event_source_disable_unref(m->plugins[i]->get_devices_retry);
        }
}

static int on_get_devices_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Plugin *p = userdata;
        int r;

        p->get_devices_retry = sd_event_source_disable_unref(p->get_devices_retry);
        if (!p->manager->broker_present)
                return 0;
        r = broker_client_get_devices(p);
        if (r < 0)
                log_warning_errno(r, "Failed to ask for the devices of %s, ignoring: %m", p->resource);
        return 0;
}

static void broker_get_devices_retry(Plugin *p) {
        int r;

        if (p->get_devices_retry || !p->manager->broker_present)
                return;
        r = sd_event_add_time_relative(p->manager->event, &p->get_devices_retry, CLOCK_MONOTONIC,
                                       BROKER_RETRY_USEC, 10 * 1000, on_get_devices_retry, p);
        if (r < 0)
                log_warning_errno(r, "Failed to schedule another GetDevices, ignoring: %m");
}

static int on_get_devices_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Plugin *p = userdata;
        Manager *m = p->manager;
        GrpcdDevice *devices = NULL;
        const sd_bus_error *e;
        size_t n = 0;
        int r;

        p->get_devices_slot = sd_bus_slot_unref(p->get_devices_slot);

        e = sd_bus_message_get_error(reply);
        if (e) {
                if (sd_bus_error_has_name(e, KGPU_ERROR_UNKNOWN_RESOURCE)) {
                        /* It went away: let ListResources remove it. */
                        r = broker_list_resources(m);
                        if (r < 0)
                                log_warning_errno(r, "Failed to call ListResources, ignoring: %m");
                } else {
                        if (grpcd_status_from_bus_error(e->name) == GRPC_STATUS_UNAVAILABLE)
                                log_debug("GetDevices(%s) failed: %s", p->resource, e->message ?: e->name);
                        else
                                log_warning("io.kgpu.Broker1.GetDevices(%s) failed: %s, trying again in 1 s.",
                                            p->resource, e->message ?: e->name);
                        /* Only while the broker is on the bus; otherwise its return asks anew. */
                        broker_get_devices_retry(p);
                }
                goto again;
        }

        r = grpcd_devices_from_bus(reply, &devices, &n);
        if (r < 0) {
                log_warning_errno(r, "io.kgpu.Broker1.GetDevices(%s) sent an invalid device list, trying again in 1 s: %m",
                                  p->resource);
                broker_get_devices_retry(p);
                goto again;
        }
        r = plugin_set_devices(p, devices, n);
        if (r < 0)
                log_error_errno(r, "Failed to serve resource %s: %m", p->resource);

again:
        if (p->get_devices_again) {
                p->get_devices_again = false;
                r = broker_client_get_devices(p);
                if (r < 0)
                        log_warning_errno(r, "Failed to ask for the devices of %s, ignoring: %m", p->resource);
        }
        return 0;
}

int broker_client_get_devices(Plugin *p) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *req = NULL;
        Manager *m = p->manager;
        int r;

        if (p->get_devices_slot) {
                /* The pending answer may predate the change: ask once more after it. */
                p->get_devices_again = true;
                return 0;
        }
        p->get_devices_retry = sd_event_source_disable_unref(p->get_devices_retry);

        r = broker_new_call(m, "GetDevices", &req);
        if (r < 0)
                return r;
        r = sd_bus_message_append(req, "s", p->resource);
        if (r < 0)
                return r;
        return sd_bus_call_async(sd_bus_message_get_bus(req), &p->get_devices_slot, req, on_get_devices_reply, p,
                                 broker_timeout_usec(m));
}

typedef struct Forward {
        Manager *manager;
        GrpcCall *call;
        BrokerForwardKind kind;
        size_t n_containers;
        uint32_t timeout_ms;
        /* An Allocate the broker refuses as over a sharing limit is asked again once,
         * after a reconciliation: the call as sent, to be copied into a new one. */
        sd_bus_message *req;
        bool retried;
        /* Allocate: what the answer is checked against (gate.h). */
        char *resource;
        V1beta1__AllocateRequest *request;
} Forward;

static void forward_free(void *userdata) {
        Forward *f = userdata;

        if (!f)
                return;
        grpc_call_unref(f->call);
        sd_bus_message_unref(f->req);
        free(f->resource);
        if (f->request)
                protobuf_c_message_free_unpacked(&f->request->base, NULL);
        free(f);
}

/* Refusals of the gate are logged at warning up to this many per minute, then at debug:
 * a hostile broker cannot flood the journal. */
#define GATE_WARNINGS_PER_MINUTE 10u

static void gate_log_refusal(Manager *m, const char *resource, const char *reason) {
        uint64_t now = now_usec(CLOCK_MONOTONIC);

        if (now - m->gate_window_usec >= 60 * 1000 * 1000ULL) {
                if (m->gate_warnings > GATE_WARNINGS_PER_MINUTE)
                        log_warning("%u more Allocate answer(s) of kgpu-brokerd were refused in the last minute "
                                    "(logged at debug).", m->gate_warnings - GATE_WARNINGS_PER_MINUTE);
                m->gate_window_usec = now;
                m->gate_warnings = 0;
        }
        if (++m->gate_warnings <= GATE_WARNINGS_PER_MINUTE)
                log_struct(LOG_WARNING, KGPU_MESSAGE_ANSWER_REFUSED,
                           "Refused kgpu-brokerd's Allocate answer for %s, nothing of it reaches the kubelet: %s.",
                           resource, reason);
        else
                log_debug("Refused kgpu-brokerd's Allocate answer for %s: %s.", resource, reason);
}

/* The broker's Allocate answer, checked against the probe's GPU objects before it is
 * encoded for the kubelet; finishes the call either way. */
static void forward_allocate_answer(Forward *f, sd_bus_message *reply) {
        Manager *m = f->manager;
        V1beta1__AllocateResponse *answer = NULL;
        _cleanup_free_ char *reason = NULL, *text = NULL;
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len = 0;
        int r;

        r = grpcd_allocate_reply_read(reply, f->n_containers, &answer);
        if (r < 0) {
                log_warning_errno(r, "io.kgpu.Broker1.Allocate sent an answer that cannot be forwarded: %m");
                (void) grpc_call_finish(f->call, GRPC_STATUS_INTERNAL, "kgpu-brokerd sent an invalid answer");
                return;
        }
        r = f->request ? gate_check_allocate(m->gpus, m->config->nvidia_cdi_annotation_prefix, f->resource,
                                             f->request, answer, &reason)
                       : -EINVAL;
        if (r >= 0)
                r = grpcd_message_pack(&answer->base, &buf, &len);
        protobuf_c_message_free_unpacked(&answer->base, NULL);

        if (r == -EPERM || r == -ENODATA) {
                if (r == -EPERM)
                        gate_log_refusal(m, f->resource, reason);
                else
                        log_warning("Refused kgpu-brokerd's Allocate answer for %s: %s.", f->resource, reason);
                if (asprintf(&text, "kgpu-grpcd refused the Allocate answer of kgpu-brokerd: %s", reason) < 0)
                        text = NULL;
                (void) grpc_call_finish(f->call, r == -EPERM ? GRPC_STATUS_PERMISSION_DENIED : GRPC_STATUS_UNAVAILABLE,
                                        text ?: "kgpu-grpcd refused the Allocate answer of kgpu-brokerd");
                return;
        }
        if (r < 0) {
                log_warning_errno(r, "Failed to check or encode the Allocate answer for %s: %m", f->resource);
                (void) grpc_call_finish(f->call, GRPC_STATUS_INTERNAL, "kgpu-grpcd failed to check the answer");
                return;
        }
        r = grpc_call_reply(f->call, buf, len);
        if (r < 0)
                log_debug_errno(r, "Failed to send the Allocate answer, ignoring: %m");
}

static void on_retry_synced(int result, void *userdata);

static const char *const forward_member[] = {
        [BROKER_FORWARD_ALLOCATE] = "Allocate",
        [BROKER_FORWARD_PREFERRED] = "GetPreferredAllocation",
        [BROKER_FORWARD_PRESTART] = "PreStartContainer",
};

/* Over a sharing limit (or the broker's cap on recorded allocations) as far as the broker
 * knows: it may count a container that has ended. Ask the kubelet who holds what, let the
 * broker release the rest, and ask once more. A reconciliation only ever releases, so an
 * Allocate admitted without one would be admitted after one too: only refusals wait for
 * the kubelet. Returns true when the second try is on its way (f gave it its request). */
static bool forward_retry_after_reconcile(Forward *f, const sd_bus_error *e) {
        Forward *again;

        if (!f->req || f->retried || !f->manager->pod_resources ||
            !(sd_bus_error_has_name(e, KGPU_ERROR_EXHAUSTED) ||
              sd_bus_error_has_name(e, KGPU_ERROR_TOO_MANY_ALLOCATIONS)))
                return false;
        again = calloc(1, sizeof(Forward));
        if (!again)
                return false;
        *again = *f;
        again->call = grpc_call_ref(f->call);
        again->retried = true;
        f->req = NULL;
        f->resource = NULL;
        f->request = NULL;
        if (pod_resources_sync(f->manager->pod_resources, on_retry_synced, again) >= 0) {
                log_debug("%s: %s; reconciling with the kubelet and asking again.",
                          grpc_call_get_method(f->call), e->message ?: e->name);
                return true;
        }
        forward_free(again);
        return false;
}

static int on_forward_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Forward *f = userdata;
        _cleanup_free_ uint8_t *buf = NULL;
        _cleanup_free_ char *text = NULL;
        const sd_bus_error *e;
        size_t len = 0;
        int r;

        if (!grpc_call_is_open(f->call))
                return 0; /* the kubelet gave up already */

        e = sd_bus_message_get_error(reply);
        if (e) {
                GrpcStatus status = grpcd_status_from_bus_error(e->name);

                if (sd_bus_error_has_name(e, SD_BUS_ERROR_NO_REPLY) ||
                    sd_bus_error_has_name(e, SD_BUS_ERROR_TIMEOUT))
                        r = asprintf(&text, "kgpu-brokerd did not answer %s within %u ms",
                                     forward_member[f->kind], f->timeout_ms);
                else
                        r = asprintf(&text, "kgpu-brokerd refused %s: %s (%s)", forward_member[f->kind],
                                     e->message ?: "no message", e->name);
                if (r < 0)
                        text = NULL;
                if (forward_retry_after_reconcile(f, e))
                        return 0;
                log_debug("%s: %s", grpc_call_get_method(f->call), text ?: e->name);
                (void) grpc_call_finish(f->call, status, text ?: e->name);
                return 0;
        }

        switch (f->kind) {
        case BROKER_FORWARD_ALLOCATE:
                forward_allocate_answer(f, reply);
                return 0;
        case BROKER_FORWARD_PREFERRED:
                r = grpcd_preferred_reply_from_bus(reply, f->n_containers, &buf, &len);
                break;
        case BROKER_FORWARD_PRESTART:
                r = grpcd_prestart_reply_encode(&buf, &len);
                break;
        default:
                r = -EINVAL;
        }
        if (r < 0) {
                log_warning_errno(r, "io.kgpu.Broker1.%s sent an answer that cannot be forwarded: %m",
                                  forward_member[f->kind]);
                (void) grpc_call_finish(f->call, GRPC_STATUS_INTERNAL,
                                        "kgpu-brokerd sent an invalid answer");
                return 0;
        }

        r = grpc_call_reply(f->call, buf, len);
        if (r < 0)
                log_debug_errno(r, "Failed to send the %s answer, ignoring: %m", forward_member[f->kind]);
        return 0;
}

static int forward_send(Manager *m, sd_bus_message *req, Forward *f);

int broker_client_forward(Plugin *p, GrpcCall *call, BrokerForwardKind kind,
                          const uint8_t *msg, size_t len) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *req = NULL;
        Manager *m = p->manager;
        V1beta1__AllocateRequest *request = NULL;
        const char *reason = NULL;
        size_t n_containers = 0;
        Forward *f;
        int r;

        if ((unsigned) kind >= ELEMENTSOF(forward_member))
                return -EINVAL;

        if (!m->broker_present)
                return grpc_call_finish(call, GRPC_STATUS_UNAVAILABLE,
                                        "kgpu-brokerd (io.kgpu.Broker1) is not running");

        r = broker_new_call(m, forward_member[kind], &req);
        if (r < 0)
                goto internal;
        r = sd_bus_message_append(req, "s", p->resource);
        if (r < 0)
                goto internal;

        switch (kind) {
        case BROKER_FORWARD_ALLOCATE:
                r = grpcd_allocate_request_to_bus(msg, len, req, &n_containers, &request, &reason);
                break;
        case BROKER_FORWARD_PREFERRED:
                r = grpcd_preferred_request_to_bus(msg, len, req, &n_containers, &reason);
                break;
        case BROKER_FORWARD_PRESTART:
                r = grpcd_prestart_request_to_bus(msg, len, req, &reason);
                break;
        }
        if (r == -EBADMSG || r == -EINVAL)
                return grpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT,
                                        reason ?: "invalid request");
        if (r < 0)
                goto internal;

        f = calloc(1, sizeof(*f));
        if (!f) {
                r = -ENOMEM;
                goto internal;
        }
        *f = (Forward) {
                .manager = m,
                .call = grpc_call_ref(call),
                .kind = kind,
                .n_containers = n_containers,
                .timeout_ms = (uint32_t) (broker_timeout_usec(m) / 1000),
                /* Only an Allocate is asked again (on_forward_reply()). */
                .req = kind == BROKER_FORWARD_ALLOCATE ? sd_bus_message_ref(req) : NULL,
                .request = TAKE_PTR(request),
        };
        if (kind == BROKER_FORWARD_ALLOCATE) {
                f->resource = strdup(p->resource);
                if (!f->resource) {
                        forward_free(f);
                        r = -ENOMEM;
                        goto internal;
                }
        }
        return forward_send(m, req, f);

internal:
        if (request)
                protobuf_c_message_free_unpacked(&request->base, NULL);
        log_debug_errno(r, "Failed to build the %s call: %m", forward_member[kind]);
        return grpc_call_finish(call, GRPC_STATUS_INTERNAL, "internal error building the broker call");
}

static int forward_send(Manager *m, sd_bus_message *req, Forward *f) {
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        GrpcCall *call = f->call;
        BrokerForwardKind kind = f->kind;
        int r;

        if (!m->broker_present) {
                r = grpc_call_finish(call, GRPC_STATUS_UNAVAILABLE, "kgpu-brokerd (io.kgpu.Broker1) is not running");
                forward_free(f);
                return r;
        }
        r = sd_bus_call_async(sd_bus_message_get_bus(req), &slot, req, on_forward_reply, f, broker_timeout_usec(m));
        if (r < 0) {
                forward_free(f);
                log_debug_errno(r, "Failed to call io.kgpu.Broker1.%s: %m", forward_member[kind]);
                return grpc_call_finish(call, GRPC_STATUS_UNAVAILABLE,
                                        "cannot reach kgpu-brokerd on the bus");
        }
        /* From here the slot owns f; the bus owns the slot. */
        (void) sd_bus_slot_set_destroy_callback(slot, forward_free);
        r = sd_bus_slot_set_floating(slot, true);
        if (r < 0)
                /* Unlikely; the slot is then dropped with our reference and the call with it. */
                return grpc_call_finish(call, GRPC_STATUS_INTERNAL, "internal error");
        return 0;
}

static void on_retry_synced(int result, void *userdata) {
        Forward *f = userdata;

        if (result == -ECANCELED) {     /* shutting down */
                (void) grpc_call_finish(f->call, GRPC_STATUS_UNAVAILABLE, "kgpu-grpcd is stopping");
                forward_free(f);
                return;
        }
        if (result < 0)
                log_debug("Reconciliation after a refused Allocate failed (%s), asking the broker again anyway.",
                          strerror(-result));
        if (!grpc_call_is_open(f->call)) {
                forward_free(f);
                return;
        }
        /* The same call once more (f->retried: a second refusal is the answer). */
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *sent = TAKE_PTR(f->req), *req = NULL;
        int r = broker_new_call(f->manager, forward_member[f->kind], &req);

        if (r >= 0)
                r = sd_bus_message_rewind(sent, true);
        if (r >= 0)
                r = sd_bus_message_copy(req, sent, true);
        if (r < 0) {
                log_debug_errno(r, "Failed to build the %s call again: %m", forward_member[f->kind]);
                (void) grpc_call_finish(f->call, GRPC_STATUS_INTERNAL, "internal error building the broker call");
                forward_free(f);
                return;
        }
        (void) forward_send(f->manager, req, f);
}
