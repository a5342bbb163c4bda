/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * registration.c — /v1beta1.Registration/Register on the kubelet socket.
 *
 * Contract: see registration.h. An attempt is only made while the probe reports the
 * kubelet socket; when it does not, the manager calls registration_start() again as
 * soon as it appears, so no timer runs while the kubelet is away.
 */

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"
#include "daemons/grpc/convert.h"
#include "daemons/grpc/kubelet-link.h"
#include "daemons/grpc/manager.h"
#include "daemons/grpc/registration.h"

#define REGISTER_METHOD "/v1beta1.Registration/Register"

uint64_t registration_next_backoff(uint64_t current_usec) {
        if (current_usec < REGISTRATION_BACKOFF_MIN_USEC)
                return REGISTRATION_BACKOFF_MIN_USEC;
        if (current_usec >= REGISTRATION_BACKOFF_MAX_USEC / 2)
                return REGISTRATION_BACKOFF_MAX_USEC;
        return current_usec * 2;
}

bool registration_active(Plugin *p) {
        return p->register_connect_slot || p->register_call || p->register_timer;
}

void registration_cancel(Plugin *p) {
        p->register_connect_slot = sd_bus_slot_unref(p->register_connect_slot);
        p->register_call = grpc_client_call_cancel(p->register_call);
        p->register_timer = sd_event_source_disable_unref(p->register_timer);
        if (p->registered) {
                p->registered = false;
                manager_update_status(p->manager);
        }
}

static int registration_attempt(Plugin *p);
static int registration_schedule(Plugin *p, bool fast);

static int registration_schedule_retry(Plugin *p) {
        return registration_schedule(p, false);
}

static int on_register_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Plugin *p = userdata;

        p->register_timer = sd_event_source_disable_unref(p->register_timer);
        (void) registration_attempt(p);
        return 0;
}

/* fast: the kubelet appeared moments ago and does not accept yet (it binds its socket
 * before it listens): 1 ms doubling to 10 ms, instead of the failure backoff. */
static int registration_schedule(Plugin *p, bool fast) {
        Manager *m = p->manager;
        int r;

        if (fast)
                p->register_backoff_usec = p->register_backoff_usec == 0 ? REGISTRATION_FAST_MIN_USEC :
                        MIN(p->register_backoff_usec * 2, REGISTRATION_FAST_MAX_USEC);
        else
                p->register_backoff_usec = registration_next_backoff(p->register_backoff_usec);
        p->register_timer = sd_event_source_disable_unref(p->register_timer);
        r = sd_event_add_time_relative(m->event, &p->register_timer, CLOCK_MONOTONIC,
                                       p->register_backoff_usec, fast ? 1 : 1000 /* not the 250 ms default */,
                                       on_register_timer, p);
        if (r < 0)
                return log_error_errno(r, "%s: failed to schedule another registration attempt: %m",
                                       p->resource);
        (void) sd_event_source_set_description(p->register_timer, "register-retry");
        return 0;
}

/* Logs (rate-limited) and schedules the next attempt. */
static void registration_failed(Plugin *p, GrpcStatus status, const char *message) {
        Manager *m = p->manager;
        _cleanup_free_ char *what = NULL, *why = NULL;

        p->register_failures++;
        /* No attempt count in the text: the same reason is logged at warning once a minute. */
        if (asprintf(&what, "Registering %s with the kubelet at %s", p->resource,
                     m->registration_socket ?: "") < 0 ||
            asprintf(&why, "%s%s%s", grpc_status_to_string(status), message ? ": " : "", message ?: "") < 0)
                log_oom();
        else
                kubelet_link_log_failure(m, what, why);
        (void) registration_schedule_retry(p);
}

static void on_register_reply(GrpcStatus status, const char *message,
                              const uint8_t *msg, size_t len, void *userdata) {
        Plugin *p = userdata;
        Manager *m = p->manager;

        /* The layer frees the call after we return. */
        p->register_call = NULL;

        if (status == GRPC_STATUS_OK) {
                uint64_t now = now_usec(CLOCK_MONOTONIC);

                p->registered = true;
                p->register_failures = 0;
                p->register_backoff_usec = 0;
                if (p->register_after_usec > 0 && now >= p->register_after_usec)
                        log_struct(LOG_INFO, KGPU_MESSAGE_REGISTERED,
                                   "Registered %s with the kubelet (endpoint %s), %.3f ms after its socket appeared.",
                                   p->resource, p->socket_name,
                                   (double) (now - p->register_after_usec) / 1000.0);
                else
                        log_struct(LOG_INFO, KGPU_MESSAGE_REGISTERED,
                                   "Registered %s with the kubelet (endpoint %s).",
                                   p->resource, p->socket_name);
                manager_update_status(m);
                return;
        }

        registration_failed(p, status, message);
}

static void on_register_connected(int fd, const char *message, void *userdata) {
        _cleanup_free_ uint8_t *buf = NULL;
        Plugin *p = userdata;
        Manager *m = p->manager;
        uint32_t timeout_ms = m->config->register_timeout_ms;
        size_t len;
        int r;

        p->register_connect_slot = sd_bus_slot_unref(p->register_connect_slot);
        if (fd < 0) {
                if (fd == -EHOSTDOWN)
                        return; /* the probe's return registers us */
                if (fd == -ECONNREFUSED && manager_kubelet_present(m) &&
                    now_usec(CLOCK_MONOTONIC) - m->kubelet_appeared_usec < REGISTRATION_FAST_PERIOD_USEC) {
                        log_debug("%s: the kubelet does not accept yet (%s), trying again.", p->resource,
                                  message ?: "");
                        (void) registration_schedule(p, true);
                        return;
                }
                registration_failed(p, GRPC_STATUS_UNAVAILABLE, message);
                return;
        }

        r = grpcd_register_request_encode(p->socket_name, p->resource, p->pre_start_required,
                                          p->get_preferred_allocation_available, &buf, &len);
        if (r < 0) {
                safe_close(fd);
                log_error_errno(r, "%s: failed to encode RegisterRequest: %m", p->resource);
                return;
        }
        r = grpc_client_call_unary_fd(m->event, fd, REGISTER_METHOD, buf, len,
                                      (uint64_t) (timeout_ms > 0 ? timeout_ms : 5000) * 1000ULL,
                                      on_register_reply, p, &p->register_call);
        if (r < 0) {
                log_warning_errno(r, "%s: failed to start a registration call, retrying: %m", p->resource);
                (void) registration_schedule_retry(p);
        }
}

static int registration_attempt(Plugin *p) {
        Manager *m = p->manager;
        int r;

        if (!manager_kubelet_present(m) || !m->probe_present) {
                log_debug("%s: kubelet socket %s is absent or unknown, waiting for it.", p->resource,
                          m->registration_socket ?: "");
                return 0;
        }
        if (!p->server)
                return 0;       /* plugin_socket_ready() registers */

        r = kubelet_link_connect(m, KUBELET_LINK_REGISTRATION, on_register_connected, p,
                                 &p->register_connect_slot);
        if (r < 0) {
                log_warning_errno(r, "%s: failed to ask kgpu-probed for the kubelet socket, retrying: %m",
                                  p->resource);
                return registration_schedule_retry(p);
        }
        return 0;
}

int registration_start(Plugin *p) {
        p->register_after_usec = 0;
        p->register_call = grpc_client_call_cancel(p->register_call);
        p->register_timer = sd_event_source_disable_unref(p->register_timer);
        p->register_backoff_usec = 0;
        p->register_failures = 0;
        if (p->registered) {
                p->registered = false;
                manager_update_status(p->manager);
        }
        return registration_attempt(p);
}
