/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * manager.c — kgpu-grpcd's Manager: bus, plugins and what the probe says of the kubelet.
 *
 * Contract: see manager.h. Kubelet restarts are seen by the probe (inotify on the
 * device-plugins directory, no polling) and reach us as a new KubeletInode: we put back
 * at once every socket of ours the kubelet deleted (it deletes them before it listens)
 * and register every listening resource again; a kubelet that does not accept yet is
 * tried again quickly (registration.c). One of our sockets deleted while the kubelet
 * stays (gone from PluginSockets) is made again and registered again.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <systemd/sd-daemon.h>

#include "common/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/grpc/podresources.h"
#include "daemons/grpc/broker-client.h"
#include "daemons/grpc/gpus-link.h"
#include "daemons/grpc/kubelet-link.h"
#include "daemons/grpc/manager.h"
#include "daemons/grpc/plugin.h"
#include "daemons/grpc/probe-gpus.h"
#include "daemons/grpc/registration.h"

int manager_new(sd_event *event, Config *config, Manager **ret) {
        Manager *m;

        if (!config)
                return -EINVAL;
        m = calloc(1, sizeof(*m));
        if (!m) {
                config_free(config);
                return -ENOMEM;
        }
        m->config = config;
        m->event = sd_event_ref(event);
        *ret = m;
        return 0;
}

static void manager_remove_sockets(Manager *m) {
        for (size_t i = 0; i < m->n_plugins; i++)
                plugin_free(m->plugins[i]);
        m->plugins = mfree(m->plugins);
        m->n_plugins = 0;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;


        /* Pending registrations and bus calls first, then the bus (its floating slots
         * release forwarded gRPC calls), then the servers and their sockets. */
        for (size_t i = 0; i < m->n_plugins; i++)
                registration_cancel(m->plugins[i]);
        m->pod_resources = pod_resources_client_free(m->pod_resources);
        if (m->bus) {
                broker_client_stop(m);
                kubelet_link_stop(m);
                gpus_link_stop(m);
                m->bus = sd_bus_flush_close_unref(m->bus);
        }
        manager_remove_sockets(m);
        m->gpus = probe_gpus_free(m->gpus);

        free(m->kubelet_state);
        free(m->device_plugin_path);
        free(m->registration_socket);
        free(m->pod_resources_socket);
        free(m->probe_last_error);
        free(m->last_failure);
        config_free(m->config);
        sd_event_unref(m->event);
        return mfree(m);
}

Plugin *manager_find_plugin(Manager *m, const char *resource) {
        for (size_t i = 0; i < m->n_plugins; i++)
                if (streq(m->plugins[i]->resource, resource))
                        return m->plugins[i];
        return NULL;
}

static Plugin *manager_find_plugin_by_socket(Manager *m, const char *name) {
        for (size_t i = 0; i < m->n_plugins; i++)
                if (streq(m->plugins[i]->socket_name, name))
                        return m->plugins[i];
        return NULL;
}

int manager_add_plugin(Manager *m, const char *resource, Plugin **ret) {
        _cleanup_(plugin_freep) Plugin *p = NULL;
        Plugin **n;
        int r;

        if (m->n_plugins >= GRPCD_RESOURCES_MAX)
                return -E2BIG;
        r = plugin_new(m, resource, &p);
        if (r < 0)
                return r;
        /* Two names that differ only in '/' vs '-' would share a socket. */
        if (manager_find_plugin_by_socket(m, p->socket_name))
                return -EEXIST;
        n = reallocarray(m->plugins, m->n_plugins + 1, sizeof(Plugin *));
        if (!n)
                return -ENOMEM;
        m->plugins = n;
        m->plugins[m->n_plugins++] = p;
        log_info("Serving resource %s on %s.", resource, p->socket_name);
        *ret = TAKE_PTR(p);
        return 0;
}

void manager_remove_plugin(Manager *m, Plugin *p) {
        for (size_t i = 0; i < m->n_plugins; i++)
                if (m->plugins[i] == p) {
                        memmove(m->plugins + i, m->plugins + i + 1,
                                (m->n_plugins - i - 1) * sizeof(Plugin *));
                        m->n_plugins--;
                        log_info("Resource %s is no longer advertised; closed %s.", p->resource, p->socket_name);
                        plugin_free(p);
                        manager_update_status(m);
                        return;
                }
}

bool manager_kubelet_present(Manager *m) {
        return m->kubelet_inode != 0;
}

void manager_update_status(Manager *m) {
        unsigned n = 0;

        for (size_t i = 0; i < m->n_plugins; i++)
                n += m->plugins[i]->registered;
        if (m->status_sent && n == m->last_status_registered)
                return;
        m->status_sent = true;
        m->last_status_registered = n;
        (void) sd_notifyf(false, "STATUS=%u resource%s registered", n, n == 1 ? "" : "s");
}

/* Makes missing sockets of listening plugins again (they register once the socket is
 * there); registers the others again (all, if all_register; else those not registered
 * and not trying). */
static void manager_restore_plugins(Manager *m, bool all_register) {
        for (size_t i = 0; i < m->n_plugins; i++) {
                Plugin *p = m->plugins[i];
                int r;

                if (!plugin_is_listening(p))
                        continue; /* registers itself once its devices arrive */
                if (p->listen_slot) {
                        p->listen_after_kubelet = all_register;
                        continue; /* registers when the socket is there */
                }
                if (!plugin_socket_intact(p)) {
                        if (p->server)
                                log_info("%s: socket %s was removed, making it again.", p->resource, p->socket_name);
                        p->listen_after_kubelet = all_register;
                        r = plugin_listen(p);
                        if (r < 0)
                                log_error_errno(r, "%s: failed to ask for the socket %s: %m", p->resource,
                                                p->socket_name);
                        continue;
                }
                if (all_register) {
                        (void) registration_start(p);
                        p->register_after_usec = m->kubelet_appeared_usec;
                } else if (!p->registered && !registration_active(p))
                        (void) registration_start(p);
        }
}

static void manager_kubelet_appeared(Manager *m) {
        log_info("Kubelet socket %s appeared; registering %zu resource(s).", m->registration_socket ?: "",
                 m->n_plugins);
        m->kubelet_appeared_usec = now_usec(CLOCK_MONOTONIC);
        manager_restore_plugins(m, true);
}

static void manager_kubelet_gone(Manager *m) {
        log_struct(LOG_NOTICE, KGPU_MESSAGE_KUBELET_GONE,
                   "Kubelet socket %s was removed; waiting for the kubelet to come back.",
                   m->registration_socket ?: "");
        for (size_t i = 0; i < m->n_plugins; i++)
                registration_cancel(m->plugins[i]);
        manager_update_status(m);
}

void manager_kubelet_update(Manager *m, uint64_t old_inode) {
        if (m->kubelet_inode != old_inode) {
                if (old_inode != 0)
                        manager_kubelet_gone(m);
                if (m->kubelet_inode != 0) {
                        manager_kubelet_appeared(m);
                        return;
                }
        }
        /* Put back what was removed and register what is not registered (after the probe
         * came back, say). Also while the kubelet's socket is absent from a directory that
         * exists: a starting kubelet removes every plugin socket before it listens, so
         * ours are back by the time it does and only registering remains then. */
        if (manager_kubelet_present(m) || streq_ptr(m->kubelet_state, "absent"))
                manager_restore_plugins(m, false);
}

int manager_start(Manager *m) {
        int r;

        r = bus_open_attached(m->event, "kgpu-grpcd", &m->bus);
        if (r < 0)
                return r;

        r = pod_resources_client_new(m, &m->pod_resources);
        if (r >= 0)
                r = pod_resources_client_start(m->pod_resources);
        if (r < 0)
                return log_error_errno(r, "Failed to set up PodResources reconciliation: %m");

        r = kubelet_link_start(m);
        if (r < 0)
                return log_error_errno(r, "Failed to follow %s: %m", "io.kgpu.Probe1");

        /* Before the broker: its answers are checked against the probe's GPU objects. */
        r = gpus_link_start(m);
        if (r < 0)
                return log_error_errno(r, "Failed to follow the GPU objects of %s: %m", "io.kgpu.Probe1");

        r = broker_client_start(m);
        if (r < 0)
                return log_error_errno(r, "Failed to follow %s: %m", "io.kgpu.Broker1");

        manager_update_status(m);
        return 0;
}
