/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * node-config.c — the named NVIDIA config in force: SetNodeConfig, its three properties,
 * the state file that keeps the name across restarts. See node-config.h.
 */

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "common/bus-names.h"
#include "common/config-overlay.h"
#include "common/log.h"
#include "common/util.h"
#include "daemons/broker/broker-dbus.h"
#include "daemons/broker/manager.h"
#include "daemons/broker/node-config.h"
#include "daemons/broker/reload.h"

void node_config_done(NodeConfig *n) {
        n->in_force = mfree(n->in_force);
        n->requested = mfree(n->requested);
        n->error = mfree(n->error);
        for (size_t i = 0; i < ELEMENTSOF(n->emitted); i++)
                n->emitted[i] = mfree(n->emitted[i]);
}

void node_config_set_user(Manager *m, const Config *c) {
        struct passwd *pw = NULL;

        if (!isempty(c->cluster_user))
                pw = getpwnam(c->cluster_user);
        m->node_config.cluster_uid = pw ? pw->pw_uid : (uid_t) -1;
}

static const DaemonArgs *args(Manager *m) {
        static const DaemonArgs none = {};

        return m->args ?: &none;
}

static int load_named(Manager *m, const Config *base, const char *name, Config **ret, char **ret_error) {
        const DaemonArgs *a = args(m);

        return config_load_named(a->config_path, a->overrides, a->n_overrides,
                                 base->nvidia_configs_directory, name, ret, ret_error);
}

/* What the request means under base: "" -> the default (or "": kgpu.yaml's own). */
static const char *resolve(const Config *base, const char *requested) {
        if (!isempty(requested))
                return requested;
        return base->nvidia_configs_default ?: "";
}

/* PropertiesChanged for those of the three that differ from what was last announced. */
static void emit_changed(Manager *m) {
        static const char * const names[] = { "NodeConfig", "NodeConfigRequested", "NodeConfigError" };
        const char *now[] = { m->node_config.in_force, m->node_config.requested, m->node_config.error };
        char *changed[ELEMENTSOF(names) + 1] = {};
        size_t n = 0;
        int r;

        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (!streq(now[i] ?: "", m->node_config.emitted[i] ?: "")) {
                        if (free_and_strdup(&m->node_config.emitted[i], now[i]) < 0) {
                                log_oom();
                                continue;       /* announced again next time */
                        }
                        changed[n++] = (char *) names[i];
                }
        if (n == 0 || !m->bus)
                return;
        r = sd_bus_emit_properties_changed_strv(m->bus, KGPU_BROKER_PATH, KGPU_BROKER_INTERFACE, changed);
        if (r < 0)
                log_debug_errno(r, "Failed to emit PropertiesChanged for the node config: %m");
}

static void set_error(Manager *m, const char *error) {
        (void) free_and_strdup(&m->node_config.error, isempty(error) ? NULL : error);
}

static int state_path(Manager *m, char **ret) {
        if (asprintf(ret, "%s/%s", m->config->state_directory, NODE_CONFIG_STATE_FILE) < 0)
                return -ENOMEM;
        return 0;
}

static void persist(Manager *m, const char *name) {
        _cleanup_free_ char *path = NULL, *text = NULL;
        int r;

        if (state_path(m, &path) < 0 || asprintf(&text, "%s\n", name) < 0) {
                log_oom();
                return;
        }
        r = write_file_atomic_at(AT_FDCWD, path, text, strlen(text), 0600);
        if (r < 0)
                log_warning_errno(r, "Failed to write %s, the named NVIDIA config '%s' is in force but a restart "
                                  "goes back to the one before: %m", path, name);
}

void node_config_commit(Manager *m, const char *name, const char *note) {
        if (!streq_ptr(m->node_config.in_force, name)) {
                (void) free_and_strdup(&m->node_config.in_force, name ?: "");
                persist(m, name ?: "");
        }
        set_error(m, note);
        emit_changed(m);
}

/* The state file said something that is not in force now: it says "" from now on, as
 * NodeConfig does (the reason stays in NodeConfigError). */
static int restore_refused(Manager *m, const char *why) {
        set_error(m, why);
        persist(m, "");
        return 0;
}

int node_config_restore(Manager *m) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_(resources_freep) Resources *res = NULL;
        _cleanup_free_ char *path = NULL, *name = NULL, *error = NULL, *why = NULL;
        const char *what = NULL;
        int r;

        r = state_path(m, &path);
        if (r < 0)
                return log_oom();
        /* O_NOFOLLOW is not needed: the state directory is the broker's alone (0700). */
        r = read_one_line_file_at(AT_FDCWD, path, CONFIG_NAME_MAX + 1, &name);
        if (r == -ENOENT)
                return 0;
        if (r == -ENOMEM)
                return log_oom();
        if (r < 0) {
                log_warning_errno(r, "Cannot read %s, using kgpu.yaml's own NVIDIA settings: %m", path);
                if (asprintf(&why, "%s: %s", path, strerror(-r)) < 0)
                        return log_oom();
                return restore_refused(m, why);
        }
        if (isempty(name))
                return 0;
        if (!config_name_valid(name)) {
                log_warning("%s holds no valid config name, ignored; using kgpu.yaml's own NVIDIA settings.", path);
                if (asprintf(&why, "%s: not a valid config name", path) < 0)
                        return log_oom();
                return restore_refused(m, why);
        }
        r = load_named(m, m->config, name, &c, &error);
        if (r >= 0) {
                r = resources_new_from_config(c, &res, &what);
                if (r == -EINVAL && asprintf(&error, "invalid %s", what ?: "configuration") < 0)
                        error = NULL;
        }
        if (r == -ENOMEM)
                return log_oom();
        if (r < 0) {
                log_warning("The named NVIDIA config '%s' in force before the restart cannot be used, using "
                            "kgpu.yaml's own NVIDIA settings: %s", name, error ?: strerror(-r));
                if (asprintf(&why, "named config '%s' in force before the restart: %s", name,
                             error ?: strerror(-r)) < 0)
                        return log_oom();
                return restore_refused(m, why);
        }
        resources_free(m->resources);
        m->resources = TAKE_PTR(res);
        config_free(m->config);
        m->config = TAKE_PTR(c);
        (void) free_and_strdup(&m->node_config.in_force, name);
        log_info("Named NVIDIA config '%s' in force (as before the restart).", name);
        return 0;
}

int node_config_load_for_reload(Manager *m, Config **ret, char **ret_name, char **ret_note, char **ret_error) {
        _cleanup_(config_freep) Config *base = NULL, *c = NULL;
        _cleanup_free_ char *error = NULL, *note = NULL, *name = NULL;
        const DaemonArgs *a = args(m);
        const char *want;
        int r;

        r = config_load(a->config_path, a->overrides, a->n_overrides, &base, ret_error);
        if (r < 0)
                return r;
        /* Never asked since the start: the name in force. */
        want = m->node_config.requested ? resolve(base, m->node_config.requested) : m->node_config.in_force;
        r = load_named(m, base, want, &c, &error);
        if (r == -ENOMEM)
                return r;
        if (r < 0 && !streq_ptr(want, m->node_config.in_force)) {
                /* The request still cannot be had: keep the one in force, re-read. */
                if (asprintf(&note, "%s", error ?: strerror(-r)) < 0)
                        return -ENOMEM;
                log_warning("The requested NVIDIA config '%s' is still not usable, keeping '%s': %s", want,
                            m->node_config.in_force, note);
                error = mfree(error);
                want = m->node_config.in_force;
                r = load_named(m, base, want, &c, &error);
        }
        if (r < 0) {
                *ret_error = TAKE_PTR(error);
                return r;
        }
        name = strdup(want ?: "");
        if (!name)
                return -ENOMEM;
        *ret = TAKE_PTR(c);
        *ret_name = TAKE_PTR(name);
        *ret_note = TAKE_PTR(note);
        return 0;
}

static int check_caller(Manager *m, sd_bus_message *msg, sd_bus_error *error) {
        uid_t uid = (uid_t) -1;
        int r;

        r = broker_dbus_caller_uid(m, msg, &uid);
        if (r >= 0 && (uid == 0 || uid == geteuid() ||
                       (m->node_config.cluster_uid != (uid_t) -1 && uid == m->node_config.cluster_uid)))
                return 0;
        if (r < 0)
                log_warning_errno(r, "Refusing SetNodeConfig from %s: cannot get its uid: %m",
                                  sd_bus_message_get_sender(msg) ?: "n/a");
        else
                log_warning("Refusing SetNodeConfig from %s (uid %u): only root and %s may call it.",
                            sd_bus_message_get_sender(msg) ?: "n/a", (unsigned) uid, m->config->cluster_user);
        return sd_bus_error_setf(error, KGPU_ERROR_ACCESS_DENIED, "SetNodeConfig is only allowed to root and user '%s'",
                                 m->config->cluster_user);
}

/* Records the refusal (the config in force stays) and answers it. */
static int refuse(Manager *m, sd_bus_error *error, const char *name, const char *message) {
        log_warning("Node config refused, '%s' stays in force: %s", m->node_config.in_force, message);
        set_error(m, message);
        emit_changed(m);
        return sd_bus_error_setf(error, name, "%s; the config in force stays ('%s')", message,
                                 m->node_config.in_force);
}

int node_config_set_method(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        _cleanup_(config_freep) Config *base = NULL, *c = NULL;
        _cleanup_free_ char *message = NULL, *want = NULL;
        const DaemonArgs *a;
        Manager *m = userdata;
        const char *name;
        int r;

        r = check_caller(m, msg, error);
        if (r < 0)
                return r;
        r = sd_bus_message_read(msg, "s", &name);
        if (r < 0)
                return r;
        if (strnlen(name, CONFIG_NAME_MAX + 1) > CONFIG_NAME_MAX)
                return sd_bus_error_setf(error, KGPU_ERROR_INVALID_ARGS, "Config name longer than %u bytes",
                                         CONFIG_NAME_MAX);
        r = free_and_strdup(&m->node_config.requested, name);
        if (r < 0)
                return r;
        if (!isempty(name) && !config_name_valid(name))
                return refuse(m, error, KGPU_ERROR_INVALID_ARGS,
                              "invalid config name: 1 to 253 characters of A-Z a-z 0-9 . _ - not starting with '.'");

        a = args(m);
        r = config_load(a->config_path, a->overrides, a->n_overrides, &base, &message);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return refuse(m, error, KGPU_ERROR_INVALID_CONFIG, message ?: strerror(-r));
        want = strdup(resolve(base, name));
        if (!want)
                return -ENOMEM;
        if (streq(want, m->node_config.in_force)) {
                log_info("Node config '%s' asked, '%s' already in force.", name, want);
                set_error(m, NULL);
                emit_changed(m);
                return sd_bus_reply_method_return(msg, NULL);
        }
        if (isempty(name) && isempty(want))
                log_info("Node config label unset and no nvidiaConfigs.default: kgpu.yaml's own NVIDIA settings.");
        r = load_named(m, base, want, &c, &message);
        if (r == -ENOMEM)
                return r;
        if (r == -ENOENT && isempty(name)) {
                _cleanup_free_ char *s = NULL;

                if (asprintf(&s, "nvidiaConfigs.default: %s", message ?: "no such config") < 0)
                        return -ENOMEM;
                return refuse(m, error, KGPU_ERROR_UNKNOWN_CONFIG, s);
        }
        if (r < 0)
                return refuse(m, error, r == -ENOENT ? KGPU_ERROR_UNKNOWN_CONFIG : KGPU_ERROR_INVALID_CONFIG,
                              message ?: strerror(-r));
        (void) sd_notify(false, "RELOADING=1\nSTATUS=Applying a named NVIDIA config...");
        r = broker_apply_config(m, TAKE_PTR(c), want, NULL, &message);
        (void) sd_notify(false, "READY=1");
        manager_update_status(m);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return refuse(m, error, KGPU_ERROR_INVALID_CONFIG, message ?: strerror(-r));
        log_info("Named NVIDIA config '%s' in force%s.", want, isempty(want) ? " (kgpu.yaml's own settings)" : "");
        return sd_bus_reply_method_return(msg, NULL);
}

int node_config_property_get(sd_bus *bus, const char *path, const char *interface, const char *property,
                             sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        const char *v;

        if (streq(property, "NodeConfig"))
                v = m->node_config.in_force;
        else if (streq(property, "NodeConfigRequested"))
                v = m->node_config.requested;
        else
                v = m->node_config.error;
        return sd_bus_message_append(reply, "s", v ?: "");
}
