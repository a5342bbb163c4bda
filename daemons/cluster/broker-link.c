/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * broker-link.c — SetNodeConfig and SetGasPods to io.kgpu.Broker1 (broker-link.h).
 *
 * Contract: see broker-link.h. At most one call of each kind is in flight; a change
 * that comes meanwhile is sent when it returns.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-names.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/cluster/broker-link.h"

static const char *strempty_(const char *s) {
        return s ?: "";
}

static uint64_t broker_timeout_usec(void) {
        return 10 * 1000 * 1000ULL;
}

static void broker_link_send(Manager *m);

static bool broker_gone(const sd_bus_error *e) {
        return sd_bus_error_has_names(e, "org.freedesktop.DBus.Error.ServiceUnknown",
                                      "org.freedesktop.DBus.Error.NameHasNoOwner",
                                      "org.freedesktop.DBus.Error.Disconnected");
}

static int on_node_config_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        m->node_config_retry = sd_event_source_disable_unref(m->node_config_retry);
        m->sent_node_config = false;
        broker_link_send(m);
        return 0;
}

/* Asks again later: the broker may take it then (a config file added, a broker that
 * was too busy to answer). */
static void node_config_retry(Manager *m) {
        int r;

        if (m->node_config_retry)
                return;
        r = sd_event_add_time_relative(m->event, &m->node_config_retry, CLOCK_MONOTONIC, BROKER_LINK_RETRY_USEC,
                                       1000 * 1000, on_node_config_retry, m);
        if (r < 0)
                log_warning_errno(r, "Failed to schedule SetNodeConfig again, ignoring: %m");
}

static void set_broker_error(Manager *m, const char *s) {
        (void) free_and_strdup(&m->broker_error, s);
        manager_properties_changed(m);
}

static int on_node_config_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        _cleanup_free_ char *text = NULL;

        m->node_config_call = sd_bus_slot_unref(m->node_config_call);
        if (e) {
                m->sent_node_config = false;
                if (broker_gone(e)) {
                        log_debug("SetNodeConfig: the broker is not there (%s); it is told when it comes.", e->name);
                        return 0;
                }
                /* Refused (an unknown or invalid config): the broker keeps the one in
                 * force; the value stays "sent" until it changes, so we do not insist. */
                m->sent_node_config = true;
                node_config_retry(m);
                if (asprintf(&text, "SetNodeConfig('%s'): %s: %s", strempty_(m->sent_label_value), e->name,
                             e->message ?: "") < 0)
                        return log_oom();
                /* The same refusal again (a retry) is not worth a warning each time. */
                log_full_errno(streq_ptr(text, m->broker_error) ? LOG_DEBUG : LOG_WARNING, 0,
                               "io.kgpu.Broker1 refused SetNodeConfig('%s'): %s: %s (asking again in %llu s)",
                               strempty_(m->sent_label_value), e->name, e->message ?: "",
                               BROKER_LINK_RETRY_USEC / 1000000ULL);
                set_broker_error(m, text);
        } else {
                m->node_config_retry = sd_event_source_disable_unref(m->node_config_retry);
                log_info("io.kgpu.Broker1 took SetNodeConfig('%s').", strempty_(m->sent_label_value));
                set_broker_error(m, "");
        }
        broker_link_send(m);
        return 0;
}

static int on_gas_pods_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        m->gas_pods_retry = sd_event_source_disable_unref(m->gas_pods_retry);
        m->sent_gas_pods = false;
        broker_link_send(m);
        return 0;
}

static int on_gas_pods_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        _cleanup_free_ char *text = NULL;

        m->gas_pods_call = sd_bus_slot_unref(m->gas_pods_call);
        if (e) {
                m->sent_gas_pods = false;
                if (broker_gone(e)) {
                        log_debug("SetGasPods: the broker is not there (%s).", e->name);
                        return 0;
                }
                m->sent_gas_pods = true;
                /* No answer in time: the broker may be busy, ask again later. A refusal
                 * of the set itself would only be repeated: wait for the next change. */
                if (sd_bus_error_has_name(e, "org.freedesktop.DBus.Error.NoReply") && !m->gas_pods_retry &&
                    sd_event_add_time_relative(m->event, &m->gas_pods_retry, CLOCK_MONOTONIC,
                                               BROKER_LINK_RETRY_USEC, 1000 * 1000, on_gas_pods_retry, m) < 0)
                        log_warning("Failed to schedule SetGasPods again, ignoring.");
                log_warning("io.kgpu.Broker1 refused SetGasPods: %s: %s", e->name, e->message ?: "");
                if (asprintf(&text, "SetGasPods: %s: %s", e->name, e->message ?: "") >= 0)
                        set_broker_error(m, text);
        } else
                log_debug("io.kgpu.Broker1 took SetGasPods (%zu pods).", m->pod_store.n_pods);
        broker_link_send(m);
        return 0;
}

static int new_call(Manager *m, const char *member, sd_bus_message **ret) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *req = NULL;
        int r;

        r = sd_bus_message_new_method_call(m->bus, &req, KGPU_BROKER_BUS_NAME, KGPU_BROKER_PATH,
                                           KGPU_BROKER_INTERFACE, member);
        if (r < 0)
                return r;
        r = sd_bus_message_set_auto_start(req, false);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(req);
        return 0;
}

static int send_node_config(Manager *m) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *req = NULL;
        const char *value = m->label_value ?: "";
        int r;

        r = new_call(m, "SetNodeConfig", &req);
        if (r >= 0)
                r = sd_bus_message_append(req, "s", value);
        if (r >= 0)
                r = sd_bus_call_async(m->bus, &m->node_config_call, req, on_node_config_reply, m,
                                      broker_timeout_usec());
        if (r < 0)
                return r;
        r = free_and_strdup(&m->sent_label_value, value);
        if (r < 0)
                return r;
        m->sent_node_config = true;
        m->node_config_calls++;
        return 0;
}

static int append_pod(sd_bus_message *req, const GasPod *p) {
        int r;

        r = sd_bus_message_open_container(req, 'r', "ssssssaa{sx}");
        if (r >= 0)
                r = sd_bus_message_append(req, "ssssss", p->uid, p->namespace, p->name, p->ts, p->cards, p->tiles);
        if (r >= 0)
                r = sd_bus_message_open_container(req, 'a', "a{sx}");
        for (size_t i = 0; r >= 0 && i < p->n_containers; i++) {
                const GasContainer *c = &p->containers[i];

                r = sd_bus_message_open_container(req, 'a', "{sx}");
                for (size_t j = 0; r >= 0 && j < c->n_limits; j++)
                        r = sd_bus_message_append(req, "{sx}", c->names[j], c->counts[j]);
                if (r >= 0)
                        r = sd_bus_message_close_container(req);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(req);
        if (r >= 0)
                r = sd_bus_message_close_container(req);
        return r;
}

static int send_gas_pods(Manager *m) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *req = NULL;
        int r;

        r = new_call(m, "SetGasPods", &req);
        if (r >= 0)
                r = sd_bus_message_open_container(req, 'a', "(ssssssaa{sx})");
        for (size_t i = 0; r >= 0 && i < m->pod_store.n_pods; i++)
                r = append_pod(req, m->pod_store.pods[i]);
        if (r >= 0)
                r = sd_bus_message_close_container(req);
        if (r >= 0)
                r = sd_bus_call_async(m->bus, &m->gas_pods_call, req, on_gas_pods_reply, m, broker_timeout_usec());
        if (r < 0)
                return r;
        m->sent_gas_pods = true;
        m->sent_generation = m->pod_store.generation;
        m->gas_pods_calls++;
        return 0;
}

static void broker_link_send(Manager *m) {
        int r;

        if (!m->bus)
                return;
        if (m->node.synced && !m->node_config_call &&
            (!m->sent_node_config || !streq(m->sent_label_value, m->label_value ?: ""))) {
                r = send_node_config(m);
                if (r < 0)
                        log_warning_errno(r, "Failed to call SetNodeConfig, trying at the next change: %m");
        }
        if (m->pods.synced && !m->gas_pods_call &&
            (!m->sent_gas_pods || m->sent_generation != m->pod_store.generation)) {
                r = send_gas_pods(m);
                if (r < 0)
                        log_warning_errno(r, "Failed to call SetGasPods, trying at the next change: %m");
        }
}

static int on_defer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        m->send_defer = sd_event_source_disable_unref(m->send_defer);
        broker_link_send(m);
        manager_properties_changed(m);
        return 0;
}

void broker_link_schedule(Manager *m) {
        int r;

        if (m->send_defer || !m->event)
                return;
        r = sd_event_add_time_relative(m->event, &m->send_defer, CLOCK_MONOTONIC, BROKER_LINK_DEFER_USEC, 10 * 1000,
                                       on_defer, m);
        if (r < 0) {
                log_warning_errno(r, "Failed to defer the broker update, sending now: %m");
                broker_link_send(m);
        }
}

static int on_broker_owner(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const char *name, *old, *new;
        int r;

        r = sd_bus_message_read(msg, "sss", &name, &old, &new);
        if (r < 0 || !streq(name, KGPU_BROKER_BUS_NAME))
                return 0;
        if (isempty(new)) {
                log_info("%s left the bus.", KGPU_BROKER_BUS_NAME);
                return 0;
        }
        log_info("%s has a new owner, sending it what this node's objects say.", KGPU_BROKER_BUS_NAME);
        /* A new broker knows nothing we told the old one; replies still in flight are
         * the old one's. */
        m->node_config_call = sd_bus_slot_unref(m->node_config_call);
        m->gas_pods_call = sd_bus_slot_unref(m->gas_pods_call);
        m->sent_node_config = m->sent_gas_pods = false;
        broker_link_schedule(m);
        return 0;
}

int broker_link_start(Manager *m) {
        return sd_bus_add_match_async(m->bus, &m->broker_owner_slot,
                                      "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',"
                                      "interface='org.freedesktop.DBus',member='NameOwnerChanged',"
                                      "arg0='" KGPU_BROKER_BUS_NAME "'",
                                      on_broker_owner, NULL, m);
}

void broker_link_done(Manager *m) {
        m->send_defer = sd_event_source_disable_unref(m->send_defer);
        m->node_config_retry = sd_event_source_disable_unref(m->node_config_retry);
        m->gas_pods_retry = sd_event_source_disable_unref(m->gas_pods_retry);
        m->node_config_call = sd_bus_slot_unref(m->node_config_call);
        m->gas_pods_call = sd_bus_slot_unref(m->gas_pods_call);
        m->broker_owner_slot = sd_bus_slot_unref(m->broker_owner_slot);
        m->sent_label_value = mfree(m->sent_label_value);
        m->broker_error = mfree(m->broker_error);
}
