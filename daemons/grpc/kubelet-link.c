/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * kubelet-link.c — kgpu-grpcd reaches the kubelet through the probe (see kubelet-link.h).
 */

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/bus-names.h"
#include "common/bus-util.h"
#include "common/log.h"
#include "common/resource-name.h"
#include "common/util.h"
#include "daemons/grpc/kubelet-link.h"
#include "daemons/grpc/manager.h"
#include "daemons/grpc/plugin.h"
#include "daemons/grpc/podresources.h"

/* A failure with the same text is logged at warning at most this often. */
#define KUBELET_LINK_LOG_INTERVAL_USEC (60 * 1000 * 1000ULL)

static uint64_t link_timeout_usec(Manager *m) {
        uint32_t ms = m->config->register_timeout_ms;

        return (uint64_t) (ms > 0 ? ms : 5000) * 1000ULL;
}

void kubelet_link_log_failure(Manager *m, const char *what, const char *message) {
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        _cleanup_free_ char *text = NULL;
        struct passwd *pw;
        uid_t uid = geteuid();

        pw = getpwuid(uid);
        if (asprintf(&text, "%s failed: %s (kgpu-grpcd runs as uid %u%s%s%s and reaches the kubelet's "
                     "directory %s only through kgpu-probed)", what, message ?: "unknown error", (unsigned) uid,
                     pw ? " (" : "", pw ? pw->pw_name : "", pw ? ")" : "",
                     isempty(m->device_plugin_path) ? "(unknown)" : m->device_plugin_path) < 0) {
                log_oom();
                return;
        }
        if (!streq_ptr(text, m->last_failure) || now - m->last_failure_usec >= KUBELET_LINK_LOG_INTERVAL_USEC) {
                log_warning("%s.", text);
                m->last_failure_usec = now;
                free_and_replace(m->last_failure, text);
        } else
                log_debug("%s.", text);
}

static void plugin_sockets_clear(Manager *m) {
        for (size_t i = 0; i < m->n_plugin_sockets; i++)
                free(m->plugin_sockets[i].name);
        m->plugin_sockets = mfree(m->plugin_sockets);
        m->n_plugin_sockets = 0;
}

bool kubelet_link_socket_listed(Manager *m, const char *name, uint64_t inode) {
        if (!m->probe_present)
                return true;
        for (size_t i = 0; i < m->n_plugin_sockets; i++)
                if (m->plugin_sockets[i].inode == inode && streq(m->plugin_sockets[i].name, name))
                        return true;
        return false;
}

static int read_plugin_sockets(Manager *m, sd_bus_message *msg) {
        KubeletLinkEntry *l = NULL;
        size_t n = 0, allocated = 0;
        int r;

        r = sd_bus_message_enter_container(msg, 'a', "(st)");
        if (r < 0)
                return r;
        for (;;) {
                const char *name;
                uint64_t inode;

                r = sd_bus_message_read(msg, "(st)", &name, &inode);
                if (r < 0)
                        goto fail;
                if (r == 0)
                        break;
                if (!resource_socket_name_is_ours(name))
                        continue;
                if (n >= GRPCD_RESOURCES_MAX) {
                        r = -E2BIG;
                        goto fail;
                }
                r = array_reserve((void **) &l, &allocated, n + 1, sizeof(*l));
                if (r < 0)
                        goto fail;
                l[n].name = strdup(name);
                if (!l[n].name) {
                        r = -ENOMEM;
                        goto fail;
                }
                l[n++].inode = inode;
        }
        r = sd_bus_message_exit_container(msg);
        if (r < 0)
                goto fail;
        plugin_sockets_clear(m);
        m->plugin_sockets = l;
        m->n_plugin_sockets = n;
        return 0;
fail:
        for (size_t i = 0; i < n; i++)
                free(l[i].name);
        free(l);
        return r;
}

static int kubelet_property(sd_bus_message *msg, const char *name, const char *contents, void *userdata) {
        Manager *m = userdata;
        int r;

        if (streq(name, "KubeletInode") && streq(contents, "t"))
                r = sd_bus_message_read_basic(msg, 't', &m->kubelet_inode);
        else if (streq(name, "KubeletState") && streq(contents, "s"))
                r = bus_read_string_dup(msg, &m->kubelet_state);
        else if (streq(name, "DevicePluginPath") && streq(contents, "s"))
                r = bus_read_string_dup(msg, &m->device_plugin_path);
        else if (streq(name, "RegistrationSocket") && streq(contents, "s"))
                r = bus_read_string_dup(msg, &m->registration_socket);
        else if (streq(name, "PodResourcesSocket") && streq(contents, "s"))
                r = bus_read_string_dup(msg, &m->pod_resources_socket);
        else if (streq(name, "LastError") && streq(contents, "s"))
                r = bus_read_string_dup(msg, &m->probe_last_error);
        else if (streq(name, "PluginSockets") && streq(contents, "a(st)"))
                r = read_plugin_sockets(m, msg);
        else
                return 0;
        return r < 0 ? r : 1;
}

/* Applies an a{sv} of io.kgpu.Kubelet1 properties (GetAll or PropertiesChanged). */
static int apply_properties(Manager *m, sd_bus_message *msg) {
        _cleanup_free_ char *old_state = NULL;
        uint64_t old_inode = m->kubelet_inode;
        int r;

        old_state = m->kubelet_state ? strdup(m->kubelet_state) : NULL;
        r = bus_read_property_map(msg, kubelet_property, m);
        if (r < 0)
                return r;

        if (m->kubelet_state && startswith(m->kubelet_state, "refused") && !streq_ptr(old_state, m->kubelet_state)) {
                _cleanup_free_ char *what = NULL;

                if (asprintf(&what, "Reaching the kubelet at %s", m->registration_socket ?: "(unknown)") >= 0)
                        kubelet_link_log_failure(m, what, m->kubelet_state);
        }
        manager_kubelet_update(m, old_inode);
        return 0;
}

static int on_properties_changed(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const char *interface;
        int r;

        r = sd_bus_message_read(msg, "s", &interface);
        if (r < 0 || !streq(interface, KGPU_KUBELET_INTERFACE))
                return 0;
        if (!m->probe_present)
                return 0;       /* GetAll follows the probe's appearance */
        r = apply_properties(m, msg);
        if (r < 0)
                log_warning_errno(r, "Malformed io.kgpu.Kubelet1 PropertiesChanged signal, ignoring: %m");
        return 0;
}

static int on_get_all_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const sd_bus_error *e;
        int r;

        m->probe_get_slot = sd_bus_slot_unref(m->probe_get_slot);
        e = sd_bus_message_get_error(reply);
        if (e) {
                if (!sd_bus_error_has_name(e, SD_BUS_ERROR_SERVICE_UNKNOWN) &&
                    !sd_bus_error_has_name(e, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
                        log_warning("Reading io.kgpu.Kubelet1 of kgpu-probed failed: %s", e->message ?: e->name);
                else if (!m->probe_wait_logged) {
                        log_notice("kgpu-probed is not running; the kubelet is reached through it, waiting.");
                        m->probe_wait_logged = true;
                }
                return 0;
        }
        if (!m->probe_present)
                log_info("kgpu-probed is on the bus; reaching the kubelet through it.");
        m->probe_present = true;
        m->probe_wait_logged = false;
        r = apply_properties(m, reply);
        if (r < 0)
                log_warning_errno(r, "Malformed io.kgpu.Kubelet1 properties, ignoring: %m");
        /* A reconciliation that found no probe to reach the kubelet through runs now. */
        if (m->pod_resources)
                (void) pod_resources_sync(m->pod_resources, NULL, NULL);
        return 0;
}

static int probe_get_all(Manager *m) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *req = NULL;
        int r;

        m->probe_get_slot = sd_bus_slot_unref(m->probe_get_slot);
        r = sd_bus_message_new_method_call(m->bus, &req, KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH,
                                           "org.freedesktop.DBus.Properties", "GetAll");
        if (r < 0)
                return r;
        r = sd_bus_message_set_auto_start(req, false);
        if (r < 0)
                return r;
        r = sd_bus_message_append(req, "s", KGPU_KUBELET_INTERFACE);
        if (r < 0)
                return r;
        return sd_bus_call_async(m->bus, &m->probe_get_slot, req, on_get_all_reply, m, link_timeout_usec(m));
}

static int on_probe_owner_changed(sd_bus_message *msg, void *userdata, sd_bus_error *ret_error) {
        Manager *m = userdata;
        const char *name, *old_owner, *new_owner;
        int r;

        r = sd_bus_message_read(msg, "sss", &name, &old_owner, &new_owner);
        if (r < 0 || !streq(name, KGPU_PROBE_BUS_NAME))
                return 0;
        if (isempty(new_owner)) {
                if (m->probe_present)
                        log_notice("kgpu-probed left the bus: the plugin sockets keep serving; registering "
                                   "with the kubelet waits for it.");
                m->probe_present = false;
                m->probe_get_slot = sd_bus_slot_unref(m->probe_get_slot);
                return 0;
        }
        /* A new probe: everything it knows may have changed while it was away. */
        m->probe_present = false;
        r = probe_get_all(m);
        if (r < 0)
                log_warning_errno(r, "Failed to read io.kgpu.Kubelet1, ignoring: %m");
        return 0;
}

int kubelet_link_start(Manager *m) {
        int r;

        r = sd_bus_add_match_async(m->bus, &m->probe_owner_slot,
                                   "type='signal',"
                                   "sender='org.freedesktop.DBus',"
                                   "path='/org/freedesktop/DBus',"
                                   "interface='org.freedesktop.DBus',"
                                   "member='NameOwnerChanged',"
                                   "arg0='" KGPU_PROBE_BUS_NAME "'",
                                   on_probe_owner_changed, NULL, m);
        if (r < 0)
                return r;
        r = sd_bus_add_match_async(m->bus, &m->probe_props_slot,
                                   "type='signal',"
                                   "sender='" KGPU_PROBE_BUS_NAME "',"
                                   "path='" KGPU_PROBE_PATH "',"
                                   "interface='org.freedesktop.DBus.Properties',"
                                   "member='PropertiesChanged',"
                                   "arg0='" KGPU_KUBELET_INTERFACE "'",
                                   on_properties_changed, NULL, m);
        if (r < 0)
                return r;
        /* Sent after the AddMatch calls on the same connection: no change falls between. */
        return probe_get_all(m);
}

void kubelet_link_stop(Manager *m) {
        m->probe_owner_slot = sd_bus_slot_unref(m->probe_owner_slot);
        m->probe_props_slot = sd_bus_slot_unref(m->probe_props_slot);
        m->probe_get_slot = sd_bus_slot_unref(m->probe_get_slot);
        plugin_sockets_clear(m);
}

static int error_to_errno(const sd_bus_error *e) {
        if (sd_bus_error_has_name(e, KGPU_ERROR_REFUSED))
                return -EPERM;
        if (sd_bus_error_has_name(e, KGPU_ERROR_KUBELET_UNAVAILABLE))
                return -ECONNREFUSED;
        if (sd_bus_error_has_name(e, KGPU_ERROR_ACCESS_DENIED) ||
            sd_bus_error_has_name(e, SD_BUS_ERROR_ACCESS_DENIED))
                return -EACCES;
        if (sd_bus_error_has_name(e, SD_BUS_ERROR_NO_REPLY) || sd_bus_error_has_name(e, SD_BUS_ERROR_TIMEOUT))
                return -ETIMEDOUT;
        if (sd_bus_error_has_name(e, SD_BUS_ERROR_SERVICE_UNKNOWN) ||
            sd_bus_error_has_name(e, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
                return -EHOSTDOWN;
        return -EIO;
}

/* Takes the fd of a reply's "h" argument for ourselves. */
static int reply_take_fd(sd_bus_message *reply) {
        int fd, r;

        r = sd_bus_message_read(reply, "h", &fd);
        if (r < 0)
                return r;
        fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        return fd < 0 ? -errno : fd;
}

typedef struct ConnectCall {
        KubeletLinkConnected cb;
        void *userdata;
} ConnectCall;

static int on_connect_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        ConnectCall *c = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        int fd;

        if (e) {
                c->cb(error_to_errno(e), e->message ?: e->name, c->userdata);
                return 0;
        }
        fd = reply_take_fd(reply);
        c->cb(fd, fd < 0 ? "malformed reply of kgpu-probed" : NULL, c->userdata);
        return 0;
}

int kubelet_link_connect(Manager *m, KubeletLinkSocket which, KubeletLinkConnected cb, void *userdata,
                         sd_bus_slot **ret_slot) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *req = NULL;
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        ConnectCall *c;
        int r;

        r = sd_bus_message_new_method_call(m->bus, &req, KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH, KGPU_KUBELET_INTERFACE,
                                           which == KUBELET_LINK_REGISTRATION ? "ConnectKubelet" : "ConnectPodResources");
        if (r < 0)
                return r;
        r = sd_bus_message_set_auto_start(req, false);
        if (r < 0)
                return r;
        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        *c = (ConnectCall) { cb, userdata };
        r = sd_bus_call_async(m->bus, &slot, req, on_connect_reply, c, link_timeout_usec(m));
        if (r < 0) {
                free(c);
                return r;
        }
        /* The context goes with the slot: answered, cancelled or the bus closed. */
        r = sd_bus_slot_set_destroy_callback(slot, free);
        if (r < 0) {
                free(c);
                return r;
        }
        *ret_slot = TAKE_PTR(slot);
        return 0;
}

static int on_open_socket_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Plugin *p = userdata;
        const sd_bus_error *e = sd_bus_message_get_error(reply);
        uint64_t inode;
        int fd, r;

        p->listen_slot = sd_bus_slot_unref(p->listen_slot);
        if (e) {
                plugin_socket_failed(p, error_to_errno(e), e->message ?: e->name);
                return 0;
        }
        fd = reply_take_fd(reply);
        r = fd < 0 ? fd : sd_bus_message_read(reply, "t", &inode);
        if (r < 0) {
                safe_close(fd);
                plugin_socket_failed(p, r, "malformed reply of kgpu-probed");
                return 0;
        }
        plugin_socket_ready(p, fd, inode);
        return 0;
}

int kubelet_link_open_socket(Plugin *p) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *req = NULL;
        Manager *m = p->manager;
        int r;

        if (p->listen_slot)
                return 0;
        r = sd_bus_message_new_method_call(m->bus, &req, KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH, KGPU_KUBELET_INTERFACE,
                                           "OpenPluginSocket");
        if (r < 0)
                return r;
        r = sd_bus_message_set_auto_start(req, false);
        if (r < 0)
                return r;
        r = sd_bus_message_append(req, "s", p->resource);
        if (r < 0)
                return r;
        return sd_bus_call_async(m->bus, &p->listen_slot, req, on_open_socket_reply, p, link_timeout_usec(m));
}

void kubelet_link_close_socket(Plugin *p) {
        Manager *m = p->manager;
        int r;

        if (!m->bus || !sd_bus_is_open(m->bus) || p->socket_inode == 0)
                return;
        r = sd_bus_call_method_async(m->bus, NULL, KGPU_PROBE_BUS_NAME, KGPU_PROBE_PATH, KGPU_KUBELET_INTERFACE,
                                     "ClosePluginSocket", NULL, NULL, "st", p->resource, p->socket_inode);
        if (r < 0)
                log_debug_errno(r, "%s: failed to ask kgpu-probed to remove its socket, ignoring: %m", p->resource);
}
