/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * manager.c — kgpu-grpcd's Manager: bus, plugins and the kubelet directory watch.
 *
 * Contract: see manager.h. Kubelet restarts are seen through inotify on the
 * device-plugins directory (no polling): when the kubelet socket is created again, we
 * wait until it accepts a connection (short retry timer), put back any of our sockets
 * that were deleted and register every listening resource again. One of our sockets
 * deleted while the kubelet socket stays is recreated and registered again.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"
#include "daemons/grpc/podresources.h"
#include "daemons/grpc/reload.h"
#include "daemons/grpc/broker-client.h"
#include "daemons/grpc/manager.h"
#include "daemons/grpc/plugin.h"
#include "daemons/grpc/registration.h"

/* The kubelet binds its socket before it listens: inotify shows the file, connect()
 * tells when it accepts. Retry quickly for a while, then slowly (a stale socket file). */
#define KUBELET_PROBE_DELAY_MIN_USEC (1 * 1000ULL)
#define KUBELET_PROBE_DELAY_FAST_USEC (10 * 1000ULL)
#define KUBELET_PROBE_FAST_PERIOD_USEC (10 * 1000 * 1000ULL)
#define KUBELET_PROBE_DELAY_SLOW_USEC (1000 * 1000ULL)

int manager_new(sd_event *event, Config *config, Manager **ret) {
        _cleanup_(manager_freep) Manager *m = NULL;
        const char *slash;

        if (!config || isempty(config->device_plugin_path) || config->device_plugin_path[0] != '/') {
                config_free(config);
                return -EINVAL;
        }

        m = calloc(1, sizeof(*m));
        if (!m) {
                config_free(config);
                return -ENOMEM;
        }
        /* Owned from here on, also on failure. */
        m->config = config;
        m->event = sd_event_ref(event);
        m->inotify_fd = -EBADF;
        m->plugins_wd = -1;
        m->kubelet_wd = -1;

        if (!isempty(config->kubelet_socket))
                m->kubelet_socket = strdup(config->kubelet_socket);
        else if (asprintf(&m->kubelet_socket, "%s/kubelet.sock", config->device_plugin_path) < 0)
                m->kubelet_socket = NULL;
        if (!m->kubelet_socket)
                return -ENOMEM;
        if (m->kubelet_socket[0] != '/')
                return -EINVAL;
        slash = strrchr(m->kubelet_socket, '/');
        if (isempty(slash + 1))
                return -EINVAL;
        m->kubelet_socket_name = strdup(slash + 1);
        if (!m->kubelet_socket_name)
                return -ENOMEM;

        *ret = TAKE_PTR(m);
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

        m->inotify_source = sd_event_source_disable_unref(m->inotify_source);
        m->kubelet_probe_source = sd_event_source_disable_unref(m->kubelet_probe_source);
        m->inotify_fd = safe_close(m->inotify_fd);

        /* Pending registrations and bus calls first, then the bus (its floating slots
         * release forwarded gRPC calls), then the servers and their sockets. */
        for (size_t i = 0; i < m->n_plugins; i++)
                registration_cancel(m->plugins[i]);
        m->pod_resources = pod_resources_client_free(m->pod_resources);
        if (m->bus) {
                broker_client_stop(m);
                m->bus = sd_bus_flush_close_unref(m->bus);
        }
        manager_remove_sockets(m);

        free(m->kubelet_socket);
        free(m->kubelet_socket_name);
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
        log_info("Serving resource %s on %s.", resource, p->socket_path);
        *ret = TAKE_PTR(p);
        return 0;
}

void manager_remove_plugin(Manager *m, Plugin *p) {
        for (size_t i = 0; i < m->n_plugins; i++)
                if (m->plugins[i] == p) {
                        memmove(m->plugins + i, m->plugins + i + 1,
                                (m->n_plugins - i - 1) * sizeof(Plugin *));
                        m->n_plugins--;
                        log_info("Resource %s is no longer advertised; closed %s.", p->resource, p->socket_path);
                        plugin_free(p);
                        manager_update_status(m);
                        return;
                }
}

bool manager_kubelet_socket_exists(Manager *m) {
        struct stat st;

        return fstatat(AT_FDCWD, m->kubelet_socket, &st, 0) >= 0 && S_ISSOCK(st.st_mode);
}

bool manager_kubelet_accepting(Manager *m) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        _cleanup_close_ int fd = -EBADF;
        size_t l = strlen(m->kubelet_socket);

        if (l >= sizeof(sa.sun_path))
                return false;
        memcpy(sa.sun_path, m->kubelet_socket, l);
        fd = socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC|SOCK_NONBLOCK, 0);
        if (fd < 0)
                return false;
        return connect(fd, (struct sockaddr *) &sa, offsetof(struct sockaddr_un, sun_path) + l + 1) >= 0;
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

/* Recreates missing sockets of listening plugins; re-registers them (all, if all_register). */
static void manager_restore_plugins(Manager *m, bool all_register) {
        for (size_t i = 0; i < m->n_plugins; i++) {
                Plugin *p = m->plugins[i];
                bool lost;
                int r;

                if (!plugin_is_listening(p))
                        continue; /* registers itself once its devices arrive */
                lost = !plugin_socket_intact(p);
                if (lost) {
                        r = plugin_listen(p);
                        if (r < 0) {
                                log_error_errno(r, "%s: failed to recreate %s: %m", p->resource, p->socket_path);
                                continue;
                        }
                        log_info("%s: socket %s was removed, recreated it.", p->resource, p->socket_path);
                }
                if (lost || all_register) {
                        (void) registration_start(p);
                        if (all_register)
                                p->register_after_usec = m->kubelet_appeared_usec;
                }
        }
}

static int on_kubelet_probe(sd_event_source *s, uint64_t usec, void *userdata);

static void manager_kubelet_probe(Manager *m) {
        int r;

        m->kubelet_probe_source = sd_event_source_disable_unref(m->kubelet_probe_source);

        if (manager_kubelet_accepting(m)) {
                log_info("Kubelet socket %s accepts connections; registering %zu resource(s).",
                         m->kubelet_socket, m->n_plugins);
                manager_restore_plugins(m, true);
                return;
        }
        if (!manager_kubelet_socket_exists(m))
                return; /* gone again; the watch tells us when it is back */

        if (now_usec(CLOCK_MONOTONIC) - m->kubelet_appeared_usec > KUBELET_PROBE_FAST_PERIOD_USEC)
                m->kubelet_probe_delay_usec = KUBELET_PROBE_DELAY_SLOW_USEC;
        else
                m->kubelet_probe_delay_usec = m->kubelet_probe_delay_usec == 0 ? KUBELET_PROBE_DELAY_MIN_USEC :
                        MIN(m->kubelet_probe_delay_usec * 2, KUBELET_PROBE_DELAY_FAST_USEC);
        r = sd_event_add_time_relative(m->event, &m->kubelet_probe_source, CLOCK_MONOTONIC,
                                       m->kubelet_probe_delay_usec, 1 /* usec, not the 250 ms default */,
                                       on_kubelet_probe, m);
        if (r < 0)
                log_error_errno(r, "Failed to schedule a kubelet socket check: %m");
}

static int on_kubelet_probe(sd_event_source *s, uint64_t usec, void *userdata) {
        manager_kubelet_probe(userdata);
        return 0;
}

static void manager_kubelet_appeared(Manager *m) {
        log_info("Kubelet socket %s appeared.", m->kubelet_socket);
        m->kubelet_appeared_usec = now_usec(CLOCK_MONOTONIC);
        m->kubelet_probe_delay_usec = 0;
        manager_kubelet_probe(m);
}

static void manager_kubelet_gone(Manager *m) {
        log_struct(LOG_NOTICE, KGPU_MESSAGE_KUBELET_GONE,
                   "Kubelet socket %s was removed; waiting for the kubelet to come back.",
                   m->kubelet_socket);
        m->kubelet_probe_source = sd_event_source_disable_unref(m->kubelet_probe_source);
        for (size_t i = 0; i < m->n_plugins; i++)
                registration_cancel(m->plugins[i]);
        manager_update_status(m);
}

static int on_inotify(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Manager *m = userdata;
        bool kubelet_created = false, kubelet_deleted = false, overflow = false, lost = false;

        for (;;) {
                _Alignas(struct inotify_event) uint8_t buf[4096];
                ssize_t l;

                l = read(fd, buf, sizeof(buf));
                if (l < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                break;
                        log_error_errno(errno, "Failed to read inotify events: %m");
                        return sd_event_exit(m->event, EXIT_FAILURE);
                }
                if (l == 0)
                        break;

                for (uint8_t *p = buf; p < buf + l; ) {
                        struct inotify_event *e = (struct inotify_event *) p;

                        if ((size_t) (buf + l - p) < sizeof(*e) ||
                            (size_t) (buf + l - p) < sizeof(*e) + e->len)
                                break;
                        p += sizeof(*e) + e->len;

                        if (e->mask & IN_Q_OVERFLOW) {
                                overflow = true;
                                continue;
                        }
                        if (e->mask & IN_IGNORED) {
                                log_warning("The watch on a kubelet directory went away (directory removed?).");
                                continue;
                        }
                        if (e->len == 0)
                                continue;
                        if (e->wd == m->kubelet_wd && streq(e->name, m->kubelet_socket_name)) {
                                if (e->mask & (IN_CREATE|IN_MOVED_TO))
                                        kubelet_created = true;
                                if (e->mask & (IN_DELETE|IN_MOVED_FROM))
                                        kubelet_deleted = true;
                        }
                        if (e->wd == m->plugins_wd && (e->mask & (IN_DELETE|IN_MOVED_FROM)) &&
                            manager_find_plugin_by_socket(m, e->name))
                                lost = true;
                }
        }

        /* Decide from the state now, not from the order of events in the batch. */
        if (manager_kubelet_socket_exists(m)) {
                if (kubelet_created || overflow)
                        manager_kubelet_appeared(m);
                else if (lost && !m->kubelet_probe_source)
                        manager_restore_plugins(m, false);
        } else if (kubelet_deleted || overflow)
                manager_kubelet_gone(m);
        return 0;
}

int manager_watch_start(Manager *m) {
        _cleanup_free_ char *kdir = NULL;
        char *slash;
        int r;

        r = mkdir_p(m->config->device_plugin_path, 0755);
        if (r < 0)
                return log_error_errno(r, "Failed to create %s: %m", m->config->device_plugin_path);

        m->inotify_fd = inotify_init1(IN_NONBLOCK|IN_CLOEXEC);
        if (m->inotify_fd < 0)
                return log_error_errno(errno, "Failed to create an inotify instance: %m");

        m->plugins_wd = inotify_add_watch(m->inotify_fd, m->config->device_plugin_path,
                                          IN_CREATE|IN_DELETE|IN_MOVED_TO|IN_MOVED_FROM|IN_ONLYDIR);
        if (m->plugins_wd < 0)
                return log_error_errno(errno, "Failed to watch %s: %m", m->config->device_plugin_path);

        kdir = strdup(m->kubelet_socket);
        if (!kdir)
                return log_oom();
        slash = strrchr(kdir, '/');
        if (slash == kdir)
                slash[1] = 0;
        else
                *slash = 0;
        /* Same directory (the usual case): inotify returns the same watch descriptor. */
        m->kubelet_wd = inotify_add_watch(m->inotify_fd, kdir,
                                          IN_CREATE|IN_DELETE|IN_MOVED_TO|IN_MOVED_FROM|IN_ONLYDIR);
        if (m->kubelet_wd < 0)
                return log_error_errno(errno, "Failed to watch %s: %m", kdir);

        r = sd_event_add_io(m->event, &m->inotify_source, m->inotify_fd, EPOLLIN, on_inotify, m);
        if (r < 0)
                return log_error_errno(r, "Failed to add the inotify event source: %m");
        /* Before bus traffic: re-registration after a kubelet restart should not wait. */
        (void) sd_event_source_set_priority(m->inotify_source, SD_EVENT_PRIORITY_NORMAL - 10);
        (void) sd_event_source_set_description(m->inotify_source, "kubelet-dir-watch");

        if (!manager_kubelet_socket_exists(m))
                log_notice("Kubelet socket %s does not exist yet; registering when it appears.",
                           m->kubelet_socket);
        return 0;
}

int manager_start(Manager *m) {
        int r;

        r = manager_watch_start(m);
        if (r < 0)
                return r;

        r = sd_bus_open_system(&m->bus);
        if (r < 0)
                return log_error_errno(r, "Failed to connect to the system bus: %m");
        (void) sd_bus_set_description(m->bus, "kgpu-grpcd");
        r = sd_bus_attach_event(m->bus, m->event, SD_EVENT_PRIORITY_NORMAL);
        if (r < 0)
                return log_error_errno(r, "Failed to attach the bus to the event loop: %m");
        r = sd_bus_set_exit_on_disconnect(m->bus, true);
        if (r < 0)
                return log_error_errno(r, "Failed to set exit-on-disconnect: %m");

        if (m->args) {
                r = grpcd_reload_watch_sighup(m);
                if (r < 0)
                        return log_error_errno(r, "Failed to handle SIGHUP: %m");
        }

        r = pod_resources_client_new(m, &m->pod_resources);
        if (r >= 0)
                r = pod_resources_client_start(m->pod_resources);
        if (r < 0)
                return log_error_errno(r, "Failed to set up PodResources reconciliation: %m");

        r = broker_client_start(m);
        if (r < 0)
                return log_error_errno(r, "Failed to follow %s: %m", "io.kgpu.Broker1");

        manager_update_status(m);
        return 0;
}
