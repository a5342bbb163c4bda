/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * plugin.c — one device plugin gRPC server per advertised resource.
 *
 * Contract: see plugin.h. The server is replaced as a whole when its socket must be
 * made again (kubelet restart, socket removed): the old connections belong to a kubelet
 * that is gone or will reconnect after the new registration.
 */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/resource-name.h"
#include "common/util.h"
#include "daemons/grpc/broker-client.h"
#include "daemons/grpc/kubelet-link.h"
#include "daemons/grpc/manager.h"
#include "daemons/grpc/plugin.h"
#include "daemons/grpc/registration.h"

int plugin_new(Manager *m, const char *resource, Plugin **ret) {
        _cleanup_(plugin_freep) Plugin *p = NULL;
        int r;

        p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->manager = m;
        p->resource = strdup(resource);
        if (!p->resource)
                return -ENOMEM;
        r = resource_socket_name(resource, &p->socket_name);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(p);
        return 0;
}

static void plugin_drop_stream(Plugin *p, GrpcCall *call) {
        for (size_t i = 0; i < p->n_streams; i++)
                if (p->streams[i] == call) {
                        memmove(p->streams + i, p->streams + i + 1,
                                (p->n_streams - i - 1) * sizeof(GrpcCall *));
                        p->n_streams--;
                        grpc_call_set_closed_handler(call, NULL, NULL);
                        grpc_call_unref(call);
                        return;
                }
}

Plugin *plugin_free(Plugin *p) {
        if (!p)
                return NULL;

        registration_cancel(p);
        p->remove_timer = sd_event_source_disable_unref(p->remove_timer);
        p->get_devices_slot = sd_bus_slot_unref(p->get_devices_slot);
        p->get_devices_retry = sd_event_source_disable_unref(p->get_devices_retry);
        p->listen_slot = sd_bus_slot_unref(p->listen_slot);
        p->listen_retry = sd_event_source_disable_unref(p->listen_retry);
        /* Only the probe's copy of the socket is ours to remove, and only if unchanged. */
        if (p->server)
                kubelet_link_close_socket(p);
        /* Open streams get their closed handler here, which drops our references. */
        p->server = grpc_server_free(p->server);
        while (p->n_streams > 0)
                plugin_drop_stream(p, p->streams[p->n_streams - 1]);
        free(p->streams);
        grpcd_devices_free(p->devices, p->n_devices);
        free(p->law_msg);
        free(p->resource);
        free(p->socket_name);
        return mfree(p);
}

bool plugin_is_listening(Plugin *p) {
        return p->wants_socket;
}

bool plugin_socket_intact(Plugin *p) {
        return p->server && kubelet_link_socket_listed(p->manager, p->socket_name, p->socket_inode);
}

static int plugin_method_options(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        Plugin *p = userdata;
        _cleanup_free_ uint8_t *buf = NULL;
        size_t blen;
        int r;

        r = grpcd_options_encode(p->pre_start_required, p->get_preferred_allocation_available,
                                 &buf, &blen);
        if (r < 0)
                return r;
        return grpc_call_reply(call, buf, blen);
}

static void plugin_stream_closed(GrpcCall *call, void *userdata) {
        Plugin *p = userdata;

        plugin_drop_stream(p, call);
}

static int plugin_method_list_and_watch(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        Plugin *p = userdata;
        GrpcCall **n;
        int r;

        /* The request is Empty; its content carries nothing we use. */
        n = reallocarray(p->streams, p->n_streams + 1, sizeof(GrpcCall *));
        if (!n)
                return -ENOMEM;
        p->streams = n;
        p->streams[p->n_streams++] = grpc_call_ref(call);
        grpc_call_set_closed_handler(call, plugin_stream_closed, p);

        log_debug("%s: ListAndWatch stream opened (%zu open).", p->resource, p->n_streams);

        if (p->have_devices) {
                r = grpc_call_send_latest(call, p->law_msg, p->law_len);
                if (r < 0) {
                        plugin_drop_stream(p, call);
                        return r;
                }
        }
        return 0;
}

static int plugin_method_preferred(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        return broker_client_forward(userdata, call, BROKER_FORWARD_PREFERRED, msg, len);
}

static int plugin_method_allocate(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        return broker_client_forward(userdata, call, BROKER_FORWARD_ALLOCATE, msg, len);
}

static int plugin_method_prestart(GrpcCall *call, const uint8_t *msg, size_t len, void *userdata) {
        return broker_client_forward(userdata, call, BROKER_FORWARD_PRESTART, msg, len);
}

/* Backoff of OpenPluginSocket after a failure. */
#define PLUGIN_LISTEN_BACKOFF_MIN_USEC (1000 * 1000ULL)
#define PLUGIN_LISTEN_BACKOFF_MAX_USEC (30 * 1000 * 1000ULL)

int plugin_listen(Plugin *p) {
        p->wants_socket = true;
        p->listen_retry = sd_event_source_disable_unref(p->listen_retry);
        if (!p->manager->probe_present)
                return 0;       /* asked again when the probe is back */
        return kubelet_link_open_socket(p);
}

static int on_listen_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        Plugin *p = userdata;
        int r;

        p->listen_retry = sd_event_source_disable_unref(p->listen_retry);
        r = plugin_listen(p);
        if (r < 0)
                plugin_socket_failed(p, r, strerror(-r));
        return 0;
}

void plugin_socket_failed(Plugin *p, int error, const char *message) {
        Manager *m = p->manager;
        _cleanup_free_ char *what = NULL;
        int r;

        if (asprintf(&what, "Making the socket %s for %s", p->socket_name, p->resource) >= 0)
                kubelet_link_log_failure(m, what, message);
        if (error == -EHOSTDOWN || !m->probe_present || p->listen_retry)
                return; /* no probe: asked again when it is back */
        p->listen_backoff_usec = p->listen_backoff_usec == 0 ? PLUGIN_LISTEN_BACKOFF_MIN_USEC :
                MIN(p->listen_backoff_usec * 2, PLUGIN_LISTEN_BACKOFF_MAX_USEC);
        r = sd_event_add_time_relative(m->event, &p->listen_retry, CLOCK_MONOTONIC, p->listen_backoff_usec,
                                       10 * 1000, on_listen_retry, p);
        if (r < 0)
                log_warning_errno(r, "%s: failed to schedule another try for its socket: %m", p->resource);
        else
                (void) sd_event_source_set_description(p->listen_retry, "listen-retry");
}

void plugin_socket_ready(Plugin *p, int fd, uint64_t inode) {
        _cleanup_(grpc_server_freep) GrpcServer *s = NULL;
        _cleanup_close_ int lfd = fd;
        Manager *m = p->manager;
        GrpcServerLimits limits = {
                .max_connections = m->config->grpc_max_connections,
                .max_streams_per_connection = m->config->grpc_max_streams,
                .max_message_size = m->config->grpc_max_message_size,
        };
        static const struct {
                const char *path;
                GrpcMethodKind kind;
                GrpcMethodHandler handler;
        } methods[] = {
                { "/v1beta1.DevicePlugin/GetDevicePluginOptions", GRPC_METHOD_UNARY,            plugin_method_options },
                { "/v1beta1.DevicePlugin/ListAndWatch",           GRPC_METHOD_SERVER_STREAMING, plugin_method_list_and_watch },
                { "/v1beta1.DevicePlugin/GetPreferredAllocation", GRPC_METHOD_UNARY,            plugin_method_preferred },
                { "/v1beta1.DevicePlugin/Allocate",               GRPC_METHOD_UNARY,            plugin_method_allocate },
                { "/v1beta1.DevicePlugin/PreStartContainer",      GRPC_METHOD_UNARY,            plugin_method_prestart },
        };
        bool after_kubelet = p->listen_after_kubelet;
        int r;

        p->listen_after_kubelet = false;
        r = grpc_server_new(m->event, &limits, &s);
        for (size_t i = 0; r >= 0 && i < ELEMENTSOF(methods); i++)
                r = grpc_server_add_method(s, methods[i].path, methods[i].kind, methods[i].handler, p);
        if (r >= 0)
                r = grpc_server_listen_fd(s, TAKE_FD(lfd));
        if (r < 0) {
                log_error_errno(r, "%s: failed to serve on the socket from kgpu-probed: %m", p->resource);
                plugin_socket_failed(p, r, strerror(-r));
                return;
        }

        /* Drop the old server first: its connections belong to the old socket. */
        p->server = grpc_server_free(p->server);
        p->server = TAKE_PTR(s);
        p->socket_inode = inode;
        p->listen_backoff_usec = 0;
        log_debug("%s: listening on %s/%s (inode %" PRIu64 ").", p->resource, m->device_plugin_path ?: "",
                  p->socket_name, inode);

        (void) registration_start(p);
        if (after_kubelet)
                p->register_after_usec = m->kubelet_appeared_usec;
}

int plugin_set_devices(Plugin *p, GrpcdDevice *devices, size_t n) {
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len, healthy = 0;
        bool changed;
        int r;

        r = grpcd_list_and_watch_encode(devices, n, &buf, &len);
        if (r < 0) {
                grpcd_devices_free(devices, n);
                return r;
        }

        changed = !p->have_devices || len != p->law_len || memcmp(buf, p->law_msg, len) != 0;
        grpcd_devices_free(p->devices, p->n_devices);
        p->devices = devices;
        p->n_devices = n;

        if (changed) {
                free(p->law_msg);
                p->law_msg = TAKE_PTR(buf);
                p->law_len = len;
                p->have_devices = true;

                for (size_t i = 0; i < n; i++)
                        healthy += devices[i].healthy;
                log_info("%s: %zu device(s), %zu healthy.", p->resource, n, healthy);

                for (size_t i = p->n_streams; i > 0; i--) {
                        GrpcCall *call = p->streams[i - 1];

                        r = grpc_call_send_latest(call, p->law_msg, p->law_len);
                        if (r < 0) {
                                log_debug_errno(r, "%s: dropping a ListAndWatch stream: %m", p->resource);
                                plugin_drop_stream(p, call);
                        }
                }
        }

        if (!p->wants_socket) {
                r = plugin_listen(p);
                if (r < 0)
                        return r;
        }
        return 0;
}

int plugin_set_options(Plugin *p, bool pre_start_required, bool get_preferred_allocation_available) {
        if (p->pre_start_required == pre_start_required &&
            p->get_preferred_allocation_available == get_preferred_allocation_available)
                return 0;

        p->pre_start_required = pre_start_required;
        p->get_preferred_allocation_available = get_preferred_allocation_available;
        /* The kubelet learns the options only at registration. */
        if (p->server && (p->registered || registration_active(p)))
                return registration_start(p);
        return 0;
}

static int on_remove_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Plugin *p = userdata;

        /* Frees p and this source; sd-event allows that from the callback. */
        manager_remove_plugin(p->manager, p);
        return 0;
}

int plugin_schedule_removal(Plugin *p) {
        int r;

        if (p->remove_timer)
                return 0;
        r = sd_event_add_time_relative(p->manager->event, &p->remove_timer, CLOCK_MONOTONIC,
                                       PLUGIN_REMOVE_GRACE_USEC, 10 * 1000, on_remove_timer, p);
        if (r < 0) {
                log_warning_errno(r, "%s: failed to schedule removal, removing now: %m", p->resource);
                manager_remove_plugin(p->manager, p);
                return r;
        }
        (void) sd_event_source_set_description(p->remove_timer, "plugin-remove");
        log_info("%s is no longer advertised by the broker; closing its socket in %llu s unless it comes back.",
                 p->resource, PLUGIN_REMOVE_GRACE_USEC / 1000000ULL);
        return 0;
}

void plugin_cancel_removal(Plugin *p) {
        if (!p->remove_timer)
                return;
        p->remove_timer = sd_event_source_disable_unref(p->remove_timer);
        log_info("%s is advertised again; keeping it.", p->resource);
}
