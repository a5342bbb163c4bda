/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * broker-peer.c — kgpu-grpcd's peer connection to the broker (see broker-peer.h).
 */

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "common/bus-names.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/grpc/broker-client.h"
#include "daemons/grpc/broker-peer.h"

#define PEER_RETRY_USEC (1000 * 1000ULL)

bool broker_peer_is(Manager *m, sd_bus *bus) {
        return bus && bus == m->broker_peer;
}

sd_bus *broker_client_bus(Manager *m) {
        if (m->broker_peer && !m->broker_peer_done && sd_bus_is_ready(m->broker_peer) > 0) {
                m->broker_peer_up = true;
                return m->broker_peer;
        }
        return m->bus;
}

static void peer_fallback(Manager *m, int error) {
        if (m->broker_peer_fallback_logged)
                return;
        log_notice("Cannot use the broker's peer socket %s (%s): calling io.kgpu.Broker1 over the system bus.",
                   m->config->broker_socket, strerror(error < 0 ? -error : error));
        m->broker_peer_fallback_logged = true;
}

static int on_peer_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        m->broker_peer_retry = sd_event_source_disable_unref(m->broker_peer_retry);
        if (m->broker_present && !m->broker_peer)
                (void) broker_peer_connect(m);
        return 0;
}

static sd_bus *peer_free(sd_bus *bus) {
        if (bus) {
                (void) sd_bus_detach_event(bus);
                sd_bus_close_unref(bus);
        }
        return NULL;
}

/* Frees the retired connections whose end sd-bus has processed: the calls pending on
 * them were answered (with an error) before their Disconnected came. */
static void retired_collect(Manager *m) {
        size_t j = 0;

        for (size_t i = 0; i < m->n_broker_peer_retired; i++) {
                if (m->broker_peer_retired_done[i])
                        peer_free(m->broker_peer_retired[i]);
                else {
                        m->broker_peer_retired[j] = m->broker_peer_retired[i];
                        m->broker_peer_retired_done[j++] = false;
                }
        }
        m->n_broker_peer_retired = j;
}

static int on_peer_close(sd_event_source *s, void *userdata) {
        Manager *m = userdata;
        int r;

        m->broker_peer_close = sd_event_source_disable_unref(m->broker_peer_close);
        retired_collect(m);
        if (!m->broker_peer || !m->broker_peer_done)
                return 0;
        m->broker_peer = peer_free(m->broker_peer);
        if (!m->broker_peer_up) {
                /* Refused before it was ever used (the broker does not take this uid):
                 * the bus until the next broker. */
                peer_fallback(m, ECONNREFUSED);
                return 0;
        }
        /* Closed by a broker that is still there (it restarted and the new owner is not
         * announced yet, or it shed us): ask again a little later. */
        if (m->broker_present && !m->broker_peer_retry) {
                r = sd_event_add_time_relative(m->event, &m->broker_peer_retry, CLOCK_MONOTONIC, PEER_RETRY_USEC,
                                               10 * 1000, on_peer_retry, m);
                if (r < 0)
                        log_debug_errno(r, "Failed to schedule another peer connection, staying on the bus: %m");
        }
        return 0;
}

static int on_peer_message(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        sd_bus *bus = sd_bus_message_get_bus(msg);
        int r;

        if (sd_bus_message_is_signal(msg, "org.freedesktop.DBus.Local", "Disconnected")) {
                /* sd-bus has failed every call pending on it by now: it may go. */
                if (bus == m->broker_peer) {
                        log_debug("The broker's peer connection closed; calling it over the system bus meanwhile.");
                        m->broker_peer_done = true;
                }
                for (size_t i = 0; i < m->n_broker_peer_retired; i++)
                        if (m->broker_peer_retired[i] == bus)
                                m->broker_peer_retired_done[i] = true;
                /* Not from inside the connection's own callback. */
                if (!m->broker_peer_close) {
                        r = sd_event_add_defer(m->event, &m->broker_peer_close, on_peer_close, m);
                        if (r < 0)
                                log_debug_errno(r, "Failed to arrange closing the peer connection: %m");
                }
                return 1;
        }
        if (bus == m->broker_peer && sd_bus_message_is_signal(msg, KGPU_BROKER_INTERFACE, "ResourcesChanged") &&
            streq_ptr(sd_bus_message_get_path(msg), KGPU_BROKER_PATH))
                return broker_client_on_resources_changed(msg, m, ret_error), 1;
        return 0;
}

void broker_peer_close(Manager *m) {
        m->broker_peer_retry = sd_event_source_disable_unref(m->broker_peer_retry);
        if (!m->broker_peer)
                return;
        /* Retired, not closed: the calls pending on it are answered (with an error, when
         * the broker died) as sd-bus processes its end, which then frees it. */
        if (m->broker_peer_done)
                peer_free(m->broker_peer);
        else {
                if (m->n_broker_peer_retired >= ELEMENTSOF(m->broker_peer_retired)) {
                        /* Four brokers gone before one end was read: unlikely; the oldest goes. */
                        peer_free(m->broker_peer_retired[0]);
                        memmove(m->broker_peer_retired, m->broker_peer_retired + 1,
                                (m->n_broker_peer_retired - 1) * sizeof(sd_bus *));
                        memmove(m->broker_peer_retired_done, m->broker_peer_retired_done + 1,
                                (m->n_broker_peer_retired - 1) * sizeof(bool));
                        m->n_broker_peer_retired--;
                }
                m->broker_peer_retired[m->n_broker_peer_retired] = m->broker_peer;
                m->broker_peer_retired_done[m->n_broker_peer_retired++] = false;
        }
        m->broker_peer = NULL;
        m->broker_peer_done = false;
}

void broker_peer_free(Manager *m) {
        m->broker_peer_close = sd_event_source_disable_unref(m->broker_peer_close);
        m->broker_peer_retry = sd_event_source_disable_unref(m->broker_peer_retry);
        m->broker_peer = peer_free(m->broker_peer);
        for (size_t i = 0; i < m->n_broker_peer_retired; i++)
                peer_free(m->broker_peer_retired[i]);
        m->n_broker_peer_retired = 0;
}

int broker_peer_connect(Manager *m) {
        _cleanup_(sd_bus_unrefp) sd_bus *bus = NULL;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        const char *path = m->config->broker_socket;
        int fd, r;

        broker_peer_close(m);
        if (isempty(path))
                return 0;       /* configured off: the bus, nothing to say */
        if (strlen(path) >= sizeof(sa.sun_path)) {
                peer_fallback(m, ENAMETOOLONG);
                return 0;
        }
        strcpy(sa.sun_path, path);

        fd = socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC|SOCK_NONBLOCK, 0);
        if (fd < 0) {
                peer_fallback(m, errno);
                return 0;
        }
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                r = errno;
                close(fd);
                peer_fallback(m, r);
                return 0;
        }
        r = sd_bus_new(&bus);
        if (r < 0) {
                close(fd);
                peer_fallback(m, r);
                return 0;
        }
        r = sd_bus_set_fd(bus, fd, fd);
        if (r < 0) {
                close(fd);
                peer_fallback(m, r);
                return 0;
        }
        r = sd_bus_negotiate_fds(bus, false);
        if (r >= 0)
                r = sd_bus_set_description(bus, "broker-peer");
        if (r >= 0)
                r = sd_bus_add_filter(bus, NULL, on_peer_message, m);
        if (r >= 0)
                r = sd_bus_attach_event(bus, m->event, SD_EVENT_PRIORITY_NORMAL);
        if (r >= 0)
                r = sd_bus_start(bus);
        if (r < 0) {
                (void) sd_bus_detach_event(bus);
                peer_fallback(m, r);
                return 0;
        }
        m->broker_peer = TAKE_PTR(bus);
        m->broker_peer_up = m->broker_peer_done = false;
        if (m->broker_peer_fallback_logged)
                log_info("Calling io.kgpu.Broker1 over its peer socket %s again.", path);
        else
                log_debug("Connected to the broker's peer socket %s.", path);
        m->broker_peer_fallback_logged = false;
        return 0;
}
